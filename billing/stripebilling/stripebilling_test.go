package stripebilling_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v84"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/billing/stripebilling"
	"github.com/upscalekit/upscale/billing/stripebilling/stripetest"
	"github.com/upscalekit/upscale/client"
	"github.com/upscalekit/upscale/internal/testservers"
	"github.com/upscalekit/upscale/upscaletest"
)

func TestMain(m *testing.M) { testservers.Main(m) }

const webhookSecret = "whsec_test_0123456789abcdef"

var (
	pack      = upscale.Offer{Price: "price_pack", Units: 10, Label: "10 images"}
	unlimited = upscale.Offer{Price: "price_unlimited", Plan: upscaletest.UnlimitedPlan, Label: "Unlimited"}
	noFree    = upscale.Plan{Name: "none", MaxFileBytes: 1 << 20}
)

// seller is a Billing on the fake Stripe, selling to account "a" (on
// noFree, so that credits pay from the first image) and "b".
type seller struct {
	*stripebilling.Billing
	fake    *stripetest.Fake
	ledger  upscale.BillingLedger
	webhook http.Handler
}

// newSeller returns a seller on ledger (nil: a MemoryLedger), its
// Options changed by configure.
func newSeller(t *testing.T, ledger upscale.BillingLedger, configure ...func(*stripebilling.Options)) *seller {
	t.Helper()
	ctx := context.Background()
	if ledger == nil {
		memory := upscale.NewMemoryLedger(upscale.LedgerOptions{})
		for _, id := range []string{"a", "b"} {
			if err := memory.PutAccount(ctx, upscale.Account{ID: id, Plan: noFree}); err != nil {
				t.Fatal(err)
			}
		}
		ledger = memory
	}
	fake := stripetest.New(t, webhookSecret)
	opts := stripebilling.Options{
		SecretKey: "sk_test_0123456789", WebhookSecret: webhookSecret, APIBase: fake.URL,
		Ledger: ledger, Checkouts: upscale.NewMemoryCheckoutStore(),
		Offers: []upscale.Offer{pack, unlimited}, FreePlan: noFree,
		SuccessURL: "https://app.test/dashboard/billing/done?session={CHECKOUT_SESSION_ID}",
		CancelURL:  "https://app.test/dashboard/billing", ReturnURL: "https://app.test/dashboard/billing",
		Logger: slog.New(slog.DiscardHandler),
	}
	for _, c := range configure {
		c(&opts)
	}
	b, err := stripebilling.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return &seller{Billing: b, fake: fake, ledger: ledger, webhook: b.Webhook()}
}

// checkout starts a checkout of price for account and returns its
// session's ID.
func (s *seller) checkout(t *testing.T, account, price string) string {
	t.Helper()
	url, err := s.Checkout(context.Background(), account, price)
	if err != nil {
		t.Fatalf("Checkout(%s, %s): %v", account, price, err)
	}
	return path.Base(url)
}

// boughtPack has account buy the pack, for 500, its payment delivered,
// and returns the charge that paid it.
func (s *seller) boughtPack(t *testing.T, account string) string {
	t.Helper()
	id := s.checkout(t, account, pack.Price)
	s.deliver(t, s.fake.Pay(id, 500), http.StatusOK)
	return s.fake.Charge(id)
}

// deliver sends e to the webhook and wants status.
func (s *seller) deliver(t *testing.T, e stripetest.Event, status int) {
	t.Helper()
	if got := s.fake.Deliver(s.webhook, e); got != status {
		t.Fatalf("%s answered %d, want %d", e.Type, got, status)
	}
}

func (s *seller) balance(t *testing.T, account string) upscale.Balance {
	t.Helper()
	b, err := s.ledger.Balance(context.Background(), account)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPackBought: a paid pack's session grants its units once, however
// often and however concurrently its event is delivered, and whether the
// success page or the webhook comes first.
func TestPackBought(t *testing.T) {
	s := newSeller(t, nil)
	ctx := context.Background()
	id := s.checkout(t, "a", pack.Price)
	paid := s.fake.Pay(id, 500)
	if c, paid, err := s.Fulfil(ctx, "a", id); err != nil || !paid || c.Units != 10 || c.Label != "10 images" {
		t.Fatalf("the success page before the webhook: %+v, paid %v, %v; want paid, 10 images", c, paid, err)
	}
	if got := s.balance(t, "a").Credits; got != 10 {
		t.Fatalf("credits after the success page: %d, want 10", got)
	}
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if got := s.fake.Deliver(s.webhook, paid); got != http.StatusOK {
				t.Errorf("a delivery answered %d", got)
			}
		})
	}
	wg.Wait()
	if got := s.balance(t, "a").Credits; got != 10 {
		t.Errorf("credits after 50 deliveries: %d, want 10", got)
	}
	if _, _, err := s.Fulfil(ctx, "b", id); !errors.Is(err, upscale.ErrNotFound) {
		t.Errorf("the success page for another account's session: %v, want ErrNotFound", err)
	}
	if _, err := s.Checkout(ctx, "a", "price_elsewhere"); !errors.Is(err, upscale.ErrInvalidRequest) {
		t.Errorf("a price not on offer: %v, want ErrInvalidRequest", err)
	}
	purchases, err := s.ledger.Purchases(ctx, "a")
	if err != nil || len(purchases) != 1 || purchases[0].ID != id || purchases[0].Units != 10 {
		t.Errorf("purchases %+v, %v; want the one pack", purchases, err)
	}
}

