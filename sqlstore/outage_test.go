package sqlstore_test

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/internal/testservers"
)

// TestPostgresOutage: while the database cannot be reached, every
// operation the handler calls fails with ErrUnavailable (so callers get
// 503 and a Retry-After, not 500); once it is back, the same Store works
// again without being reopened, and the journal is exact.
func TestPostgresOutage(t *testing.T) {
	dsn, err := url.Parse(testservers.PostgresDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := testservers.NewProxy(t, dsn.Host)
	dsn.Host = proxy.Addr
	s := open(t, dsn.String(), upscale.LedgerOptions{})
	seed(t, s, 0, 0)
	ctx := context.Background()
	held, err := s.Reserve(ctx, "acme", false)
	if err != nil {
		t.Fatal(err)
	}

	proxy.Cut()
	checks := map[string]func() error{
		"Authenticate": func() error { _, err := s.Authenticate(ctx, replicaKey); return err },
		"Reserve":      func() error { _, err := s.Reserve(ctx, "acme", false); return err },
		"Commit":       func() error { return s.Commit(ctx, held.ID) },
		"Release":      func() error { return s.Release(ctx, held.ID) },
		"Ping":         func() error { return s.Ping(ctx) },
		"ListKeys":     func() error { _, err := s.ListKeys(ctx, "acme"); return err },
		"RevokeKeyID":  func() error { return s.RevokeKeyID(ctx, "acme", upscale.KeyID(replicaKey)) },
		"AddNamedKey":  func() error { _, err := s.AddNamedKey(ctx, upscale.NewKey("upk_"), "acme", "ci"); return err },
		"SignOut":      func() error { return s.SignOut(ctx, "acme", time.Now()) },
		"SignedOutAt":  func() error { _, err := s.SignedOutAt(ctx, "acme"); return err },
	}
	for name, call := range checks {
		if err := call(); !errors.Is(err, upscale.ErrUnavailable) {
			t.Errorf("%s while the database is down: %v, want ErrUnavailable", name, err)
		}
	}
	if err := s.RevokeKeyID(ctx, "acme", "\xff"); !errors.Is(err, upscale.ErrNotFound) {
		t.Errorf("RevokeKeyID of an ID no key can have, while the database is down: %v; want ErrNotFound, the database not asked", err)
	}

	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, held.ID); err != nil {
		t.Fatalf("Commit after the database came back: %v", err)
	}
	if _, err := s.Reserve(ctx, "acme", false); err != nil {
		t.Fatalf("Reserve after the database came back: %v", err)
	}
	checkJournal(t, s, time.Now())
}

// TestNotFoundIsNotAnOutage: errors that retrying cannot cure keep their
// meaning.
func TestNotFoundIsNotAnOutage(t *testing.T) {
	for name, newDB := range engines {
		t.Run(name, func(t *testing.T) {
			s := open(t, newDB(t), upscale.LedgerOptions{})
			err := s.Commit(context.Background(), "no-such-reservation")
			if !errors.Is(err, upscale.ErrNotFound) || errors.Is(err, upscale.ErrUnavailable) {
				t.Errorf("Commit of an unknown reservation: %v, want ErrNotFound only", err)
			}
		})
	}
}
