package accountstest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/upscalekit/upscale/accounts"
)

// TestSessionStore checks that an accounts.SessionStore keeps, per
// account, the latest sign-out it was given, to the nanosecond, also when
// sign-outs race, as replicas' would; and that an account that never
// signed out reads as the zero Time. newStore must return an empty store.
func TestSessionStore(t *testing.T, newStore func(t *testing.T) accounts.SessionStore) {
	ctx := context.Background()
	// A time with nanoseconds: a store that kept less would let a session
	// begun just before a sign-out outlive it.
	at := time.Date(2026, time.November, 20, 12, 0, 0, 123456789, time.UTC)
	signOut := func(t *testing.T, s accounts.SessionStore, account string, at time.Time) {
		t.Helper()
		if err := s.SignOut(ctx, account, at); err != nil {
			t.Fatalf("SignOut(%s, %v): %v", account, at, err)
		}
	}
	signedOutAt := func(t *testing.T, s accounts.SessionStore, account string, want time.Time) {
		t.Helper()
		got, err := s.SignedOutAt(ctx, account)
		if err != nil || !got.Equal(want) {
			t.Errorf("SignedOutAt(%s) = %v, %v; want %v", account, got, err, want)
		}
	}

	t.Run("NeverSignedOut", func(t *testing.T) {
		signedOutAt(t, newStore(t), "acme", time.Time{})
	})
	t.Run("OK", func(t *testing.T) {
		s := newStore(t)
		signOut(t, s, "acme", at)
		signedOutAt(t, s, "acme", at)
		signedOutAt(t, s, "globex", time.Time{})
		signOut(t, s, "acme", at.Add(time.Hour))
		signedOutAt(t, s, "acme", at.Add(time.Hour))
	})
	t.Run("OnlyForward", func(t *testing.T) {
		s := newStore(t)
		signOut(t, s, "acme", at)
		signOut(t, s, "acme", at.Add(-time.Nanosecond)) // a replica whose clock is behind
		signedOutAt(t, s, "acme", at)
		signOut(t, s, "acme", at.Add(time.Nanosecond))
		signedOutAt(t, s, "acme", at.Add(time.Nanosecond))
	})
	t.Run("Race", func(t *testing.T) {
		s := newStore(t)
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Go(func() {
				if err := s.SignOut(ctx, "acme", at.Add(time.Duration(i)*time.Millisecond)); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		signedOutAt(t, s, "acme", at.Add(19*time.Millisecond))
	})
}
