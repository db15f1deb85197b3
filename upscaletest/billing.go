package upscaletest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
)

// BillingHarness is a BillingLedger under test, with the one admin
// operation the suite needs.
type BillingHarness interface {
	upscale.BillingLedger
	// PutAccount creates an account or replaces its plan and balances.
	PutAccount(ctx context.Context, a upscale.Account) error
}

// TestBillingLedger checks that a BillingLedger applies each effect of a
// payment once: a grant once per ID, also among 50 concurrent deliveries;
// a reversal once per ID, never more than its grant, never below a zero
// balance, with the shortfall recorded and units already reserved kept;
// plan terms by the time of their read, so that an older state never
// undoes a newer one, and a subscription once ended never lives again.
// newLedger must return an empty ledger that uses opts.
func TestBillingLedger(t *testing.T, newLedger func(t *testing.T, opts upscale.LedgerOptions) BillingHarness) {
	at := time.Date(2026, time.March, 10, 12, 0, 0, 0, time.UTC)
	ctx := context.Background()
	setup := func(t *testing.T, accounts ...upscale.Account) BillingHarness {
		t.Helper()
		l := newLedger(t, upscale.LedgerOptions{Now: NewClock(at).Now})
		for _, a := range accounts {
			if err := l.PutAccount(ctx, a); err != nil {
				t.Fatalf("PutAccount(%+v): %v", a, err)
			}
		}
		return l
	}
	pack := func(id string, units int64) upscale.Grant {
		return upscale.Grant{ID: id, AccountID: "a", Pool: upscale.PoolCredit, Units: units, Label: fmt.Sprintf("%d images", units), Event: "evt_" + id, At: at}
	}

	t.Run("GrantOnce", func(t *testing.T) {
		l := setup(t, upscale.Account{ID: "a", Plan: FreePlan, Credits: 5})
		for i, want := range []bool{true, false, false} {
			if granted, err := l.Grant(ctx, pack("cs_1", 1000)); err != nil || granted != want {
				t.Fatalf("delivery %d: granted %v, %v; want %v", i+1, granted, err, want)
			}
		}
		bonus := upscale.Grant{ID: "ref_1", AccountID: "a", Pool: upscale.PoolShareBonus, Units: 5, Event: "evt_ref_1", At: at}
		if granted, err := l.Grant(ctx, bonus); err != nil || !granted {
			t.Fatalf("share bonus: granted %v, %v", granted, err)
		}
		checkBalance(t, l, "a", upscale.Balance{Plan: FreePlan, Free: 3, Credits: 1005, ShareBonus: 5})
	})

	t.Run("ConcurrentDeliveries", func(t *testing.T) {
		l := setup(t, upscale.Account{ID: "a", Plan: FreePlan})
		var granted atomic.Int64
		var wg sync.WaitGroup
		for range 50 {
			wg.Go(func() {
				ok, err := l.Grant(ctx, pack("cs_2", 100))
				if err != nil {
					t.Errorf("Grant: %v", err)
				}
				if ok {
					granted.Add(1)
				}
			})
		}
		wg.Wait()
		if n := granted.Load(); n != 1 {
			t.Errorf("%d of 50 concurrent deliveries granted, want 1", n)
		}
		checkBalance(t, l, "a", upscale.Balance{Plan: FreePlan, Free: 3, Credits: 100})
	})

	t.Run("ErrNotFound", func(t *testing.T) {
		l := setup(t)
		if _, err := l.Grant(ctx, pack("cs_3", 10)); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("Grant to an unknown account: %v, want ErrNotFound", err)
		}
		if _, err := l.Reverse(ctx, upscale.Reversal{ID: "re_1", GrantID: "cs_3", UpTo: 1}); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("Reverse of an unknown grant: %v, want ErrNotFound", err)
		}
		if _, err := l.ApplyTerms(ctx, upscale.PlanTerms{AccountID: "a", Plan: UnlimitedPlan, AsOf: at}); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("ApplyTerms to an unknown account: %v, want ErrNotFound", err)
		}
		if _, err := l.Terms(ctx, "a"); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("Terms of an unknown account: %v, want ErrNotFound", err)
		}
		if _, err := l.Purchases(ctx, "a"); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("Purchases of an unknown account: %v, want ErrNotFound", err)
		}
	})

	t.Run("NoEmptyGrants", func(t *testing.T) {
		l := setup(t, upscale.Account{ID: "a", Plan: FreePlan})
		for _, g := range []upscale.Grant{pack("", 10), pack("cs_4", 0), pack("cs_5", -3), {ID: "cs_6", AccountID: "a", Pool: upscale.PoolFree, Units: 3}} {
			if granted, err := l.Grant(ctx, g); err == nil || granted {
				t.Errorf("Grant(%+v): granted %v, %v; want an error", g, granted, err)
			}
		}
		if _, err := l.Grant(ctx, pack("cs_7", 10)); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Reverse(ctx, upscale.Reversal{ID: "re_0", GrantID: "cs_7", UpTo: 0}); err == nil {
			t.Error("a reversal of 0 units: no error")
		}
		checkBalance(t, l, "a", upscale.Balance{Plan: FreePlan, Free: 3, Credits: 10})
	})

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

	t.Run("TermsByProviderTime", func(t *testing.T) {
		l := setup(t, upscale.Account{ID: "a", Plan: FreePlan})
		if terms, err := l.Terms(ctx, "a"); err != nil || terms != (upscale.PlanTerms{}) {
			t.Fatalf("terms of an account never subscribed: %+v, %v; want none", terms, err)
		}
		subscribed := upscale.PlanTerms{AccountID: "a", Plan: UnlimitedPlan, Subscription: "sub_1", Status: upscale.SubscriptionActive,
			PaidThrough: at.AddDate(0, 1, 0), AsOf: at.Add(2 * time.Minute), Event: "evt_2"}
		ended := subscribed
		ended.Plan, ended.Status, ended.AsOf, ended.Event = FreePlan, upscale.SubscriptionCanceled, at.Add(3*time.Minute), "evt_3"
		stale := subscribed
		stale.Status, stale.AsOf, stale.Event = upscale.SubscriptionPastDue, at.Add(time.Minute), "evt_1"
		for _, step := range []struct {
			terms   upscale.PlanTerms
			applied bool
			plan    upscale.Plan
		}{
			{subscribed, true, UnlimitedPlan},
			{stale, false, UnlimitedPlan},      // older: changes nothing
			{subscribed, false, UnlimitedPlan}, // the same again
			{ended, true, FreePlan},
			{subscribed, false, FreePlan}, // delivered after the end: the end stands
		} {
			if applied, err := l.ApplyTerms(ctx, step.terms); err != nil || applied != step.applied {
				t.Fatalf("ApplyTerms(%s as of %v): applied %v, %v; want %v", step.terms.Status, step.terms.AsOf, applied, err, step.applied)
			}
			if b, err := l.Balance(ctx, "a"); err != nil || b.Plan != step.plan {
				t.Fatalf("after %s as of %v: plan %+v, %v; want %+v", step.terms.Status, step.terms.AsOf, b.Plan, err, step.plan)
			}
		}
		if terms, err := l.Terms(ctx, "a"); err != nil || !terms.AsOf.Equal(ended.AsOf) || terms.Status != upscale.SubscriptionCanceled || terms.Subscription != "sub_1" || !terms.PaidThrough.Equal(ended.PaidThrough) {
			t.Errorf("terms %+v, %v; want the ended subscription's", terms, err)
		}
	})

	t.Run("EndedStaysEnded", func(t *testing.T) {
		l := setup(t, upscale.Account{ID: "a", Plan: FreePlan})
		terms := func(sub string, status upscale.SubscriptionStatus, minutes int) upscale.PlanTerms {
			plan := FreePlan
			if status.Live() {
				plan = UnlimitedPlan
			}
			return upscale.PlanTerms{AccountID: "a", Plan: plan, Subscription: sub, Status: status,
				PaidThrough: at.AddDate(0, 1, 0), AsOf: at.Add(time.Duration(minutes) * time.Minute), Event: fmt.Sprintf("evt_%s_%d", sub, minutes)}
		}
		for _, step := range []struct {
			terms   upscale.PlanTerms
			applied bool
			plan    upscale.Plan
		}{
			{terms("sub_1", upscale.SubscriptionActive, 1), true, UnlimitedPlan},
			{terms("sub_1", upscale.SubscriptionCanceled, 2), true, FreePlan},
			// A read of sub_1 that began before it was canceled and
			// returned later, as of a later time: it never lives again.
			{terms("sub_1", upscale.SubscriptionActive, 3), false, FreePlan},
			{terms("sub_1", upscale.SubscriptionPastDue, 4), false, FreePlan},
			{terms("sub_2", upscale.SubscriptionActive, 5), true, UnlimitedPlan}, // a new subscription does
			{terms("sub_2", upscale.SubscriptionIncompleteExpired, 6), true, FreePlan},
			{terms("sub_2", upscale.SubscriptionActive, 7), false, FreePlan},
		} {
			if applied, err := l.ApplyTerms(ctx, step.terms); err != nil || applied != step.applied {
				t.Fatalf("ApplyTerms(%s %s as of %v): applied %v, %v; want %v", step.terms.Subscription, step.terms.Status, step.terms.AsOf, applied, err, step.applied)
			}
			if b, err := l.Balance(ctx, "a"); err != nil || b.Plan != step.plan {
				t.Fatalf("after %s %s as of %v: plan %+v, %v; want %+v", step.terms.Subscription, step.terms.Status, step.terms.AsOf, b.Plan, err, step.plan)
			}
		}
		if held, err := l.Terms(ctx, "a"); err != nil || held.Subscription != "sub_2" || held.Status != upscale.SubscriptionIncompleteExpired {
			t.Errorf("terms %+v, %v; want sub_2's end", held, err)
		}
	})

	t.Run("PurchasesNewestFirst", func(t *testing.T) {
		l := setup(t, upscale.Account{ID: "a", Plan: FreePlan}, upscale.Account{ID: "b", Plan: FreePlan})
		for i, id := range []string{"cs_old", "cs_new"} {
			g := pack(id, 10)
			g.At = at.Add(time.Duration(i) * time.Hour)
			if _, err := l.Grant(ctx, g); err != nil {
				t.Fatal(err)
			}
		}
		other := pack("cs_b", 10)
		other.AccountID = "b"
		if _, err := l.Grant(ctx, other); err != nil {
			t.Fatal(err)
		}
		purchases, err := l.Purchases(ctx, "a")
		if err != nil || len(purchases) != 2 || purchases[0].ID != "cs_new" || purchases[1].ID != "cs_old" || !purchases[0].At.Equal(at.Add(time.Hour)) || purchases[0].Event != "evt_cs_new" {
			t.Errorf("purchases %+v, %v; want cs_new then cs_old, as granted", purchases, err)
		}
	})
}

