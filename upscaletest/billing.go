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
	s := billingSuite{newLedger: newLedger, at: time.Date(2026, time.March, 10, 12, 0, 0, 0, time.UTC)}
	testBillingGrants(t, s)
	testBillingReversals(t, s)
	testBillingTerms(t, s)
}

// billingSuite is what TestBillingLedger's checks share: the ledger under
// test, made anew for each, and the time of their payments.
type billingSuite struct {
	newLedger func(t *testing.T, opts upscale.LedgerOptions) BillingHarness
	at        time.Time
}

// setup returns a new ledger holding accounts.
func (s billingSuite) setup(t *testing.T, accounts ...upscale.Account) BillingHarness {
	t.Helper()
	l := s.newLedger(t, upscale.LedgerOptions{Now: NewClock(s.at).Now})
	for _, a := range accounts {
		if err := l.PutAccount(context.Background(), a); err != nil {
			t.Fatalf("PutAccount(%+v): %v", a, err)
		}
	}
	return l
}

// pack is a grant of units credits to account "a", paid at the suite's
// time by event "evt_" and id.
func (s billingSuite) pack(id string, units int64) upscale.Grant {
	return upscale.Grant{ID: id, AccountID: "a", Pool: upscale.PoolCredit, Units: units, Label: fmt.Sprintf("%d images", units), Event: "evt_" + id, At: s.at}
}

// testBillingGrants checks a BillingLedger's grants: each once, also
// among concurrent deliveries; none to an unknown account or of nothing;
// the purchases in order.
func testBillingGrants(t *testing.T, s billingSuite) {
	ctx, at, setup, pack := context.Background(), s.at, s.setup, s.pack
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