// TestOneCustomerPerAccount: checkouts of one account, also made at once,
// share one Stripe customer, made under the account's idempotency key,
// and each Checkout Session is created under an idempotency key of its
// own, so a retried request cannot make a second.
func TestOneCustomerPerAccount(t *testing.T) {
	s := newSeller(t, nil)
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			if _, err := s.Checkout(context.Background(), "a", pack.Price); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	s.checkout(t, "b", pack.Price)
	if n := s.fake.Customers(); n != 2 {
		t.Errorf("%d customers made for two accounts' six checkouts, want 2", n)
	}
	for _, key := range s.fake.IdempotencyKeys("/v1/customers") {
		if key != "upscale-customer-a" && key != "upscale-customer-b" {
			t.Errorf("a customer made under the idempotency key %q, want the account's", key)
		}
	}
	sessions := s.fake.IdempotencyKeys("/v1/checkout/sessions")
	if len(sessions) != 6 || slices.Contains(sessions, "") || len(slices.Compact(slices.Sorted(slices.Values(sessions)))) != 6 {
		t.Errorf("the sessions' idempotency keys: %q; want six, each its own", sessions)
	}
}

// TestUnpaidSessionGrantsNothing: a session completed with a delayed
// payment method grants when its payment succeeds, not before.
func TestUnpaidSessionGrantsNothing(t *testing.T) {
	s := newSeller(t, nil)
	id := s.checkout(t, "a", pack.Price)
	if _, paid, err := s.Fulfil(context.Background(), "a", id); err != nil || paid {
		t.Fatalf("the success page of an unpaid session: paid %v, %v; want processing", paid, err)
	}
	if got := s.balance(t, "a").Credits; got != 0 {
		t.Fatalf("credits before the payment: %d", got)
	}
	s.deliver(t, s.fake.Pay(id, 500), http.StatusOK)
	if got := s.balance(t, "a").Credits; got != 10 {
		t.Errorf("credits after the payment: %d, want 10", got)
	}
}

// TestSubscription: a subscription puts the account on its plan, keeps
// it while cancelled at the period's end or while a renewal fails, and
// ends it when Stripe deletes the subscription, whatever order the
// events arrive in: the state applied is the one Stripe holds.
func TestSubscription(t *testing.T) {
	s := newSeller(t, nil)
	ctx := context.Background()
	id := s.checkout(t, "a", unlimited.Price)
	s.deliver(t, s.fake.Pay(id, 2000), http.StatusOK)
	if b := s.balance(t, "a"); b.Plan != upscaletest.UnlimitedPlan {
		t.Fatalf("plan after subscribing: %+v, want unlimited", b.Plan)
	}
	if _, err := s.Checkout(ctx, "a", unlimited.Price); !errors.Is(err, stripebilling.ErrSubscribed) {
		t.Errorf("subscribing again: %v, want ErrSubscribed", err)
	}
	sub := s.fake.Subscription(id)
	s.deliver(t, s.fake.UpdateSubscription(sub, "customer.subscription.updated", "active", true), http.StatusOK)
	terms, err := s.ledger.Terms(ctx, "a")
	if err != nil || !terms.CancelAtPeriodEnd || terms.Plan != upscaletest.UnlimitedPlan || terms.PaidThrough.Before(time.Now().AddDate(0, 0, 27)) {
		t.Errorf("terms cancelled at the period's end: %+v, %v; want the plan kept until a month on", terms, err)
	}
	s.deliver(t, s.fake.UpdateSubscription(sub, "invoice.payment_failed", "past_due", false), http.StatusOK)
	if b := s.balance(t, "a"); b.Plan != upscaletest.UnlimitedPlan {
		t.Errorf("plan while past due: %+v, want unlimited kept", b.Plan)
	}
	s.deliver(t, s.fake.UpdateSubscription(sub, "invoice.paid", "active", false), http.StatusOK)
	if terms, err := s.ledger.Terms(ctx, "a"); err != nil || terms.Status != "active" || terms.CancelAtPeriodEnd {
		t.Errorf("terms once the renewal was paid: %+v, %v; want active, renewing", terms, err)
	}
	// Stripe deletes the subscription; its deletion is delivered before
	// an update made earlier.
	updated := s.fake.UpdateSubscription(sub, "customer.subscription.updated", "active", false)
	deleted := s.fake.UpdateSubscription(sub, "customer.subscription.deleted", "canceled", false)
	s.deliver(t, deleted, http.StatusOK)
	s.deliver(t, updated, http.StatusOK)
	if b := s.balance(t, "a"); b.Plan != noFree {
		t.Errorf("plan after the subscription was deleted: %+v, want the free plan", b.Plan)
	}
	if portal, err := s.Portal(ctx, "a"); err != nil || portal == "" {
		t.Errorf("Portal: %q, %v", portal, err)
	}
	if _, err := s.Portal(ctx, "b"); !errors.Is(err, upscale.ErrNotFound) {
		t.Errorf("Portal of an account that never bought: %v, want ErrNotFound", err)
	}
}

