package upscaletest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
)

// TestIdempotencyStore checks an IdempotencyStore against its contract:
// one claim of a key runs, the others wait or replay its answer, another
// request under the same key is refused, accounts are independent, and
// leases and TTLs end on the store's clock. newStore must return an empty
// store on clock.
func TestIdempotencyStore(t *testing.T, newStore func(t *testing.T, clock *Clock) upscale.IdempotencyStore) {
	ctx := context.Background()
	setup := func(t *testing.T) (upscale.IdempotencyStore, *Clock) {
		clock := NewClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
		return newStore(t, clock), clock
	}
	claim := func(account, key, request string) upscale.IdempotencyClaim {
		return upscale.IdempotencyClaim{AccountID: account, Key: key, Fingerprint: sha256.Sum256([]byte(request)), Lease: time.Minute, TTL: 24 * time.Hour}
	}
	mustRun := func(t *testing.T, s upscale.IdempotencyStore, c upscale.IdempotencyClaim) {
		t.Helper()
		if answer, err := s.Claim(ctx, c); answer != nil || err != nil {
			t.Fatalf("Claim(%s, %s) = %v, %v; want nil, nil: the request runs", c.AccountID, c.Key, answer, err)
		}
	}
	answer := upscale.IdempotentAnswer{Status: 200, Body: []byte(`{"url":"https://x.test/a.png","resizedTo":null,"via":"free_pool"}` + "\n"), LinkExpires: time.Date(2026, 3, 10, 13, 0, 0, 0, time.UTC)}

	t.Run("KeptIsReplayed", func(t *testing.T) {
		s, _ := setup(t)
		mustRun(t, s, claim("acme", "k1", "a"))
		if err := s.Keep(ctx, "acme", "k1", answer); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			got, err := s.Claim(ctx, claim("acme", "k1", "a"))
			if err != nil || got == nil || got.Status != answer.Status || !bytes.Equal(got.Body, answer.Body) || !got.LinkExpires.Equal(answer.LinkExpires) {
				t.Fatalf("Claim after Keep = %+v, %v; want the kept answer", got, err)
			}
		}
	})

	t.Run("InFlight", func(t *testing.T) {
		s, _ := setup(t)
		mustRun(t, s, claim("acme", "k1", "a"))
		if _, err := s.Claim(ctx, claim("acme", "k1", "a")); !errors.Is(err, upscale.ErrIdempotencyInFlight) {
			t.Errorf("second Claim while the first runs: %v, want ErrIdempotencyInFlight", err)
		}
	})

	t.Run("KeyReused", func(t *testing.T) {
		s, _ := setup(t)
		mustRun(t, s, claim("acme", "k1", "a"))
		if _, err := s.Claim(ctx, claim("acme", "k1", "b")); !errors.Is(err, upscale.ErrIdempotencyKeyReused) {
			t.Errorf("another request with a running key: %v, want ErrIdempotencyKeyReused", err)
		}
		s.Keep(ctx, "acme", "k1", answer)
		if _, err := s.Claim(ctx, claim("acme", "k1", "b")); !errors.Is(err, upscale.ErrIdempotencyKeyReused) {
			t.Errorf("another request with a finished key: %v, want ErrIdempotencyKeyReused", err)
		}
	})

	t.Run("AccountsAreIndependent", func(t *testing.T) {
		s, _ := setup(t)
		mustRun(t, s, claim("acme", "k1", "a"))
		mustRun(t, s, claim("globex", "k1", "b"))
	})

	t.Run("ForgottenRunsAgain", func(t *testing.T) {
		s, _ := setup(t)
		mustRun(t, s, claim("acme", "k1", "a"))
		if err := s.Forget(ctx, "acme", "k1"); err != nil {
			t.Fatal(err)
		}
		mustRun(t, s, claim("acme", "k1", "a"))
		if err := s.Forget(ctx, "acme", "never-claimed"); err != nil {
			t.Errorf("Forget of an unclaimed key: %v, want nil", err)
		}
		if err := s.Keep(ctx, "acme", "never-claimed", answer); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("Keep of an unclaimed key: %v, want ErrNotFound", err)
		}
	})

	t.Run("ForgetLeavesAKeptAnswer", func(t *testing.T) {
		s, _ := setup(t)
		mustRun(t, s, claim("acme", "k1", "a"))
		s.Keep(ctx, "acme", "k1", answer)
		s.Forget(ctx, "acme", "k1")
		if got, err := s.Claim(ctx, claim("acme", "k1", "a")); err != nil || got == nil {
			t.Errorf("Claim after forgetting a kept key = %v, %v; want the kept answer", got, err)
		}
	})

	t.Run("LeaseEnds", func(t *testing.T) {
		s, clock := setup(t)
		mustRun(t, s, claim("acme", "k1", "a"))
		clock.Advance(59 * time.Second)
		if _, err := s.Claim(ctx, claim("acme", "k1", "a")); !errors.Is(err, upscale.ErrIdempotencyInFlight) {
			t.Errorf("within the lease: %v, want ErrIdempotencyInFlight", err)
		}
		clock.Advance(2 * time.Second)
		mustRun(t, s, claim("acme", "k1", "a")) // the first request's process died
	})

	t.Run("TTLEnds", func(t *testing.T) {
		s, clock := setup(t)
		mustRun(t, s, claim("acme", "k1", "a"))
		s.Keep(ctx, "acme", "k1", answer)
		clock.Advance(24*time.Hour - time.Second)
		if got, err := s.Claim(ctx, claim("acme", "k1", "b")); !errors.Is(err, upscale.ErrIdempotencyKeyReused) {
			t.Errorf("within the TTL, another request: %v, %v; want ErrIdempotencyKeyReused", got, err)
		}
		clock.Advance(2 * time.Second)
		mustRun(t, s, claim("acme", "k1", "b"))
	})

	t.Run("ConcurrentClaims", func(t *testing.T) {
		s, _ := setup(t)
		var mu sync.Mutex
		outcomes := map[string]int{}
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				got, err := s.Claim(ctx, claim("acme", "k1", "a"))
				outcome := "run"
				switch {
				case errors.Is(err, upscale.ErrIdempotencyInFlight):
					outcome = "in flight"
				case err != nil || got != nil:
					outcome = "other"
					t.Errorf("concurrent Claim = %v, %v", got, err)
				}
				mu.Lock()
				outcomes[outcome]++
				mu.Unlock()
			})
		}
		wg.Wait()
		if outcomes["run"] != 1 || outcomes["in flight"] != 19 {
			t.Errorf("20 concurrent claims: %v, want exactly one to run and 19 in flight", outcomes)
		}
	})
}
