package upscaletest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/upscalekit/upscale"
)

// KeyAccounts are the accounts TestKeyStore gives keys to; a store that
// keeps accounts must have them before the suite adds keys.
var KeyAccounts = []string{"acme", "globex"}

// TestKeyStore checks that a KeyAdmin authenticates exactly the keys it was
// given, as their own accounts, refuses unknown and revoked keys with
// ErrUnauthorized, and follows KeyAdmin's rules for adding and revoking.
// newStore must return a store with no keys and with KeyAccounts.
func TestKeyStore(t *testing.T, newStore func(t *testing.T) upscale.KeyAdmin) {
	ctx := context.Background()
	const (
		keyA = "upk_test_aaaaaaaaaaaaaaaaaaaaaaaa"
		keyB = "upk_test_bbbbbbbbbbbbbbbbbbbbbbbb"
		keyC = "upk_test_cccccccccccccccccccccccc"
	)
	acme, globex := KeyAccounts[0], KeyAccounts[1]
	setup := func(t *testing.T) upscale.KeyAdmin {
		t.Helper()
		s := newStore(t)
		for key, account := range map[string]string{keyA: acme, keyB: globex} {
			if err := s.AddKey(ctx, key, account); err != nil {
				t.Fatalf("AddKey(%q): %v", key, err)
			}
		}
		return s
	}

	t.Run("OK", func(t *testing.T) {
		s := setup(t)
		for key, want := range map[string]string{keyA: acme, keyB: globex} {
			got, err := s.Authenticate(ctx, key)
			if err != nil || got != want {
				t.Errorf("Authenticate(%q) = %q, %v; want %q", key, got, err, want)
			}
		}
	})

	t.Run("ErrUnauthorized", func(t *testing.T) {
		s := setup(t)
		for _, key := range []string{"", keyA[:len(keyA)-1], keyA + "a", strings.ToUpper(keyA), keyC} {
			if _, err := s.Authenticate(ctx, key); !errors.Is(err, upscale.ErrUnauthorized) {
				t.Errorf("Authenticate(%q): err = %v, want ErrUnauthorized", key, err)
			}
		}
	})

	t.Run("RevokeKey", func(t *testing.T) {
		s := setup(t)
		if err := s.RevokeKey(ctx, keyA); err != nil {
			t.Fatalf("RevokeKey: %v", err)
		}
		if _, err := s.Authenticate(ctx, keyA); !errors.Is(err, upscale.ErrUnauthorized) {
			t.Errorf("revoked key: err = %v, want ErrUnauthorized", err)
		}
		if got, err := s.Authenticate(ctx, keyB); err != nil || got != globex {
			t.Errorf("other key after a revocation: %q, %v; want %s", got, err, globex)
		}
		if err := s.RevokeKey(ctx, keyA); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("RevokeKey of a revoked key: %v, want ErrNotFound", err)
		}
		if err := s.RevokeKey(ctx, keyC); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("RevokeKey of an unknown key: %v, want ErrNotFound", err)
		}
		if err := s.AddKey(ctx, keyA, acme); !errors.Is(err, upscale.ErrKeyConflict) {
			t.Errorf("AddKey of a revoked key: %v, want ErrKeyConflict: a revoked key stays revoked", err)
		}
		if _, err := s.Authenticate(ctx, keyA); !errors.Is(err, upscale.ErrUnauthorized) {
			t.Errorf("revoked key after a refused AddKey: err = %v, want ErrUnauthorized", err)
		}
	})

	t.Run("AddKeyAgain", func(t *testing.T) {
		s := setup(t)
		if err := s.AddKey(ctx, keyA, acme); err != nil {
			t.Errorf("AddKey of a key to its own account: %v, want nil (seeding can be repeated)", err)
		}
		if err := s.AddKey(ctx, keyA, globex); !errors.Is(err, upscale.ErrKeyConflict) {
			t.Errorf("AddKey of acme's key to globex: %v, want ErrKeyConflict", err)
		}
		if got, _ := s.Authenticate(ctx, keyA); got != acme {
			t.Errorf("after a refused AddKey the key belongs to %q, want %s", got, acme)
		}
	})

	t.Run("AddKeyValidates", func(t *testing.T) {
		s := setup(t)
		for _, key := range []string{"short", "upk_test_with space_0123456789"} {
			if err := s.AddKey(ctx, key, acme); err == nil {
				t.Errorf("AddKey(%q) accepted a key ValidateKey refuses", key)
			}
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		s := setup(t)
		var wg sync.WaitGroup
		for range 50 {
			wg.Go(func() {
				if got, err := s.Authenticate(ctx, keyA); err != nil || got != acme {
					t.Errorf("Authenticate = %q, %v", got, err)
				}
			})
		}
		wg.Wait()
	})
}