// TestRefunds: a refund after the credits were spent takes what is left
// down to zero and records the rest as shortfall; a refund and a dispute
// of the same charge reverse it once; a dispute won gives back what it
// took, less what the charge's refunds take, before or after it.
func TestRefunds(t *testing.T) {
	ctx := context.Background()
	t.Run("AfterSpending", func(t *testing.T) {
		s := newSeller(t, nil)
		charge := s.boughtPack(t, "a")
		for range 7 {
			r, err := s.ledger.Reserve(ctx, "a", false)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.ledger.Commit(ctx, r.ID); err != nil {
				t.Fatal(err)
			}
		}
		refunded := s.fake.Refund(charge, 500)
		s.deliver(t, refunded, http.StatusOK)
		s.deliver(t, refunded, http.StatusOK)
		if b := s.balance(t, "a"); b.Credits != 0 {
			t.Errorf("credits after the refund: %d, want 0", b.Credits)
		}
		purchases, err := s.ledger.Purchases(ctx, "a")
		if err != nil || len(purchases) != 1 || purchases[0].Reversed != (upscale.Reversed{Taken: 3, Shortfall: 7}) {
			t.Errorf("purchases %+v, %v; want 3 taken back, 7 short", purchases, err)
		}
	})
	t.Run("PartialThenDispute", func(t *testing.T) {
		s := newSeller(t, nil)
		charge := s.boughtPack(t, "a")
		s.deliver(t, s.fake.Refund(charge, 200), http.StatusOK) // 40%: 4 units
		if b := s.balance(t, "a"); b.Credits != 6 {
			t.Fatalf("credits after a 40%% refund: %d, want 6", b.Credits)
		}
		opened := s.fake.Dispute(charge, "charge.dispute.created", "needs_response")
		s.deliver(t, opened, http.StatusOK)
		s.deliver(t, opened, http.StatusOK)
		s.deliver(t, s.fake.Refund(charge, 300), http.StatusOK) // the rest, refunded too
		if b := s.balance(t, "a"); b.Credits != 0 {
			t.Fatalf("credits after the dispute and the refund: %d, want 0", b.Credits)
		}
		purchases, err := s.ledger.Purchases(ctx, "a")
		if err != nil || len(purchases) != 1 || purchases[0].Reversed != (upscale.Reversed{Taken: 10}) {
			t.Fatalf("purchases %+v, %v; want 10 reversed in all", purchases, err)
		}
		won := s.fake.Dispute(charge, "charge.dispute.closed", "won")
		s.deliver(t, won, http.StatusOK)
		s.deliver(t, won, http.StatusOK)
		if b := s.balance(t, "a"); b.Credits != 0 {
			t.Errorf("credits after the dispute of a charge refunded whole was won: %d, want 0", b.Credits)
		}
	})
	t.Run("DisputeWonThenRefunded", func(t *testing.T) {
		s := newSeller(t, nil)
		charge := s.boughtPack(t, "a")
		s.deliver(t, s.fake.Refund(charge, 200), http.StatusOK) // 40%: 4 units
		s.deliver(t, s.fake.Dispute(charge, "charge.dispute.created", "needs_response"), http.StatusOK)
		won := s.fake.Dispute(charge, "charge.dispute.closed", "won")
		s.deliver(t, won, http.StatusOK)
		if b := s.balance(t, "a"); b.Credits != 6 {
			t.Fatalf("credits after the dispute was won: %d, want the 6 it took back", b.Credits)
		}
		rest := s.fake.Refund(charge, 300)
		s.deliver(t, rest, http.StatusOK)
		s.deliver(t, rest, http.StatusOK)
		s.deliver(t, won, http.StatusOK)
		if b := s.balance(t, "a"); b.Credits != 0 {
			t.Errorf("credits after the rest was refunded: %d, want 0", b.Credits)
		}
		purchases, err := s.ledger.Purchases(ctx, "a")
		reversed := map[int64]upscale.Reversed{}
		for _, p := range purchases {
			reversed[p.Units] = p.Reversed
		}
		if err != nil || len(purchases) != 2 || reversed[6] != (upscale.Reversed{Taken: 6}) || reversed[10] != (upscale.Reversed{Taken: 10}) {
			t.Errorf("purchases %+v, %v; want the dispute's 6 given back and taken again, and the pack's 10 reversed", purchases, err)
		}
	})
}

// TestDelayedPayment: a pack paid by a method whose money comes later
// (a bank debit) grants nothing at checkout.session.completed, and its
// units once checkout.session.async_payment_succeeded comes; one whose
// payment failed grants nothing.
func TestDelayedPayment(t *testing.T) {
	s := newSeller(t, nil)
	later := s.checkout(t, "a", pack.Price)
	s.deliver(t, s.fake.PayLater(later, 500), http.StatusOK)
	if _, paid, err := s.Fulfil(context.Background(), "a", later); err != nil || paid {
		t.Errorf("the success page before the money came: paid %v, %v; want processing", paid, err)
	}
	if b := s.balance(t, "a"); b.Credits != 0 {
		t.Fatalf("credits before the money came: %d, want 0", b.Credits)
	}
	cleared := s.fake.Clear(later, true)
	s.deliver(t, cleared, http.StatusOK)
	s.deliver(t, cleared, http.StatusOK)
	if b := s.balance(t, "a"); b.Credits != pack.Units {
		t.Errorf("credits once the money came: %d, want %d", b.Credits, pack.Units)
	}
	failing := s.checkout(t, "b", pack.Price)
	s.deliver(t, s.fake.PayLater(failing, 500), http.StatusOK)
	s.deliver(t, s.fake.Clear(failing, false), http.StatusOK)
	if b := s.balance(t, "b"); b.Credits != 0 {
		t.Errorf("credits after the payment failed: %d, want 0", b.Credits)
	}
}

