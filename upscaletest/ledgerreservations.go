package upscaletest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
)

// testLedgerReservations checks a QuotaLedger's reservations: each ended
// once, expired ones given back, a hold past the TTL kept, min(N, k)
// units to N concurrent requests.
func testLedgerReservations(t *testing.T, s ledgerSuite) {
	ctx, start, setup := context.Background(), s.start, s.setup
	t.Run("ReleaseRestores", func(t *testing.T) {
		l, _ := setup(t, upscale.Account{ID: "a", Plan: FreePlan, Credits: 1})
		r := reserve(t, l, "a", false)
		checkBalance(t, l, "a", upscale.Balance{Plan: FreePlan, Free: 2, Credits: 1})
		if err := l.Release(ctx, r.ID); err != nil {
			t.Fatalf("Release: %v", err)
		}
		checkBalance(t, l, "a", upscale.Balance{Plan: FreePlan, Free: 3, Credits: 1})
		if err := l.Release(ctx, r.ID); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("second Release: err = %v, want ErrNotFound", err)
		}
		if err := l.Commit(ctx, r.ID); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("Commit after Release: err = %v, want ErrNotFound", err)
		}
		checkBalance(t, l, "a", upscale.Balance{Plan: FreePlan, Free: 3, Credits: 1})
	})

	t.Run("CommitIsFinal", func(t *testing.T) {
		l, clock := setup(t, upscale.Account{ID: "a", Plan: FreePlan, Credits: 1})
		r := reserve(t, l, "a", true)
		commit(t, l, r)
		if err := l.Release(ctx, r.ID); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("Release after Commit: err = %v, want ErrNotFound", err)
		}
		if err := l.Commit(ctx, r.ID); err != nil {
			t.Errorf("second Commit: err = %v, want nil: Commit is idempotent", err)
		}
		clock.Advance(time.Hour) // past the TTL: a committed unit never comes back
		checkBalance(t, l, "a", upscale.Balance{Plan: FreePlan, Free: 3})
		if err := l.Commit(ctx, r.ID); err != nil {
			t.Errorf("Commit an hour after the first: err = %v, want nil", err)
		}
		checkBalance(t, l, "a", upscale.Balance{Plan: FreePlan, Free: 3}) // and charged once
	})

	t.Run("ReservationsExpire", func(t *testing.T) {
		l, clock := setup(t, upscale.Account{ID: "a", Plan: FreePlan, Credits: 1})
		r := reserve(t, l, "a", true)
		clock.Advance(14 * time.Minute)
		checkBalance(t, l, "a", upscale.Balance{Plan: FreePlan, Free: 3})
		clock.Advance(2 * time.Minute)
		checkBalance(t, l, "a", upscale.Balance{Plan: FreePlan, Free: 3, Credits: 1})
		if err := l.Commit(ctx, r.ID); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("Commit of an expired reservation: err = %v, want ErrNotFound", err)
		}
	})

	t.Run("HoldOutlivesTheTTL", func(t *testing.T) {
		l, clock := setup(t, upscale.Account{ID: "a", Plan: FreePlan, Credits: 2})
		holder, ok := l.(upscale.ReservationHolder)
		if !ok {
			t.Skip("not a ReservationHolder")
		}
		r := reserve(t, l, "a", true)
		if err := holder.Hold(ctx, r.ID, start.Add(2*time.Hour)); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Hour) // four TTLs: held still
		checkBalance(t, l, "a", upscale.Balance{Plan: FreePlan, Free: 3, Credits: 1})
		commit(t, l, r)
		if err := holder.Hold(ctx, r.ID, start.Add(3*time.Hour)); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("Hold of a committed reservation: err = %v, want ErrNotFound", err)
		}
		// Held to a time, and given back at it.
		r = reserve(t, l, "a", true)
		if err := holder.Hold(ctx, r.ID, clock.Now().Add(30*time.Minute)); err != nil {
			t.Fatal(err)
		}
		checkBalance(t, l, "a", upscale.Balance{Plan: FreePlan, Free: 3})
		clock.Advance(31 * time.Minute)
		checkBalance(t, l, "a", upscale.Balance{Plan: FreePlan, Free: 3, Credits: 1})
		if err := holder.Hold(ctx, r.ID, clock.Now().Add(time.Hour)); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("Hold of an expired reservation: err = %v, want ErrNotFound", err)
		}
		if err := l.Commit(ctx, r.ID); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("Commit after its hold ended: err = %v, want ErrNotFound", err)
		}
		if err := holder.Hold(ctx, "no-such-reservation", clock.Now()); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("Hold of an unknown reservation: err = %v, want ErrNotFound", err)
		}
	})

	t.Run("ConcurrentReservations", func(t *testing.T) {
		// 5 units spread over three pools, 200 requests at once.
		l, _ := setup(t, upscale.Account{ID: "a", Plan: upscale.Plan{Name: "small", MonthlyImages: 2, MaxFileBytes: 1 << 20}, ShareBonus: 1, Credits: 2})
		const n = 200
		var wg sync.WaitGroup
		var mu sync.Mutex
		granted, exhausted := 0, 0
		for range n {
			wg.Go(func() {
				r, err := l.Reserve(ctx, "a", false)
				if err == nil {
					err = l.Commit(ctx, r.ID)
				}
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					granted++
				case errors.Is(err, upscale.ErrQuotaExhausted):
					exhausted++
				default:
					t.Errorf("Reserve/Commit: %v", err)
				}
			})
		}
		wg.Wait()
		if granted != 5 || exhausted != n-5 {
			t.Errorf("%d granted, %d exhausted; want 5 and %d", granted, exhausted, n-5)
		}
		b, err := l.Balance(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		if b.Free != 0 || b.ShareBonus != 0 || b.Credits != 0 {
			t.Errorf("balance after the rush: %+v, want all pools at 0", b)
		}
	})
}