// TestCheckoutStore checks that a CheckoutStore keeps the first record of
// each checkout and one customer per account, also when 20 checkouts of
// one account link customers at once. newStore must return an empty store
// in which the accounts "a" and "b" exist.
func TestCheckoutStore(t *testing.T, newStore func(t *testing.T) upscale.CheckoutStore) {
	ctx := context.Background()
	at := time.Date(2026, time.March, 10, 12, 0, 0, 0, time.UTC)
	t.Run("Checkouts", func(t *testing.T) {
		s := newStore(t)
		pack := upscale.Checkout{ID: "cs_1", AccountID: "a", Price: "price_pack", Units: 1000, Label: "1,000 images", At: at}
		plan := upscale.Checkout{ID: "cs_2", AccountID: "b", Price: "price_plan", Plan: UnlimitedPlan, Label: "Unlimited", At: at}
		for _, c := range []upscale.Checkout{pack, plan, {ID: "cs_1", AccountID: "b", Price: "price_other", Units: 1}} {
			if err := s.PutCheckout(ctx, c); err != nil {
				t.Fatalf("PutCheckout(%+v): %v", c, err)
			}
		}
		for _, want := range []upscale.Checkout{pack, plan} {
			if got, err := s.Checkout(ctx, want.ID); err != nil || got.AccountID != want.AccountID || got.Price != want.Price ||
				got.Units != want.Units || got.Plan != want.Plan || got.Label != want.Label || !got.At.Equal(want.At) {
				t.Errorf("Checkout(%s) = %+v, %v; want %+v, the first recorded", want.ID, got, err, want)
			}
		}
		if _, err := s.Checkout(ctx, "cs_unknown"); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("an unknown checkout: %v, want ErrNotFound", err)
		}
	})
	t.Run("OneCustomerPerAccount", func(t *testing.T) {
		s := newStore(t)
		if _, err := s.Customer(ctx, "a"); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("Customer of an account with none: %v, want ErrNotFound", err)
		}
		kept := make([]string, 20)
		var wg sync.WaitGroup
		for i := range kept {
			wg.Go(func() {
				var err error
				if kept[i], err = s.LinkCustomer(ctx, "a", fmt.Sprintf("cus_%d", i)); err != nil {
					t.Errorf("LinkCustomer: %v", err)
				}
			})
		}
		wg.Wait()
		customer, err := s.Customer(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range kept {
			if k != customer {
				t.Fatalf("LinkCustomer returned %s and %s for one account", k, customer)
			}
		}
		if account, err := s.CustomerAccount(ctx, customer); err != nil || account != "a" {
			t.Errorf("CustomerAccount(%s) = %q, %v; want a", customer, account, err)
		}
		if _, err := s.CustomerAccount(ctx, "cus_never"); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("an unknown customer: %v, want ErrNotFound", err)
		}
	})
}