// TestWebhookForAccountGone: a payment for an account the ledger no longer
// has is answered 200, since no retry could apply it (Stripe would retry
// for three days, then disable the endpoint), and grants nothing.
func TestWebhookForAccountGone(t *testing.T) {
	s := newSeller(t, nil)
	id := s.checkout(t, "gone", pack.Price)
	s.deliver(t, s.fake.Pay(id, 500), http.StatusOK)
	if _, err := s.ledger.Balance(context.Background(), "gone"); !errors.Is(err, upscale.ErrNotFound) {
		t.Errorf("the account that was gone: %v, want ErrNotFound still", err)
	}
}

// TestRefundBeforeThePayment: a refund whose event comes before the
// payment's (Stripe does not keep their order) is answered 500, not lost:
// Stripe sends it again, and once the pack is granted it takes it back.
func TestRefundBeforeThePayment(t *testing.T) {
	s := newSeller(t, nil)
	id := s.checkout(t, "a", pack.Price)
	paid := s.fake.Pay(id, 500)
	refunded := s.fake.Refund(s.fake.Charge(id), 500)
	s.deliver(t, refunded, http.StatusInternalServerError)
	s.deliver(t, paid, http.StatusOK)
	s.deliver(t, refunded, http.StatusOK)
	if b := s.balance(t, "a"); b.Credits != 0 {
		t.Errorf("credits after the payment and its refund, delivered the other way round: %d, want 0", b.Credits)
	}
}

// TestWebhookRefusesForgeries: an event signed with another secret, signed
// too long ago, or of another API version, and a body past 256 KiB, are
// answered 400 and change nothing.
func TestWebhookRefusesForgeries(t *testing.T) {
	s := newSeller(t, nil)
	id := s.checkout(t, "a", pack.Price)
	paid := s.fake.Pay(id, 500)
	if got := s.fake.DeliverSigned(s.webhook, paid, "whsec_someone_else", time.Now()); got != http.StatusBadRequest {
		t.Errorf("another secret: %d, want 400", got)
	}
	if got := s.fake.DeliverSigned(s.webhook, paid, webhookSecret, time.Now().Add(-10*time.Minute)); got != http.StatusBadRequest {
		t.Errorf("signed 10 minutes ago: %d, want 400", got)
	}
	old := paid
	old.Payload = []byte(string(paid.Payload[:len(paid.Payload)-1]) + `,"api_version":"2020-08-27"}`)
	if got := s.fake.Deliver(s.webhook, old); got != http.StatusBadRequest {
		t.Errorf("another API version: %d, want 400", got)
	}
	padded := paid
	padded.Payload = []byte(string(paid.Payload[:len(paid.Payload)-1]) + `,"padding":"` + strings.Repeat("x", 256<<10) + `"}`)
	if got := s.fake.Deliver(s.webhook, padded); got != http.StatusBadRequest {
		t.Errorf("a body past 256 KiB: %d, want 400", got)
	}
	if got := s.balance(t, "a").Credits; got != 0 {
		t.Errorf("credits after forged events: %d, want 0", got)
	}
}

// TestWebhookRetriedOnOutage: an event that could not be applied because
// the ledger is out of reach is answered 500, so that Stripe sends it
// again, and then applied.
func TestWebhookRetriedOnOutage(t *testing.T) {
	memory := upscale.NewMemoryLedger(upscale.LedgerOptions{})
	if err := memory.PutAccount(context.Background(), upscale.Account{ID: "a", Plan: noFree}); err != nil {
		t.Fatal(err)
	}
	ledger := &switchLedger{BillingLedger: memory}
	s := newSeller(t, ledger)
	id := s.checkout(t, "a", pack.Price)
	paid := s.fake.Pay(id, 500)
	ledger.down = true
	s.deliver(t, paid, http.StatusInternalServerError)
	ledger.down = false
	s.deliver(t, paid, http.StatusOK)
	if got := s.balance(t, "a").Credits; got != 10 {
		t.Errorf("credits once the ledger is back: %d, want 10", got)
	}
}

// switchLedger is a BillingLedger whose Grant is out of reach while down.
type switchLedger struct {
	upscale.BillingLedger
	down bool
}

func (l *switchLedger) Grant(ctx context.Context, g upscale.Grant) (bool, error) {
	if l.down {
		return false, upscale.ErrUnavailable
	}
	return l.BillingLedger.Grant(ctx, g)
}

