package upscaletest

import (
	"context"
	"errors"
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
	s := ledgerSuite{newLedger: newLedger, start: time.Date(2026, time.January, 31, 23, 0, 0, 0, time.UTC)}
	testLedgerPools(t, s)
	testLedgerReservations(t, s)
}

// ledgerSuite is what TestQuotaLedger's checks share: the ledger under
// test, made anew for each, and when its clock starts (an hour before a
// month ends, for the refill).
type ledgerSuite struct {
	newLedger func(t *testing.T, opts upscale.LedgerOptions) LedgerHarness
	start     time.Time
}

// setup returns a new ledger holding accounts, with a 15-minute
// reservation TTL, and its clock.
func (s ledgerSuite) setup(t *testing.T, accounts ...upscale.Account) (LedgerHarness, *Clock) {
	t.Helper()
	clock := NewClock(s.start)
	l := s.newLedger(t, upscale.LedgerOptions{Now: clock.Now, ReservationTTL: 15 * time.Minute})
	for _, a := range accounts {
		if err := l.PutAccount(context.Background(), a); err != nil {
			t.Fatalf("PutAccount(%+v): %v", a, err)
		}
	}
	return l, clock
}

// testLedgerPools checks a QuotaLedger's pools: drawn in the documented
// order, the paid-capability rule, the free pool refilled monthly,
// unknown accounts refused.
func testLedgerPools(t *testing.T, s ledgerSuite) {
	ctx, setup := context.Background(), s.setup
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
