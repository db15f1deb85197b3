package upscaletest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/upscalekit/upscale"
)

// testBillingReversals checks a BillingLedger's reversals: never more
// than their grant, never below zero, the shortfall recorded,
// reservations kept.
func testBillingReversals(t *testing.T, s billingSuite) {
	ctx, at, setup, pack := context.Background(), s.at, s.setup, s.pack
	t.Run("RefundAfterSpending", func(t *testing.T) {
		l := setup(t, upscale.Account{ID: "a", Plan: FreePlan})
		if _, err := l.Grant(ctx, pack("cs_8", 10)); err != nil {
			t.Fatal(err)
		}
		for range 3 + 7 { // the free pool, then 7 of the credits
			commit(t, l, reserve(t, l, "a", false))
		}
		refund := upscale.Reversal{ID: "re_2", GrantID: "cs_8", UpTo: 10, Event: "evt_re_2", At: at}
		for i := range 2 {
			if got, err := l.Reverse(ctx, refund); err != nil || got != (upscale.Reversed{Taken: 3, Shortfall: 7}) {
				t.Fatalf("delivery %d of the refund: %+v, %v; want 3 taken, 7 short", i+1, got, err)
			}
		}
		checkBalance(t, l, "a", upscale.Balance{Plan: FreePlan})
		// A dispute of the same payment finds nothing left of the grant.
		if got, err := l.Reverse(ctx, upscale.Reversal{ID: "dp_1", GrantID: "cs_8", UpTo: 10}); err != nil || got != (upscale.Reversed{}) {
			t.Errorf("a dispute after a full refund: %+v, %v; want nothing taken", got, err)
		}
		purchases, err := l.Purchases(ctx, "a")
		if err != nil || len(purchases) != 1 || purchases[0].ID != "cs_8" || purchases[0].Units != 10 || purchases[0].Label != "10 images" ||
			purchases[0].Reversed != (upscale.Reversed{Taken: 3, Shortfall: 7}) {
			t.Errorf("purchases %+v, %v; want cs_8 of 10, 3 taken back and 7 short", purchases, err)
		}
	})

	t.Run("RefundThenDispute", func(t *testing.T) {
		l := setup(t, upscale.Account{ID: "a", Plan: FreePlan, Credits: 50})
		if _, err := l.Grant(ctx, pack("cs_9", 10)); err != nil {
			t.Fatal(err)
		}
		if got, err := l.Reverse(ctx, upscale.Reversal{ID: "re_3", GrantID: "cs_9", UpTo: 4}); err != nil || got != (upscale.Reversed{Taken: 4}) {
			t.Fatalf("a partial refund: %+v, %v; want 4 taken", got, err)
		}
		if got, err := l.Reverse(ctx, upscale.Reversal{ID: "dp_2", GrantID: "cs_9", UpTo: 10}); err != nil || got != (upscale.Reversed{Taken: 6}) {
			t.Fatalf("a dispute of the whole payment after it: %+v, %v; want the 6 left", got, err)
		}
		checkBalance(t, l, "a", upscale.Balance{Plan: FreePlan, Free: 3, Credits: 50})
	})

	t.Run("ConcurrentReversals", func(t *testing.T) {
		l := setup(t, upscale.Account{ID: "a", Plan: FreePlan, Credits: 100})
		if _, err := l.Grant(ctx, pack("cs_10", 10)); err != nil {
			t.Fatal(err)
		}
		// Two partial refunds, of 30% and then 60% of the payment in all,
		// each delivered 25 times at once: 6 units back in all, whatever
		// order they are handled in.
		var wg sync.WaitGroup
		taken := map[string]*atomic.Int64{"re_30": {}, "re_60": {}}
		for i := range 50 {
			wg.Go(func() {
				id, upTo := "re_30", int64(3)
				if i%2 == 1 {
					id, upTo = "re_60", 6
				}
				got, err := l.Reverse(ctx, upscale.Reversal{ID: id, GrantID: "cs_10", UpTo: upTo})
				if err != nil {
					t.Errorf("%s: %v", id, err)
				}
				if prev := taken[id].Swap(got.Taken); prev != 0 && prev != got.Taken {
					t.Errorf("%s answered %d and %d taken: a repeat must answer what the first took", id, prev, got.Taken)
				}
			})
		}
		wg.Wait()
		if sum := taken["re_30"].Load() + taken["re_60"].Load(); sum != 6 {
			t.Errorf("the two refunds took %d units back in all, want 6", sum)
		}
		checkBalance(t, l, "a", upscale.Balance{Plan: FreePlan, Free: 3, Credits: 104})
	})

	t.Run("ReservationsKept", func(t *testing.T) {
		l := setup(t, upscale.Account{ID: "a", Plan: upscale.Plan{Name: "none", MaxFileBytes: 1 << 20}})
		if _, err := l.Grant(ctx, pack("cs_11", 2)); err != nil {
			t.Fatal(err)
		}
		held := reserve(t, l, "a", false) // a queued job's unit
		if got, err := l.Reverse(ctx, upscale.Reversal{ID: "re_4", GrantID: "cs_11", UpTo: 2}); err != nil || got != (upscale.Reversed{Taken: 1, Shortfall: 1}) {
			t.Fatalf("a refund while a unit is held: %+v, %v; want the one free unit taken, one short", got, err)
		}
		commit(t, l, held)
		if _, err := l.Reserve(ctx, "a", false); !errors.Is(err, upscale.ErrQuotaExhausted) {
			t.Errorf("Reserve after the refund: %v, want ErrQuotaExhausted", err)
		}
	})
}
