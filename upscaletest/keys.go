package upscaletest

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/upscalekit/upscale"
)

// KeyStoreHarness is a KeyStore under test, with the admin operations the
// suite needs.
type KeyStoreHarness interface {
	upscale.KeyStore
	// Add makes key authenticate as accountID.
	Add(ctx context.Context, key, accountID string) error
	// Revoke makes key fail authentication from now on.
	Revoke(ctx context.Context, key string) error
}

// TestKeyStore checks that a KeyStore authenticates exactly the keys it was
// given, as their own accounts, and refuses unknown and revoked keys with
// ErrUnauthorized. newStore must return an empty store.
func TestKeyStore(t *testing.T, newStore func(t *testing.T) KeyStoreHarness) {
	ctx := context.Background()
	const (
		keyA = "upk_test_aaaaaaaaaaaaaaaaaaaaaaaa"
		keyB = "upk_test_bbbbbbbbbbbbbbbbbbbbbbbb"
	)
	setup := func(t *testing.T) KeyStoreHarness {
		t.Helper()
		s := newStore(t)
		for key, account := range map[string]string{keyA: "acme", keyB: "globex"} {
			if err := s.Add(ctx, key, account); err != nil {
				t.Fatalf("Add(%q): %v", key, err)
			}
		}
		return s
	}

	t.Run("OK", func(t *testing.T) {
		s := setup(t)
		for key, want := range map[string]string{keyA: "acme", keyB: "globex"} {
			got, err := s.Authenticate(ctx, key)
			if err != nil || got != want {
				t.Errorf("Authenticate(%q) = %q, %v; want %q", key, got, err, want)
			}
		}
	})

	t.Run("ErrUnauthorized", func(t *testing.T) {
		s := setup(t)
		for _, key := range []string{"", keyA[:len(keyA)-1], keyA + "a", "UPK_TEST_AAAAAAAAAAAAAAAAAAAAAAAA", "upk_test_cccccccccccccccccccccccc"} {
			if _, err := s.Authenticate(ctx, key); !errors.Is(err, upscale.ErrUnauthorized) {
				t.Errorf("Authenticate(%q): err = %v, want ErrUnauthorized", key, err)
			}
		}
	})

	t.Run("Revoke", func(t *testing.T) {
		s := setup(t)
		if err := s.Revoke(ctx, keyA); err != nil {
			t.Fatalf("Revoke: %v", err)
		}
		if _, err := s.Authenticate(ctx, keyA); !errors.Is(err, upscale.ErrUnauthorized) {
			t.Errorf("revoked key: err = %v, want ErrUnauthorized", err)
		}
		if got, err := s.Authenticate(ctx, keyB); err != nil || got != "globex" {
			t.Errorf("other key after a revoke: %q, %v; want globex", got, err)
		}
		if err := s.Add(ctx, keyA, "acme"); err == nil {
			t.Errorf("Add of a revoked key succeeded; a revoked key must stay revoked")
		}
	})

	t.Run("DuplicateKey", func(t *testing.T) {
		s := setup(t)
		if err := s.Add(ctx, keyA, "globex"); err == nil {
			t.Fatal("Add of an existing key succeeded")
		}
		if got, _ := s.Authenticate(ctx, keyA); got != "acme" {
			t.Errorf("after a refused Add the key belongs to %q, want acme", got)
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		s := setup(t)
		var wg sync.WaitGroup
		for range 50 {
			wg.Go(func() {
				if got, err := s.Authenticate(ctx, keyA); err != nil || got != "acme" {
					t.Errorf("Authenticate = %q, %v", got, err)
				}
			})
		}
		wg.Wait()
	})
}
