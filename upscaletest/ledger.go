package upscaletest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
)

// LedgerHarness is a QuotaLedger under test, with the one admin operation the
// suite needs.
type LedgerHarness interface {
	upscale.QuotaLedger
	// PutAccount creates an account or replaces its plan and balances.
	PutAccount(ctx context.Context, a upscale.Account) error
}

// Plans the suite puts accounts on.
var (
	FreePlan      = upscale.Plan{Name: "free", MonthlyImages: 3, MaxFileBytes: 25 << 20}
	PaidPlan      = upscale.Plan{Name: "pro", Paid: true, MonthlyImages: 3, MaxFileBytes: 50 << 20}
	UnlimitedPlan = upscale.Plan{Name: "unlimited", Paid: true, Unlimited: true, MaxFileBytes: 50 << 20}
)

// TestQuotaLedger checks that a QuotaLedger draws pools in the documented
// order, applies the paid-capability rule, ends each reservation once,
// gives back expired reservations, refills the free pool monthly and hands out
// exactly min(N, k) units to N concurrent requests. newLedger must return an
// empty ledger that uses opts (its clock and reservation TTL).
func TestQuotaLedger(t *testing.T, newLedger func(t *testing.T, opts upscale.LedgerOptions) LedgerHarness) {
	start := time.Date(2026, time.January, 31, 23, 0, 0, 0, time.UTC)
	setup := func(t *testing.T, accounts ...upscale.Account) (LedgerHarness, *Clock) {
		t.Helper()
		clock := NewClock(start)
		l := newLedger(t, upscale.LedgerOptions{Now: clock.Now, ReservationTTL: 15 * time.Minute})
		for _, a := range accounts {
			if err := l.PutAccount(context.Background(), a); err != nil {
				t.Fatalf("PutAccount(%+v): %v", a, err)
			}
		}
		return l, clock
	}
	ctx := context.Background()

	t.Run("PoolOrder", func(t *testing.T) {
		l, _ := setup(t, upscale.Account{ID: "a", Plan: FreePlan, ShareBonus: 2, Credits: 2})
		want := []upscale.Pool{upscale.PoolFree, upscale.PoolFree, upscale.PoolFree, upscale.PoolShareBonus, upscale.PoolShareBonus, upscale.PoolCredit, upscale.PoolCredit}
		for i, pool := range want {
			r := reserve(t, l, "a", false)
			if r.Pool != pool {
				t.Fatalf("reservation %d from %q, want %q", i, r.Pool, pool)
			}
			commit(t, l, r)
		}
		if _, err := l.Reserve(ctx, "a", false); !errors.Is(err, upscale.ErrQuotaExhausted) {
			t.Fatalf("Reserve on an empty account: err = %v, want ErrQuotaExhausted", err)
		}
		checkBalance(t, l, "a", upscale.Balance{Plan: FreePlan})
	})

	t.Run("Unlimited", func(t *testing.T) {
		l, _ := setup(t, upscale.Account{ID: "u", Plan: UnlimitedPlan, Credits: 1})
		for _, needsPaid := range []bool{false, true, false} {
			r := reserve(t, l, "u", needsPaid)
			if r.Pool != upscale.PoolUnlimited {
				t.Fatalf("pool %q, want unlimited", r.Pool)
			}
			commit(t, l, r)
		}
		checkBalance(t, l, "u", upscale.Balance{Plan: UnlimitedPlan, Credits: 1})
	})

	t.Run("ErrPaidPlanRequired", func(t *testing.T) {
		l, _ := setup(t, upscale.Account{ID: "free", Plan: FreePlan, ShareBonus: 1})
		if _, err := l.Reserve(ctx, "free", true); !errors.Is(err, upscale.ErrPaidPlanRequired) {
			t.Fatalf("err = %v, want ErrPaidPlanRequired", err)
		}
		checkBalance(t, l, "free", upscale.Balance{Plan: FreePlan, Free: 3, ShareBonus: 1})
	})

	t.Run("PaidCapabilityFromCredits", func(t *testing.T) {
		l, _ := setup(t, upscale.Account{ID: "free", Plan: FreePlan, ShareBonus: 1, Credits: 1})
		r := reserve(t, l, "free", true)
		if r.Pool != upscale.PoolCredit {
			t.Fatalf("pool %q, want credit: only credits pay for paid capability off a paid plan", r.Pool)
		}
		commit(t, l, r)
		if _, err := l.Reserve(ctx, "free", true); !errors.Is(err, upscale.ErrPaidPlanRequired) {
			t.Fatalf("with credits spent: err = %v, want ErrPaidPlanRequired", err)
		}
	})

	t.Run("PaidPlanUsesEveryPool", func(t *testing.T) {
		l, _ := setup(t, upscale.Account{ID: "pro", Plan: PaidPlan, ShareBonus: 1})
		for _, pool := range []upscale.Pool{upscale.PoolFree, upscale.PoolFree, upscale.PoolFree, upscale.PoolShareBonus} {
			r := reserve(t, l, "pro", true)
			if r.Pool != pool {
				t.Fatalf("pool %q, want %q", r.Pool, pool)
			}
			commit(t, l, r)
		}
		if _, err := l.Reserve(ctx, "pro", true); !errors.Is(err, upscale.ErrQuotaExhausted) {
			t.Fatalf("paid plan, pools empty: err = %v, want ErrQuotaExhausted", err)
		}
	})

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

	t.Run("FreePoolRefillsMonthly", func(t *testing.T) {
		l, clock := setup(t, upscale.Account{ID: "a", Plan: FreePlan})
		for range 3 {
			commit(t, l, reserve(t, l, "a", false))
		}
		if _, err := l.Reserve(ctx, "a", false); !errors.Is(err, upscale.ErrQuotaExhausted) {
			t.Fatalf("err = %v, want ErrQuotaExhausted", err)
		}
		clock.Advance(59*time.Minute + 59*time.Second) // 23:59:59 on 31 January
		checkBalance(t, l, "a", upscale.Balance{Plan: FreePlan})
		clock.Advance(time.Second) // 00:00:00 UTC on 1 February
		checkBalance(t, l, "a", upscale.Balance{Plan: FreePlan, Free: 3})
	})

	t.Run("ErrNotFound", func(t *testing.T) {
		l, _ := setup(t)
		if _, err := l.Reserve(ctx, "nobody", false); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("Reserve: err = %v, want ErrNotFound", err)
		}
		if _, err := l.Balance(ctx, "nobody"); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("Balance: err = %v, want ErrNotFound", err)
		}
		if err := l.Commit(ctx, "no-such-reservation"); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("Commit: err = %v, want ErrNotFound", err)
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

func reserve(t *testing.T, l upscale.QuotaLedger, accountID string, needsPaid bool) upscale.Reservation {
	t.Helper()
	r, err := l.Reserve(context.Background(), accountID, needsPaid)
	if err != nil {
		t.Fatalf("Reserve(%q, needsPaid=%v): %v", accountID, needsPaid, err)
	}
	if r.ID == "" || r.AccountID != accountID {
		t.Fatalf("Reserve returned %+v: want an ID and account %q", r, accountID)
	}
	return r
}

func commit(t *testing.T, l upscale.QuotaLedger, r upscale.Reservation) {
	t.Helper()
	if err := l.Commit(context.Background(), r.ID); err != nil {
		t.Fatalf("Commit(%+v): %v", r, err)
	}
}

func checkBalance(t *testing.T, l upscale.QuotaLedger, accountID string, want upscale.Balance) {
	t.Helper()
	got, err := l.Balance(context.Background(), accountID)
	if err != nil {
		t.Fatalf("Balance(%q): %v", accountID, err)
	}
	if got != want {
		t.Errorf("Balance(%q) = %+v, want %+v", accountID, got, want)
	}
}
