package accounts_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/accounts"
	"github.com/upscalekit/upscale/upscaletest"
)

// TestNewShareBonus: a ShareBonus is made whole or not at all.
func TestNewShareBonus(t *testing.T) {
	ledger := upscale.NewMemoryLedger(upscale.LedgerOptions{})
	directory := accounts.NewMemoryDirectory(accounts.MemoryDirectoryOptions{Ledger: ledger})
	whole := accounts.ShareBonusOptions{Directory: directory, Ledger: ledger, PerSignup: 5, MonthlyCap: 50}
	if _, err := accounts.NewShareBonus(whole); err != nil {
		t.Fatalf("whole options: %v", err)
	}
	for name, change := range map[string]func(*accounts.ShareBonusOptions){
		"NoDirectory":    func(o *accounts.ShareBonusOptions) { o.Directory = nil },
		"NoLedger":       func(o *accounts.ShareBonusOptions) { o.Ledger = nil },
		"NoPerSignup":    func(o *accounts.ShareBonusOptions) { o.PerSignup = 0 },
		"NoMonthlyCap":   func(o *accounts.ShareBonusOptions) { o.MonthlyCap = 0 },
		"NegativeWindow": func(o *accounts.ShareBonusOptions) { o.Window = -time.Hour },
	} {
		t.Run(name, func(t *testing.T) {
			opts := whole
			change(&opts)
			if b, err := accounts.NewShareBonus(opts); err == nil {
				t.Errorf("NewShareBonus = %v, nil; want a refusal", b)
			}
		})
	}
}

// TestShareBonusGoesOn: a new account whose sharer cannot be paid (gone
// from the ledger) does not hold up the others, and is tried again.
func TestShareBonusGoesOn(t *testing.T) {
	ctx := context.Background()
	plan := upscale.Plan{Name: "free", MonthlyImages: 10}
	ledger := upscale.NewMemoryLedger(upscale.LedgerOptions{})
	directory := accounts.NewMemoryDirectory(accounts.MemoryDirectoryOptions{Ledger: ledger})
	sharer, _, _ := directory.OpenAccount(ctx, "sharer@example.com", plan, "")
	for _, tc := range []struct{ email, referrer string }{{"orphan@example.com", "acct_gone"}, {"invited@example.com", sharer}} {
		id, _, err := directory.OpenAccount(ctx, tc.email, plan, tc.referrer)
		if err != nil {
			t.Fatal(err)
		}
		r, err := ledger.Reserve(ctx, id, false)
		if err != nil {
			t.Fatal(err)
		}
		if err := ledger.Commit(ctx, r.ID); err != nil {
			t.Fatal(err)
		}
	}
	bonus := newShareBonus(t, accounts.ShareBonusOptions{Directory: directory, Ledger: ledger, PerSignup: 5, MonthlyCap: 10})
	paid, err := bonus.Pay(ctx)
	if paid != 1 || err == nil {
		t.Errorf("Pay = %d, %v; want the invited account's sharer paid, and the orphan's error", paid, err)
	}
	if _, err := bonus.Pay(ctx); err == nil {
		t.Error("the orphan was not tried again")
	}
	if b, _ := ledger.Balance(ctx, sharer); b.ShareBonus != 5 {
		t.Errorf("the sharer's share bonus %d, want 5", b.ShareBonus)
	}
}

// countingLedger counts what a ShareBonus asks its ledger, and records
// from when it asked for first charges.
type countingLedger struct {
	*upscale.MemoryLedger
	firstChargesFrom []time.Time
	purchases        int
}

func (l *countingLedger) FirstCharges(ctx context.Context, since time.Time) (map[string]time.Time, error) {
	l.firstChargesFrom = append(l.firstChargesFrom, since)
	return l.MemoryLedger.FirstCharges(ctx, since)
}

func (l *countingLedger) Purchases(ctx context.Context, accountID string) ([]upscale.Purchase, error) {
	l.purchases++
	return l.MemoryLedger.Purchases(ctx, accountID)
}

// TestShareBonusReadsSinceLastPass: a pass asks the ledger once, for the
// first charges since a little before the last pass, and nothing about
// the referred accounts that used no image; the first pass reads back to
// the oldest referred account; one older than Window is forgotten.
func TestShareBonusReadsSinceLastPass(t *testing.T) {
	ctx := context.Background()
	start := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	clock := upscaletest.NewClock(start)
	memory := upscale.NewMemoryLedger(upscale.LedgerOptions{Now: clock.Now})
	ledger := &countingLedger{MemoryLedger: memory}
	directory := accounts.NewMemoryDirectory(accounts.MemoryDirectoryOptions{Ledger: memory, Now: clock.Now})
	plan := upscale.Plan{Name: "free", MonthlyImages: 10}
	sharer, _, _ := directory.OpenAccount(ctx, "sharer@example.com", plan, "")
	var invited []string
	for i := range 50 {
		clock.Advance(time.Minute)
		id, _, err := directory.OpenAccount(ctx, fmt.Sprintf("invited%d@example.com", i), plan, sharer)
		if err != nil {
			t.Fatal(err)
		}
		invited = append(invited, id)
	}
	firstOpened := start.Add(time.Minute)
	bonus := newShareBonus(t, accounts.ShareBonusOptions{Directory: directory, Ledger: ledger, PerSignup: 1, MonthlyCap: 100, Now: clock.Now, Window: 24 * time.Hour})

	pass := func(want int) time.Time {
		t.Helper()
		at := clock.Now()
		if paid, err := bonus.Pay(ctx); err != nil || paid != want {
			t.Fatalf("Pay at %v = %d, %v; want %d", at, paid, err, want)
		}
		clock.Advance(time.Minute)
		return at
	}
	pass(0)
	last := pass(0)
	for range 3 {
		last = pass(0)
	}
	if got := len(ledger.firstChargesFrom); got != 5 || ledger.purchases != 0 {
		t.Fatalf("5 passes with no image used asked FirstCharges %d times and Purchases %d; want 5 and none", got, ledger.purchases)
	}
	if got := ledger.firstChargesFrom[0]; !got.Equal(firstOpened) {
		t.Errorf("the first pass read the charges from %v, want the oldest referral's opening %v", got, firstOpened)
	}
	if got, want := ledger.firstChargesFrom[4], last.Add(-time.Minute-10*time.Minute); !got.Equal(want) {
		t.Errorf("the fifth pass read the charges from %v, want 10 minutes before the fourth (%v)", got, want)
	}

	// Two use an image: the next pass pays for both, and none again.
	for _, id := range invited[:2] {
		r, err := memory.Reserve(ctx, id, false)
		if err != nil {
			t.Fatal(err)
		}
		if err := memory.Commit(ctx, r.ID); err != nil {
			t.Fatal(err)
		}
	}
	pass(2)
	pass(0)
	if b, _ := memory.Balance(ctx, sharer); b.ShareBonus != 2 {
		t.Errorf("the sharer's share bonus %d, want 2", b.ShareBonus)
	}

	// A day on, the others are past Window: their first image earns nothing.
	clock.Advance(24 * time.Hour)
	r, _ := memory.Reserve(ctx, invited[2], false)
	if err := memory.Commit(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	pass(0)
}

// newShareBonus returns the ShareBonus of opts, which must be whole.
func newShareBonus(t *testing.T, opts accounts.ShareBonusOptions) *accounts.ShareBonus {
	t.Helper()
	b, err := accounts.NewShareBonus(opts)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
