package upscaletest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
)

// KeyAccounts are the accounts TestKeyStore gives keys to; a store that
// keeps accounts must have them before the suite adds keys.
var KeyAccounts = []string{"acme", "globex"}

// The keys the key suites add.
const (
	keyA = "upk_test_aaaaaaaaaaaaaaaaaaaaaaaa"
	keyB = "upk_test_bbbbbbbbbbbbbbbbbbbbbbbb"
	keyC = "upk_test_cccccccccccccccccccccccc"
)

// TestKeyStore checks that a KeyAdmin authenticates exactly the keys it was
// given, as their own accounts, refuses unknown and revoked keys with
// ErrUnauthorized, and follows KeyAdmin's rules for adding and revoking.
// newStore must return a store with no keys and with KeyAccounts.
func TestKeyStore(t *testing.T, newStore func(t *testing.T) upscale.KeyAdmin) {
	ctx := context.Background()
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

// TestKeyLister checks what a KeyLister keeps of each key beside
// TestKeyStore's rules: AddNamedKey's and AddKey's KeyInfo, ListKeys per
// account and the newest first, the use Authenticate records, and
// RevokeKeyID, which takes effect at once, never reaches another
// account's key, and finds no key by an ID that cannot be one (not
// upscale.ValidKeyID), such as one that is not UTF-8. newStore must return a store with no keys and with
// KeyAccounts; its clock must be the real one.
func TestKeyLister(t *testing.T, newStore func(t *testing.T) upscale.KeyLister) {
	ctx := context.Background()
	acme, globex := KeyAccounts[0], KeyAccounts[1]
	// within reports whether at is between from and now, as a store that
	// keeps times to the microsecond or the millisecond would say.
	within := func(at, from time.Time) bool {
		return !at.Before(from.Truncate(time.Millisecond)) && !at.After(time.Now())
	}
	setup := func(t *testing.T) (upscale.KeyLister, time.Time) {
		t.Helper()
		s, start := newStore(t), time.Now()
		if _, err := s.AddNamedKey(ctx, keyA, acme, "production"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond) // created later, to the millisecond
		if err := s.AddKey(ctx, keyB, acme); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AddNamedKey(ctx, keyC, globex, "globex's"); err != nil {
			t.Fatal(err)
		}
		return s, start
	}
	list := func(t *testing.T, s upscale.KeyLister, account string) []upscale.KeyInfo {
		t.Helper()
		keys, err := s.ListKeys(ctx, account)
		if err != nil {
			t.Fatalf("ListKeys(%s): %v", account, err)
		}
		return keys
	}

	t.Run("AddNamedKey", func(t *testing.T) {
		s := newStore(t)
		start := time.Now()
		info, err := s.AddNamedKey(ctx, keyA, acme, "CI – staging ✓")
		if err != nil {
			t.Fatal(err)
		}
		if info.ID != upscale.KeyID(keyA) || info.Hint != upscale.KeyHint(keyA) || info.Name != "CI – staging ✓" ||
			!within(info.Created, start) || !info.LastUsed.IsZero() || !info.Revoked.IsZero() {
			t.Errorf("AddNamedKey = %+v; want its ID, hint and name, created now, never used, not revoked", info)
		}
		if strings.Contains(info.Hint, keyA[8:len(keyA)-4]) || strings.Contains(info.ID, keyA[4:]) {
			t.Errorf("KeyInfo %+v shows the middle of the key", info)
		}
		if got, err := s.Authenticate(ctx, keyA); err != nil || got != acme {
			t.Errorf("Authenticate of a named key = %q, %v", got, err)
		}
		again, err := s.AddNamedKey(ctx, keyA, acme, "another name")
		if err != nil || again.ID != info.ID || again.Name != info.Name {
			t.Errorf("AddNamedKey again = %+v, %v; want the key as it was, name kept", again, err)
		}
		if _, err := s.AddNamedKey(ctx, keyA, globex, ""); !errors.Is(err, upscale.ErrKeyConflict) {
			t.Errorf("AddNamedKey of acme's key to globex: %v, want ErrKeyConflict", err)
		}
		for _, name := range []string{strings.Repeat("n", 65), "tab\there", "bad \xff utf-8"} {
			if _, err := s.AddNamedKey(ctx, keyB, acme, name); err == nil {
				t.Errorf("AddNamedKey named %q: accepted a name ValidateKeyName refuses", name)
			}
		}
		if _, err := s.Authenticate(ctx, keyB); !errors.Is(err, upscale.ErrUnauthorized) {
			t.Errorf("a key refused for its name authenticates: %v", err)
		}
	})

	t.Run("ListKeys", func(t *testing.T) {
		s, start := setup(t)
		keys := list(t, s, acme)
		if len(keys) != 2 || keys[0].ID != upscale.KeyID(keyB) || keys[1].ID != upscale.KeyID(keyA) {
			t.Fatalf("ListKeys(acme) = %+v; want keyB, then keyA (the newest first)", keys)
		}
		if b := keys[0]; b.Name != "" || b.Hint != upscale.KeyHint(keyB) || !within(b.Created, start) || !keys[1].Created.Before(b.Created) {
			t.Errorf("AddKey's key listed as %+v; want no name, its hint, created after keyA", b)
		}
		if keys := list(t, s, globex); len(keys) != 1 || keys[0].Name != "globex's" {
			t.Errorf("ListKeys(globex) = %+v; want only globex's key", keys)
		}
		if keys := list(t, s, "initech"); keys == nil || len(keys) != 0 {
			t.Errorf("ListKeys of an account without keys = %#v, want an empty list", keys)
		}
	})

	t.Run("LastUsed", func(t *testing.T) {
		s, _ := setup(t)
		before := time.Now()
		if _, err := s.Authenticate(ctx, keyA); err != nil {
			t.Fatal(err)
		}
		keys := list(t, s, acme)
		if a := keys[1]; !within(a.LastUsed, before) {
			t.Errorf("after Authenticate, keyA's LastUsed = %v; want between %v and now", a.LastUsed, before)
		}
		if b := keys[0]; !b.LastUsed.IsZero() {
			t.Errorf("keyB, never used, has LastUsed %v", b.LastUsed)
		}
	})

	t.Run("RevokeKeyID", func(t *testing.T) {
		s, _ := setup(t)
		if _, err := s.Authenticate(ctx, keyA); err != nil { // a cache in front keeps it
			t.Fatal(err)
		}
		if err := s.RevokeKeyID(ctx, globex, upscale.KeyID(keyA)); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("RevokeKeyID of acme's key by globex: %v, want ErrNotFound", err)
		}
		if got, err := s.Authenticate(ctx, keyA); err != nil || got != acme {
			t.Fatalf("acme's key after globex's try: %q, %v; want it working", got, err)
		}
		before := time.Now()
		if err := s.RevokeKeyID(ctx, acme, upscale.KeyID(keyA)); err != nil {
			t.Fatalf("RevokeKeyID: %v", err)
		}
		if _, err := s.Authenticate(ctx, keyA); !errors.Is(err, upscale.ErrUnauthorized) {
			t.Errorf("Authenticate right after RevokeKeyID: %v, want ErrUnauthorized", err)
		}
		keys := list(t, s, acme)
		if a := keys[1]; !within(a.Revoked, before) || !keys[0].Revoked.IsZero() {
			t.Errorf("after RevokeKeyID: %+v; want keyA revoked now, keyB not", keys)
		}
		if err := s.RevokeKeyID(ctx, acme, upscale.KeyID(keyA)); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("RevokeKeyID again: %v, want ErrNotFound", err)
		}
		if err := s.RevokeKeyID(ctx, acme, "0123456789abcdef"); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("RevokeKeyID of an unknown ID: %v, want ErrNotFound", err)
		}
		// IDs that no key has, whatever a page's path holds: not found,
		// never a failure of the store, and nothing revoked.
		b := upscale.KeyID(keyB)
		for _, id := range []string{"", b[:15], b + "0", strings.ToUpper(b), b[:15] + "\xff", "\xff\xfe", b + "\x00", "' OR ''='", b[:8] + "%"} {
			if err := s.RevokeKeyID(ctx, acme, id); !errors.Is(err, upscale.ErrNotFound) {
				t.Errorf("RevokeKeyID(%q), which cannot be a key's ID: %v, want ErrNotFound", id, err)
			}
		}
		if got, err := s.Authenticate(ctx, keyB); err != nil || got != acme {
			t.Errorf("acme's other key after a revocation: %q, %v", got, err)
		}
	})
}
