package upscaletest

import (
	"context"
	"maps"
	"reflect"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
)

// UsageHarness is a UsageReporter under test, with the one admin
// operation the suite needs.
type UsageHarness interface {
	upscale.UsageReporter
	PutAccount(ctx context.Context, a upscale.Account) error
}

// TestUsageReporter checks that a UsageReporter counts each committed
// reservation once, on the day (UTC) of its commit, by the pool that
// paid; that released and expired reservations count nothing; and that it
// keeps accounts and the asked range apart. newLedger must return an empty
// ledger that uses opts (its clock and reservation TTL).
func TestUsageReporter(t *testing.T, newLedger func(t *testing.T, opts upscale.LedgerOptions) UsageHarness) {
	ctx := context.Background()
	day := func(d int) time.Time { return time.Date(2026, time.January, d, 0, 0, 0, 0, time.UTC) }
	var l UsageHarness
	chargeAcrossMonths(t, func(opts upscale.LedgerOptions) LedgerHarness {
		l = newLedger(t, opts)
		return l
	})
	usage := func(t *testing.T, account string, from, to time.Time, want []upscale.DayUsage) {
		t.Helper()
		got, err := l.UsageByDay(ctx, account, from, to)
		if err != nil {
			t.Fatalf("UsageByDay(%s, %v, %v): %v", account, from, to, err)
		}
		for i := range got {
			got[i].Day = got[i].Day.UTC()
		}
		if got == nil || !reflect.DeepEqual(got, want) {
			t.Errorf("UsageByDay(%s, %v, %v) = %+v, want %+v", account, from.Format(time.DateOnly), to.Format(time.DateOnly), got, want)
		}
	}

	free, credit := upscale.PoolFree, upscale.PoolCredit
	usage(t, "a", day(1), day(28).AddDate(0, 1, 0), []upscale.DayUsage{
		{Day: day(30), ByPool: map[upscale.Pool]int64{free: 2}},
		{Day: day(31), ByPool: map[upscale.Pool]int64{free: 1, credit: 2}},
		{Day: day(32), ByPool: map[upscale.Pool]int64{free: 1}},
	})
	// Any instant of a day stands for the whole day.
	usage(t, "a", day(31).Add(23*time.Hour), day(31).Add(time.Hour), []upscale.DayUsage{
		{Day: day(31), ByPool: map[upscale.Pool]int64{free: 1, credit: 2}},
	})
	usage(t, "b", day(1), day(32), []upscale.DayUsage{{Day: day(31), ByPool: map[upscale.Pool]int64{free: 1}}})
	usage(t, "a", day(1), day(29), []upscale.DayUsage{})
	usage(t, "nobody", day(1), day(32), []upscale.DayUsage{})

}

// FirstChargeHarness is a FirstCharger under test, with the one admin
// operation the suite needs.
type FirstChargeHarness interface {
	upscale.FirstCharger
	PutAccount(ctx context.Context, a upscale.Account) error
}

// TestFirstCharger checks that FirstCharges lists each account from its
// first charge on, with that charge's time, and never after it; released
// and expired reservations are no charge. newLedger must return an empty
// ledger that uses opts (its clock and reservation TTL).
func TestFirstCharger(t *testing.T, newLedger func(t *testing.T, opts upscale.LedgerOptions) FirstChargeHarness) {
	ctx := context.Background()
	var l FirstChargeHarness
	start := chargeAcrossMonths(t, func(opts upscale.LedgerOptions) LedgerHarness {
		l = newLedger(t, opts)
		return l
	})
	// a's first charge was at the start, b's (an expired reservation
	// before it) 15 minutes later.
	firsts := func(t *testing.T, since time.Time, want map[string]time.Time) {
		t.Helper()
		got, err := l.FirstCharges(ctx, since)
		if err != nil {
			t.Fatalf("FirstCharges(%v): %v", since, err)
		}
		if !maps.EqualFunc(got, want, time.Time.Equal) {
			t.Errorf("FirstCharges(%v) = %v, want %v", since, got, want)
		}
	}
	firsts(t, start, map[string]time.Time{"a": start, "b": start.Add(15 * time.Minute)})
	firsts(t, start.Add(time.Nanosecond), map[string]time.Time{"b": start.Add(15 * time.Minute)})
	firsts(t, start.Add(16*time.Minute), map[string]time.Time{})
}

// chargeAcrossMonths charges the accounts "a" and "b" of the ledger
// newLedger makes, on a clock that starts on the 30th of January, 23:50
// UTC, which it returns: on the 30th, a two (free) and one released, b
// one left to expire; on the 31st, a one reserved on the 30th and
// committed after midnight (twice: a retry) and two paid by credits, b
// one; on the 1st of February, a one of the refilled free pool.
func chargeAcrossMonths(t *testing.T, newLedger func(opts upscale.LedgerOptions) LedgerHarness) time.Time {
	t.Helper()
	ctx := context.Background()
	start := time.Date(2026, time.January, 30, 23, 50, 0, 0, time.UTC)
	clock := NewClock(start)
	l := newLedger(upscale.LedgerOptions{Now: clock.Now, ReservationTTL: 15 * time.Minute})
	for _, a := range []upscale.Account{{ID: "a", Plan: FreePlan, Credits: 5}, {ID: "b", Plan: FreePlan}} {
		if err := l.PutAccount(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	// The 30th: two charged (free), one released; one of b's left to
	// expire.
	commit(t, l, reserve(t, l, "a", false))
	commit(t, l, reserve(t, l, "a", false))
	if err := l.Release(ctx, reserve(t, l, "a", false).ID); err != nil {
		t.Fatal(err)
	}
	reserve(t, l, "b", false)
	// The 31st: reserved on the 30th (the free pool's third), committed
	// after midnight, the commit repeated (a retry); then two paid by
	// credits, the free pool spent.
	late := reserve(t, l, "a", false)
	clock.Advance(15 * time.Minute) // 00:05 on the 31st
	commit(t, l, late)
	commit(t, l, late)
	commit(t, l, reserve(t, l, "a", false))
	commit(t, l, reserve(t, l, "a", false))
	commit(t, l, reserve(t, l, "b", false))
	// February the 1st: the free pool refilled.
	clock.Advance(24 * time.Hour)
	commit(t, l, reserve(t, l, "a", false))
	return start
}