// TestRequestShapes: every request Billing sends Stripe has the shape
// Stripe's API description gives it, as stripe-mock checks: customers,
// Checkout Sessions of both modes, the portal, and the look-ups of
// sessions, subscriptions and charges that events lead to.
func TestRequestShapes(t *testing.T) {
	ctx := context.Background()
	ledger := upscale.NewMemoryLedger(upscale.LedgerOptions{})
	if err := ledger.PutAccount(ctx, upscale.Account{ID: "a", Plan: noFree}); err != nil {
		t.Fatal(err)
	}
	checkouts := &recordingCheckouts{CheckoutStore: upscale.NewMemoryCheckoutStore()}
	fake := stripetest.New(t, webhookSecret) // signs the events
	b, err := stripebilling.New(stripebilling.Options{
		SecretKey: "sk_test_0123456789", WebhookSecret: webhookSecret, APIBase: testservers.StripeMock(t),
		Ledger: ledger, Checkouts: checkouts, Offers: []upscale.Offer{pack, unlimited}, FreePlan: noFree,
		SuccessURL: "https://app.test/done?session={CHECKOUT_SESSION_ID}", CancelURL: "https://app.test/billing", ReturnURL: "https://app.test/billing",
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, price := range []string{pack.Price, unlimited.Price} {
		url, err := b.Checkout(ctx, "a", price)
		if err != nil || url == "" {
			t.Fatalf("Checkout of %s: %q, %v", price, url, err)
		}
		customer, err := checkouts.Customer(ctx, "a")
		if err != nil || customer == "" {
			t.Fatalf("the account's customer: %q, %v", customer, err)
		}
	}
	for _, id := range checkouts.ids {
		if _, _, err := b.Fulfil(ctx, "a", id); err != nil {
			t.Errorf("Fulfil(%s): %v", id, err)
		}
	}
	if url, err := b.Portal(ctx, "a"); err != nil || url == "" {
		t.Errorf("Portal: %q, %v", url, err)
	}
	if _, err := b.Check(ctx, "https://app.test/billing/stripe/webhook"); err != nil {
		t.Errorf("Check: %v", err)
	}
	// Events whose objects lead to look-ups: stripe-mock answers its
	// fixtures, of customers and sessions this host never made (a
	// subscription's customer is taken as a's, so that the look-up of its
	// other subscriptions is made too); what is checked is that every
	// look-up is accepted.
	for _, e := range []stripetest.Event{
		fake.Event("customer.subscription.updated", map[string]any{"id": "sub_123", "object": "subscription"}),
		fake.Event("invoice.paid", map[string]any{"id": "in_1", "object": "invoice", "parent": map[string]any{"subscription_details": map[string]any{"subscription": "sub_123"}}}),
		fake.Event("charge.refunded", map[string]any{"id": "ch_1", "object": "charge", "payment_intent": "pi_1", "amount": 500, "amount_refunded": 500}),
		fake.Event("charge.dispute.created", map[string]any{"id": "dp_1", "object": "dispute", "charge": "ch_1", "status": "needs_response"}),
	} {
		if got := fake.Deliver(b.Webhook(), e); got != http.StatusOK {
			t.Errorf("%s: %d, want 200", e.Type, got)
		}
	}
}

// recordingCheckouts is a CheckoutStore that lists the checkouts put,
// and takes every customer for account a.
type recordingCheckouts struct {
	upscale.CheckoutStore
	ids []string
}

func (c *recordingCheckouts) CustomerAccount(context.Context, string) (string, error) {
	return "a", nil
}

func (c *recordingCheckouts) PutCheckout(ctx context.Context, checkout upscale.Checkout) error {
	c.ids = append(c.ids, checkout.ID)
	return c.CheckoutStore.PutCheckout(ctx, checkout)
}

// TestCheck: billing check names what keeps Stripe from selling as
// configured: a price missing, archived or of the wrong kind, and a
// webhook endpoint missing, of another API version or short of events;
// and nothing when all is set up.
func TestCheck(t *testing.T) {
	const hook = "https://app.test/billing/stripe/webhook"
	s := newSeller(t, nil)
	ctx := context.Background()
	problems, err := s.Check(ctx, hook)
	if err != nil || len(problems) != 3 || !strings.Contains(problems[0], "price_pack") || !strings.Contains(problems[2], "no webhook endpoint sends to "+hook) {
		t.Fatalf("nothing set up: %q, %v", problems, err)
	}
	s.fake.SetPrice(stripetest.Price{ID: pack.Price, Recurring: true, Amount: 1000, Currency: "usd"}) // recurring and archived: wrong twice
	s.fake.SetPrice(stripetest.Price{ID: unlimited.Price, Recurring: true, Active: true, Amount: 2900, Currency: "usd"})
	s.fake.Endpoint(hook, "2020-08-27", "checkout.session.completed")
	problems, err = s.Check(ctx, hook)
	if err != nil || len(problems) != 3+len(stripebilling.Events)-1 || !strings.Contains(strings.Join(problems, "\n"), `sends API version "2020-08-27"`) {
		t.Fatalf("set up wrong: %q, %v", problems, err)
	}
	fixed := newSeller(t, nil)
	fixed.fake.SetPrice(stripetest.Price{ID: pack.Price, Active: true, Amount: 1000, Currency: "usd"})
	fixed.fake.SetPrice(stripetest.Price{ID: unlimited.Price, Recurring: true, Active: true, Amount: 2900, Currency: "usd"})
	fixed.fake.Endpoint(hook, stripe.APIVersion, "*")
	if problems, err := fixed.Check(ctx, hook); err != nil || len(problems) != 0 {
		t.Errorf("set up right: %q, %v; want nothing", problems, err)
	}
}

// TestReadPrices: Offers says what each offer costs once its price was
// read, from Stripe's amount, currency and period; a price whose amount
// the customer chooses has no Cost; a price that cannot be read keeps
// the Cost last read, and the error names it.
func TestReadPrices(t *testing.T) {
	ctx := context.Background()
	s := newSeller(t, nil)
	if costs := costs(s.Offers()); costs[pack.Price].Known() || costs[unlimited.Price].Known() {
		t.Fatalf("costs before any read: %+v", costs)
	}
	s.fake.SetPrice(stripetest.Price{ID: pack.Price, Active: true, Amount: 1000, Currency: "usd"})
	s.fake.SetPrice(stripetest.Price{ID: unlimited.Price, Recurring: true, Active: true})
	if err := s.ReadPrices(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[string]upscale.Cost{pack.Price: {Amount: 1000, Currency: "usd"}, unlimited.Price: {}}
	if got := costs(s.Offers()); !maps.Equal(got, want) {
		t.Errorf("costs %+v, want %+v (the plan's amount is the customer's to choose)", got, want)
	}
	s.fake.SetPrice(stripetest.Price{ID: unlimited.Price, Recurring: true, Active: true, Amount: 2900, Currency: "eur"})
	s.fake.DeletePrice(pack.Price)
	err := s.ReadPrices(ctx)
	if err == nil || !strings.Contains(err.Error(), pack.Price) {
		t.Errorf("ReadPrices with a price gone = %v, want an error naming it", err)
	}
	want = map[string]upscale.Cost{pack.Price: {Amount: 1000, Currency: "usd"}, unlimited.Price: {Amount: 2900, Currency: "eur", Interval: "month", IntervalCount: 1}}
	if got := costs(s.Offers()); !maps.Equal(got, want) {
		t.Errorf("costs %+v, want %+v", got, want)
	}
	// An amount in fractions of a cent is no whole Cost.
	s.fake.SetPrice(stripetest.Price{ID: pack.Price, Active: true, Amount: 2, Currency: "usd", AmountDecimal: "1.5"})
	if err := s.ReadPrices(ctx); err != nil {
		t.Fatal(err)
	}
	if got := costs(s.Offers())[pack.Price]; got.Known() {
		t.Errorf("a price of 1.5 cents reads %+v, want unknown", got)
	}
}

// costs are offers' Costs by price.
func costs(offers []upscale.Offer) map[string]upscale.Cost {
	m := map[string]upscale.Cost{}
	for _, o := range offers {
		m[o.Price] = o.Cost
	}
	return m
}

// TestPlanLapsesWhileJobsWait: a subscription that ends while one job is
// in the engine and another queued behind it leaves each job its unit, held from the unlimited pool
// when it was submitted: the job succeeds, charged to it. The next
// request is refused as the plan without a subscription has it, and told
// where to pay.
func TestPlanLapsesWhileJobsWait(t *testing.T) {
	ctx := context.Background()
	s := newSeller(t, nil)
	id := s.checkout(t, "a", unlimited.Price)
	s.deliver(t, s.fake.Pay(id, 2900), http.StatusOK)

	keys := upscale.NewMemoryKeyStore()
	const key = "upk_test_lapse_0123456789"
	if err := keys.AddKey(ctx, key, "a"); err != nil {
		t.Fatal(err)
	}
	blobs, err := upscale.NewMemoryBlobStore(upscale.MemoryBlobStoreOptions{BaseURL: "http://results.test/r"})
	if err != nil {
		t.Fatal(err)
	}
	source := upscaletest.TestImagePNG(t, 16, 12)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(source) }))
	defer origin.Close()
	engine := upscaletest.GatedUpscaler{Entered: make(chan struct{}, 1), Gate: make(chan struct{})}
	const buy = "https://app.test/dashboard/billing"
	h, err := upscale.New(upscale.Config{
		Keys: keys, Ledger: s.ledger, Upscaler: engine, Blobs: blobs, Jobs: upscale.NewMemoryJobQueue(upscale.MemoryJobQueueOptions{}),
		Capacity: upscale.Capacity{EngineConcurrency: 2}, JobWorkers: 1, // the second job waits in the queue, a request finds room
		Fetch: upscale.FetchPolicy{AllowPrivateNetworks: true}, Wording: upscale.Wording{BuyURL: buy}, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.StartJobs(ctx); err != nil {
		t.Fatal(err)
	}
	defer h.StopJobs(ctx)
	server := httptest.NewServer(h)
	defer server.Close()
	api := &client.Client{BaseURL: server.URL, Key: key, MaxAttempts: 1}
	job, err := api.Submit(ctx, client.Request{ImageURL: origin.URL + "/a.png"})
	if err != nil {
		t.Fatal(err)
	}
	<-engine.Entered // the job holds its unit, in the engine
	queued, err := api.Submit(ctx, client.Request{ImageURL: origin.URL + "/b.png"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := api.Job(ctx, queued.ID); err != nil || got.Status != "queued" {
		t.Fatalf("the second job: %+v, %v; want it queued behind the first", got, err)
	}
	s.deliver(t, s.fake.UpdateSubscription(s.fake.Subscription(id), "customer.subscription.deleted", "canceled", false), http.StatusOK)
	_, err = api.Upscale(ctx, client.Request{ImageURL: origin.URL + "/a.png"})
	if p, ok := errors.AsType[*client.Error](err); !ok || p.Code != "quota_exhausted" || p.BuyURL != buy {
		t.Errorf("a request after the plan lapsed: %v; want 429 quota_exhausted with where to pay", err)
	}
	close(engine.Gate)
	for _, id := range []string{job.ID, queued.ID} {
		done, err := api.Wait(ctx, id)
		if err != nil || done.Status != "succeeded" || done.Result == nil || done.Result.Via != "unlimited" {
			t.Errorf("job %s, submitted before the plan lapsed: %+v, %v; want succeeded via unlimited", id, done, err)
		}
	}
}

// TestReviewedEdges: two partial refunds handled at once take back their
// total, not the sum of both; an inquiry (a dispute of status warning_*)
// withdraws no money and takes nothing; an older subscription ending does
// not end the account's live one.
func TestReviewedEdges(t *testing.T) {
	ctx := context.Background()
	t.Run("ConcurrentPartialRefunds", func(t *testing.T) {
		s := newSeller(t, nil)
		charge := s.boughtPack(t, "a")
		thirty, sixty := s.fake.Refund(charge, 150), s.fake.Refund(charge, 150) // 30%, then 60% in all
		var wg sync.WaitGroup
		for _, e := range []stripetest.Event{thirty, sixty, thirty, sixty} {
			wg.Go(func() {
				if got := s.fake.Deliver(s.webhook, e); got != http.StatusOK {
					t.Errorf("a refund's event: %d", got)
				}
			})
		}
		wg.Wait()
		if b := s.balance(t, "a"); b.Credits != 4 {
			t.Errorf("credits after refunds of 60%% in all: %d, want 4", b.Credits)
		}
	})
	t.Run("Inquiry", func(t *testing.T) {
		s := newSeller(t, nil)
		charge := s.boughtPack(t, "a")
		s.deliver(t, s.fake.Dispute(charge, "charge.dispute.created", "warning_needs_response"), http.StatusOK)
		s.deliver(t, s.fake.Dispute(charge, "charge.dispute.closed", "warning_closed"), http.StatusOK)
		if b := s.balance(t, "a"); b.Credits != 10 {
			t.Errorf("credits after an inquiry: %d, want all 10", b.Credits)
		}
	})
	t.Run("OlderSubscriptionEnds", func(t *testing.T) {
		s := newSeller(t, nil)
		first := s.checkout(t, "a", unlimited.Price)
		s.deliver(t, s.fake.Pay(first, 2900), http.StatusOK)
		ended := s.fake.UpdateSubscription(s.fake.Subscription(first), "customer.subscription.deleted", "canceled", false)
		s.deliver(t, ended, http.StatusOK)
		second := s.checkout(t, "a", unlimited.Price)
		s.deliver(t, s.fake.Pay(second, 2900), http.StatusOK)
		s.deliver(t, ended, http.StatusOK) // the first's end, delivered again late
		if b := s.balance(t, "a"); b.Plan != upscaletest.UnlimitedPlan {
			t.Errorf("plan after the old subscription's end came again: %+v, want the live one's", b.Plan)
		}
		if terms, err := s.ledger.Terms(ctx, "a"); err != nil || terms.Subscription != s.fake.Subscription(second) {
			t.Errorf("terms %+v, %v; want the second subscription's", terms, err)
		}
	})
}

// TestOnePlanCheckoutOpen: a plan checkout made while another of the
// account's is open expires the open one at Stripe, so that only the
// newer can be paid; packs' sessions, and other accounts', stay open.
func TestOnePlanCheckoutOpen(t *testing.T) {
	s := newSeller(t, nil)
	packBefore := s.checkout(t, "a", pack.Price)
	first := s.checkout(t, "a", unlimited.Price)
	second := s.checkout(t, "a", unlimited.Price)
	packAfter := s.checkout(t, "a", pack.Price)
	others := s.checkout(t, "b", unlimited.Price)
	for id, want := range map[string]string{packBefore: "open", first: "expired", second: "open", packAfter: "open", others: "open"} {
		if got := s.fake.SessionStatus(id); got != want {
			t.Errorf("session %s: %s, want %s", id, got, want)
		}
	}
	buyer := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := buyer.PostForm(s.fake.URL+"/checkout/"+first, nil) // Pay, in the first session's tab
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusGone {
		t.Errorf("paying the first session: %s, want 410: it is expired", resp.Status)
	}
	s.deliver(t, s.fake.Pay(second, 2900), http.StatusOK)
	if b := s.balance(t, "a"); b.Plan != upscaletest.UnlimitedPlan {
		t.Errorf("plan after paying the second session: %+v, want unlimited", b.Plan)
	}
}

// TestPlanCheckoutsAtOnce: two plan checkouts of one account made at the
// same moment (a double click, two tabs) leave one session open, which a
// caller was sent to; the account cannot pay for two.
func TestPlanCheckoutsAtOnce(t *testing.T) {
	s := newSeller(t, nil)
	for run := range 10 {
		urls := make([]string, 2)
		var wg sync.WaitGroup
		for i := range urls {
			wg.Go(func() {
				url, err := s.Checkout(context.Background(), "a", unlimited.Price)
				if err != nil {
					t.Errorf("run %d, checkout %d: %v", run, i, err)
				}
				urls[i] = url
			})
		}
		wg.Wait()
		open := s.fake.OpenSessions()
		if len(open) != 1 || !slices.ContainsFunc(urls, func(u string) bool { return path.Base(u) == open[0] }) {
			t.Errorf("run %d: checkouts sent to %q, open sessions %v; want one open, where a checkout sent its buyer", run, urls, open)
		}
	}
}

// TestTwoSubscriptionsPaidAtOnce: two plan sessions paid in the same
// moment (the second made once the first was paid, before its event
// came) make two live subscriptions. Each event that finds both is
// logged at ERROR, naming the account and both, and counted, and Doubles
// lists the account. Cancelling the subscription the account's terms
// name leaves it on the plan while the other lives; cancelling that too
// returns it to the free plan.
func TestTwoSubscriptionsPaidAtOnce(t *testing.T) {
	ctx := context.Background()
	var log bytes.Buffer // slog's handler writes one line at a time
	s := newSeller(t, nil, func(o *stripebilling.Options) { o.Logger = slog.New(slog.NewTextHandler(&log, nil)) })
	first := s.checkout(t, "a", unlimited.Price)
	paidFirst := s.fake.Pay(first, 2900)
	second := s.checkout(t, "a", unlimited.Price)
	paidSecond := s.fake.Pay(second, 2900)
	s.deliver(t, paidFirst, http.StatusOK)
	s.deliver(t, paidSecond, http.StatusOK)
	subs := []string{s.fake.Subscription(first), s.fake.Subscription(second)}
	if got, want := s.Stats().DoubleSubscriptions, uint64(2); got != want {
		t.Errorf("DoubleSubscriptions %d, want %d: each payment's event found both", got, want)
	}
	for _, line := range strings.SplitAfter(strings.TrimSpace(log.String()), "\n") {
		if !strings.Contains(line, "level=ERROR") || !strings.Contains(line, "account=a ") || !strings.Contains(line, subs[0]) || !strings.Contains(line, subs[1]) {
			t.Errorf("log line %q; want ERROR naming account a and both subscriptions", line)
		}
	}
	doubles, err := s.Doubles(ctx)
	if err != nil || len(doubles) != 1 || doubles[0].AccountID != "a" || !slices.Equal(slices.Sorted(slices.Values(doubles[0].Subscriptions)), subs) {
		t.Errorf("Doubles: %+v, %v; want account a with %v", doubles, err, subs)
	}

	terms, err := s.ledger.Terms(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	named, other := subs[0], subs[1]
	if terms.Subscription == other {
		named, other = other, named
	}
	s.deliver(t, s.fake.UpdateSubscription(named, "customer.subscription.deleted", "canceled", false), http.StatusOK)
	if b := s.balance(t, "a"); b.Plan != upscaletest.UnlimitedPlan {
		t.Errorf("plan once one of two live subscriptions was cancelled: %+v, want unlimited while the other lives", b.Plan)
	}
	if terms, err := s.ledger.Terms(ctx, "a"); err != nil || terms.Subscription != other || terms.Status != upscale.SubscriptionActive {
		t.Errorf("terms %+v, %v; want the live subscription %s's", terms, err, other)
	}
	if doubles, err := s.Doubles(ctx); err != nil || len(doubles) != 0 {
		t.Errorf("Doubles once one was cancelled: %+v, %v; want none", doubles, err)
	}
	s.deliver(t, s.fake.UpdateSubscription(other, "customer.subscription.deleted", "canceled", false), http.StatusOK)
	if b := s.balance(t, "a"); b.Plan != noFree {
		t.Errorf("plan once both were cancelled: %+v, want the free plan", b.Plan)
	}
}

// TestSlowReadBeforeCancellation: a read of the subscription that began
// before its cancellation and returned after it (Stripe answering
// slowly) changes nothing: the cancelled account stays on the free plan.
func TestSlowReadBeforeCancellation(t *testing.T) {
	ctx := context.Background()
	s := newSeller(t, nil)
	id := s.checkout(t, "a", unlimited.Price)
	s.deliver(t, s.fake.Pay(id, 2900), http.StatusOK)
	sub := s.fake.Subscription(id)
	renewed := s.fake.UpdateSubscription(sub, "invoice.paid", "active", false)
	started, release := s.fake.HoldRead(sub)
	defer release()
	answered := make(chan int, 1)
	go func() { answered <- s.fake.Deliver(s.webhook, renewed) }()
	<-started // the renewal's read has taken the active state
	s.deliver(t, s.fake.UpdateSubscription(sub, "customer.subscription.deleted", "canceled", false), http.StatusOK)
	release()
	if got := <-answered; got != http.StatusOK {
		t.Fatalf("the renewal answered %d", got)
	}
	if b := s.balance(t, "a"); b.Plan != noFree {
		t.Errorf("plan after the slow read of the active subscription returned: %+v, want the free plan", b.Plan)
	}
	if terms, err := s.ledger.Terms(ctx, "a"); err != nil || terms.Status != upscale.SubscriptionCanceled {
		t.Errorf("terms %+v, %v; want canceled", terms, err)
	}
}

// TestReceipt: a paid pack's receipt is its charge's at Stripe; a
// payment still clearing has none until it clears; another account's
// purchase is not found.
func TestReceipt(t *testing.T) {
	ctx := context.Background()
	s := newSeller(t, nil)
	id := s.checkout(t, "a", pack.Price)
	s.deliver(t, s.fake.Pay(id, 500), http.StatusOK)
	if got, err := s.Receipt(ctx, "a", id); err != nil || got != s.fake.URL+"/receipts/"+s.fake.Charge(id) {
		t.Errorf("Receipt of a paid pack = %q, %v; want its charge's receipt", got, err)
	}
	if _, err := s.Receipt(ctx, "b", id); !errors.Is(err, upscale.ErrNotFound) {
		t.Errorf("another account's Receipt: %v, want ErrNotFound", err)
	}
	later := s.checkout(t, "a", pack.Price)
	s.deliver(t, s.fake.PayLater(later, 500), http.StatusOK)
	if _, err := s.Receipt(ctx, "a", later); !errors.Is(err, upscale.ErrNotFound) {
		t.Errorf("Receipt of a payment still clearing: %v, want ErrNotFound", err)
	}
	s.deliver(t, s.fake.Clear(later, true), http.StatusOK)
	if got, err := s.Receipt(ctx, "a", later); err != nil || got == "" {
		t.Errorf("Receipt once cleared = %q, %v", got, err)
	}
}
