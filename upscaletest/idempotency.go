package upscaletest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
)

// TestIdempotencyStore checks an IdempotencyStore against its contract:
// one claim of a key runs, the others wait or replay its answer, another
// request under the same key is refused, accounts are independent, leases
// and TTLs end on the store's clock, a prepared answer is taken over once
// its lease ends, and a claim that was taken over can no longer write.
// newStore must return an empty store on clock.
func TestIdempotencyStore(t *testing.T, newStore func(t *testing.T, clock *Clock) upscale.IdempotencyStore) {
	ctx := context.Background()
	setup := func(t *testing.T) (upscale.IdempotencyStore, *Clock) {
		clock := NewClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
		return newStore(t, clock), clock
	}
	claim := func(account, key, request string) upscale.IdempotencyClaim {
		return upscale.IdempotencyClaim{AccountID: account, Key: key, Fingerprint: sha256.Sum256([]byte(request)), Token: rand.Text(), Lease: time.Minute, TTL: 24 * time.Hour}
	}
	mustRun := func(t *testing.T, s upscale.IdempotencyStore, c upscale.IdempotencyClaim) {
		t.Helper()
		if answer, err := s.Claim(ctx, c); answer != nil || err != nil {
			t.Fatalf("Claim(%s, %s) = %v, %v; want nil, nil: the request runs", c.AccountID, c.Key, answer, err)
		}
	}
	answer := upscale.IdempotentAnswer{Status: 200, Body: []byte(`{"url":"https://x.test/a.png","resizedTo":null,"via":"free_pool"}` + "\n"), LinkExpires: time.Date(2026, 3, 10, 13, 0, 0, 0, time.UTC)}

	mustBeInFlight := func(t *testing.T, s upscale.IdempotencyStore, c upscale.IdempotencyClaim, leaseEnds time.Time) {
		t.Helper()
		_, err := s.Claim(ctx, c)
		inFlight, ok := errors.AsType[*upscale.InFlightError](err)
		if !ok || !errors.Is(err, upscale.ErrIdempotencyInFlight) || !inFlight.LeaseEnds.Equal(leaseEnds) {
			t.Fatalf("Claim while the key's request runs: %v; want an *InFlightError, matching ErrIdempotencyInFlight, with the lease ending at %v", err, leaseEnds)
		}
	}
	prepared := answer
	prepared.Reservation = "reservation-1"

	t.Run("KeptIsReplayed", func(t *testing.T) {
		s, _ := setup(t)
		c := claim("acme", "k1", "a")
		mustRun(t, s, c)
		if err := s.Keep(ctx, c, answer); err != nil {
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
		s, clock := setup(t)
		mustRun(t, s, claim("acme", "k1", "a"))
		leaseEnds := clock.Now().Add(time.Minute)
		clock.Advance(10 * time.Second)
		mustBeInFlight(t, s, claim("acme", "k1", "a"), leaseEnds)
	})

	t.Run("KeyReused", func(t *testing.T) {
		s, _ := setup(t)
		c := claim("acme", "k1", "a")
		mustRun(t, s, c)
		if _, err := s.Claim(ctx, claim("acme", "k1", "b")); !errors.Is(err, upscale.ErrIdempotencyKeyReused) {
			t.Errorf("another request with a running key: %v, want ErrIdempotencyKeyReused", err)
		}
		s.Keep(ctx, c, answer)
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
		c := claim("acme", "k1", "a")
		mustRun(t, s, c)
		if err := s.Forget(ctx, c); err != nil {
			t.Fatal(err)
		}
		mustRun(t, s, claim("acme", "k1", "a"))
		if err := s.Forget(ctx, claim("acme", "never-claimed", "a")); err != nil {
			t.Errorf("Forget of an unclaimed key: %v, want nil", err)
		}
		if err := s.Keep(ctx, claim("acme", "never-claimed", "a"), answer); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("Keep of an unclaimed key: %v, want ErrNotFound", err)
		}
	})

	t.Run("ForgetLeavesAKeptAnswer", func(t *testing.T) {
		s, _ := setup(t)
		c := claim("acme", "k1", "a")
		mustRun(t, s, c)
		s.Keep(ctx, c, answer)
		s.Forget(ctx, c)
		if got, err := s.Claim(ctx, claim("acme", "k1", "a")); err != nil || got == nil {
			t.Errorf("Claim after forgetting a kept key = %v, %v; want the kept answer", got, err)
		}
	})

	t.Run("LeaseEnds", func(t *testing.T) {
		s, clock := setup(t)
		first := claim("acme", "k1", "a")
		mustRun(t, s, first)
		clock.Advance(59 * time.Second)
		mustBeInFlight(t, s, claim("acme", "k1", "a"), clock.Now().Add(time.Second))
		clock.Advance(2 * time.Second)
		second := claim("acme", "k1", "b")
		mustRun(t, s, second) // the first request died unprepared: any request may have the key
		if err := s.Keep(ctx, first, answer); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("Keep by a claim taken over: %v, want ErrNotFound", err)
		}
		if err := s.Prepare(ctx, first, prepared); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("Prepare by a claim taken over: %v, want ErrNotFound", err)
		}
		s.Forget(ctx, first)
		mustBeInFlight(t, s, claim("acme", "k1", "b"), clock.Now().Add(time.Minute)) // the second's claim stands
	})

	t.Run("PreparedIsTakenOver", func(t *testing.T) {
		s, clock := setup(t)
		first := claim("acme", "k1", "a")
		mustRun(t, s, first)
		if err := s.Prepare(ctx, first, prepared); err != nil {
			t.Fatal(err)
		}
		leaseEnds := clock.Now().Add(time.Minute)
		clock.Advance(30 * time.Second)
		mustBeInFlight(t, s, claim("acme", "k1", "a"), leaseEnds) // prepared is not finished
		clock.Advance(31 * time.Second)
		if _, err := s.Claim(ctx, claim("acme", "k1", "b")); !errors.Is(err, upscale.ErrIdempotencyKeyReused) {
			t.Errorf("another request after a prepared claim's lease: %v, want ErrIdempotencyKeyReused: it may have been charged", err)
		}
		second := claim("acme", "k1", "a")
		got, err := s.Claim(ctx, second)
		if err != nil || got == nil || got.Reservation != prepared.Reservation || got.Status != prepared.Status || !bytes.Equal(got.Body, prepared.Body) || !got.LinkExpires.Equal(prepared.LinkExpires) {
			t.Fatalf("Claim after a prepared claim's lease = %+v, %v; want the prepared answer, with its reservation", got, err)
		}
		mustBeInFlight(t, s, claim("acme", "k1", "a"), clock.Now().Add(time.Minute)) // the taker holds a new lease
		if err := s.Keep(ctx, first, answer); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("Keep by the claim taken over: %v, want ErrNotFound", err)
		}
		if err := s.Keep(ctx, second, answer); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Claim(ctx, claim("acme", "k1", "a")); err != nil || got == nil || got.Reservation != "" || got.Status != answer.Status {
			t.Errorf("Claim after the taker kept the answer = %+v, %v; want it kept, no reservation", got, err)
		}
	})

	t.Run("PreparedCanBeForgotten", func(t *testing.T) {
		s, _ := setup(t)
		c := claim("acme", "k1", "a")
		mustRun(t, s, c)
		s.Prepare(ctx, c, prepared)
		if err := s.Forget(ctx, c); err != nil { // its commit failed: never charged
			t.Fatal(err)
		}
		mustRun(t, s, claim("acme", "k1", "a"))
	})

	t.Run("TTLEnds", func(t *testing.T) {
		s, clock := setup(t)
		c := claim("acme", "k1", "a")
		mustRun(t, s, c)
		s.Keep(ctx, c, answer)
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
