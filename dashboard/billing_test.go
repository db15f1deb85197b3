package dashboard_test

import (
	"context"
	"net/http"
	"net/url"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/billing/stripebilling"
	"github.com/upscalekit/upscale/billing/stripebilling/stripetest"
	"github.com/upscalekit/upscale/dashboard"
	"github.com/upscalekit/upscale/upscaletest"
)

const webhookSecret = "whsec_dashboard_test"

// stripebilling sells for the dashboard.
var _ dashboard.Seller = (*stripebilling.Billing)(nil)

// sellingSite is a site whose Billing page sells a pack and a plan
// through the Stripe API at apiBase, with the options configure changes.
func sellingSite(t *testing.T, apiBase string, configure func(*stripebilling.Options)) (*site, *stripebilling.Billing) {
	t.Helper()
	var seller *stripebilling.Billing
	s := newSite(t, upscaletest.NewClock(start), func(c *dashboard.Config) {
		opts := stripebilling.Options{
			SecretKey: "sk_test_dashboard", WebhookSecret: webhookSecret, APIBase: apiBase,
			Ledger: c.Ledger.(upscale.BillingLedger), Checkouts: upscale.NewMemoryCheckoutStore(),
			Offers: []upscale.Offer{
				{Price: "price_1000", Units: 1000, Label: "1,000 images"},
				{Price: "price_unlimited", Plan: upscale.Plan{Name: "unlimited", Paid: true, Unlimited: true, MaxFileBytes: 50 << 20}, Label: "Unlimited"},
			},
			FreePlan:   upscale.Plan{Name: "free", MonthlyImages: 10},
			SuccessURL: dashboard.CheckoutDoneURL("https://app.test/dashboard/", "{CHECKOUT_SESSION_ID}"),
			CancelURL:  "https://app.test/dashboard/billing", ReturnURL: "https://app.test/dashboard/billing",
			Logger: c.Logger,
		}
		if configure != nil {
			configure(&opts)
		}
		var err error
		if seller, err = stripebilling.New(opts); err != nil {
			t.Fatal(err)
		}
		c.Seller = seller
	})
	return s, seller
}

// buy posts the Buy form of price as account and returns the checkout
// session it is sent to.
func (s *site) buy(fakeURL, account, price string) string {
	s.t.Helper()
	status, _, header := s.do("POST", "/billing/checkout", account, url.Values{"price": {price}})
	if status != http.StatusSeeOther || !strings.HasPrefix(header.Get("Location"), fakeURL+"/checkout/cs_") {
		s.t.Fatalf("Buy %s: %d to %q, want 303 to the checkout", price, status, header.Get("Location"))
	}
	return path.Base(header.Get("Location"))
}

// TestBilling: the Billing page sells packs and the plan through Stripe's
// pages (the fake's here) at the prices read there, a pack's per image
// and what the plan includes beside: each button is a POST answered 303 to the
// checkout; coming back, the page shows the credits added before any
// webhook; the plan shows when it renews, when it ends once cancelled,
// and a banner while a renewal payment fails; purchases are listed with
// what was refunded.
func TestBilling(t *testing.T) {
	fake := stripetest.New(t, webhookSecret)
	s, seller := sellingSite(t, fake.URL, nil)
	if _, body, _ := s.do("GET", "/billing", "acme", nil); !strings.Contains(body, "<button type=\"submit\">Buy 1,000 images</button>") {
		t.Errorf("the Billing page before the prices were read offers no pack without its price:\n%s", body)
	}
	fake.SetPrice(stripetest.Price{ID: "price_1000", Active: true, Amount: 1000, Currency: "usd"})
	fake.SetPrice(stripetest.Price{ID: "price_unlimited", Recurring: true, Active: true, Amount: 2900, Currency: "eur"})
	if err := seller.ReadPrices(context.Background()); err != nil {
		t.Fatal(err)
	}
	status, body, header := s.do("GET", "/billing", "acme", nil)
	if csp := header.Get("Content-Security-Policy"); !strings.Contains(csp, "form-action 'self' "+fake.URL+";") {
		t.Errorf("the Billing page's policy %q does not let its forms lead to the checkout", csp)
	}
	for _, want := range []string{
		"<strong>1,000 images</strong>: <span class=\"amount\">$10.00</span>", "$0.01 an image.", "Buy 1,000 images for $10.00</button>",
		"<strong>Unlimited</strong>: <span class=\"amount\">€29.00 a month</span>", "Every image, no monthly count, scales ×2 to ×16, source files up to 50 MB.",
		"Subscribe: Unlimited, €29.00 a month</button>",
	} {
		if status != http.StatusOK || !strings.Contains(body, want) || strings.Contains(body, "Purchases") {
			t.Fatalf("the Billing page: %d, lacks %q\n%s", status, want, body)
		}
	}
	buy := func(price string) string {
		t.Helper()
		return s.buy(fake.URL, "acme", price)
	}
	for path, form := range map[string]url.Values{"/billing/checkout": {"price": {"price_1000"}}, "/billing/portal": nil} {
		if status := s.postCrossSite(path, "acme", form); status != http.StatusForbidden {
			t.Errorf("a cross-site POST to %s: %d, want 403", path, status)
		}
	}
	if keys := fake.IdempotencyKeys("/v1/checkout/sessions"); len(keys) != 0 {
		t.Errorf("cross-site POSTs made %d checkout sessions", len(keys))
	}
	id := buy("price_1000")
	fake.Pay(id, 1900) // no webhook yet
	status, body, _ = s.do("GET", "/billing/done?session="+id, "acme", nil)
	if status != http.StatusOK || !strings.Contains(body, "1,000 credits added: 1,000 images.") || !strings.Contains(body, `<span class="left">1005</span>`) {
		t.Fatalf("back from the checkout: %d\n%s", status, body)
	}
	later := buy("price_1000")
	fake.PayLater(later, 1900) // a bank debit: the money comes later
	if status, body, _ := s.do("GET", "/billing/done?session="+later, "acme", nil); status != http.StatusOK || !strings.Contains(body, "Payment processing") || !strings.Contains(body, "The credits are added as soon as it is made") {
		t.Errorf("back from a checkout whose money comes later: %d\n%s", status, body)
	}
	if status, _, _ := s.do("GET", "/billing/done?session="+id, "globex", nil); status != http.StatusNotFound {
		t.Errorf("another account's checkout: %d, want 404", status)
	}
	if status, _, _ := s.do("POST", "/billing/checkout", "acme", url.Values{"price": {"price_free_lunch"}}); status != http.StatusBadRequest {
		t.Errorf("a price not on sale: %d, want 400", status)
	}
	if got := fake.Deliver(seller.Webhook(), fake.Refund(fake.Charge(id), 190)); got != http.StatusOK {
		t.Fatalf("the refund's event: %d", got)
	}
	if _, body, _ = s.do("GET", "/billing", "acme", nil); !strings.Contains(body, "<td>1,000 images</td><td>1000</td><td>100 refunded</td><td><a href=\"./billing/receipts/"+id+"\">Receipt</a></td>") {
		t.Errorf("the purchases after a 10%% refund:\n%s", body)
	}
	if status, _, header := s.do("GET", "/billing/receipts/"+id, "acme", nil); status != http.StatusSeeOther || header.Get("Location") != fake.URL+"/receipts/"+fake.Charge(id) {
		t.Errorf("the pack's receipt: %d to %q, want 303 to the charge's receipt", status, header.Get("Location"))
	}
	for account, purchase := range map[string]string{"globex": id, "acme": later, "acme ": "cs_no_such"} {
		if status, _, _ := s.do("GET", "/billing/receipts/"+purchase, strings.TrimSpace(account), nil); status != http.StatusNotFound {
			t.Errorf("the receipt of %s for %s: %d, want 404 (another's, unpaid, or none)", purchase, account, status)
		}
	}

	id = buy("price_unlimited")
	if got := fake.Deliver(seller.Webhook(), fake.Pay(id, 2900)); got != http.StatusOK {
		t.Fatalf("the subscription's event: %d", got)
	}
	if _, body, _ = s.do("GET", "/billing", "acme", nil); !strings.Contains(body, "Renews on") || !strings.Contains(body, "Manage subscription") || strings.Contains(body, "Subscribe:") {
		t.Errorf("the page of a subscriber:\n%s", body)
	}
	if status, _, header := s.do("POST", "/billing/portal", "acme", nil); status != http.StatusSeeOther || !strings.HasPrefix(header.Get("Location"), fake.URL+"/portal/cus_") {
		t.Errorf("Manage subscription: %d to %q, want 303 to the portal", status, header.Get("Location"))
	}
	if status, _, header := s.do("POST", "/billing/checkout", "acme", url.Values{"price": {"price_unlimited"}}); status != http.StatusSeeOther || !strings.HasPrefix(header.Get("Location"), fake.URL+"/portal/cus_") {
		t.Errorf("Subscribe again (a form sent twice): %d to %q, want 303 to the portal", status, header.Get("Location"))
	}
	sub := fake.Subscription(id)
	fake.Deliver(seller.Webhook(), fake.UpdateSubscription(sub, "customer.subscription.updated", "active", true))
	if _, body, _ = s.do("GET", "/billing", "acme", nil); !strings.Contains(body, "Ends on") {
		t.Errorf("the page of a subscription cancelled at its period's end:\n%s", body)
	}
	fake.Deliver(seller.Webhook(), fake.UpdateSubscription(sub, "invoice.payment_failed", "past_due", true))
	if _, body, _ = s.do("GET", "/billing", "acme", nil); !strings.Contains(body, `class="banner" role="alert"`) {
		t.Errorf("the page while a renewal fails:\n%s", body)
	}
	if status, _, _ := s.do("POST", "/billing/portal", "globex", nil); status != http.StatusNotFound {
		t.Errorf("the portal of an account that bought nothing: %d, want 404", status)
	}
}

// TestBillingListsOnlyPurchases: share bonus is listed under its own
// heading, never as a purchase, and makes no customer: the page offers
// receipts only to an account the seller has a customer for.
func TestBillingListsOnlyPurchases(t *testing.T) {
	fake := stripetest.New(t, webhookSecret)
	s, seller := sellingSite(t, fake.URL, nil)
	bonus := upscale.Grant{ID: "share:newcomer", AccountID: "acme", Pool: upscale.PoolShareBonus, Units: 20,
		Label: "a new account opened with your share link", Event: "share-link", At: start}
	if _, err := s.ledger.Grant(context.Background(), bonus); err != nil {
		t.Fatal(err)
	}
	status, body, _ := s.do("GET", "/billing", "acme", nil)
	if status != http.StatusOK || strings.Contains(body, "Purchases") || strings.Contains(body, "Receipts and payment details") {
		t.Errorf("the page of an account with share bonus only lists purchases or offers receipts: %d\n%s", status, body)
	}
	if !strings.Contains(body, "Share-link bonus") || !strings.Contains(body, "<td>a new account opened with your share link</td><td>20</td>") {
		t.Errorf("the page does not show the share bonus under its own heading:\n%s", body)
	}

	id := s.buy(fake.URL, "acme", "price_1000")
	if got := fake.Deliver(seller.Webhook(), fake.Pay(id, 1900)); got != http.StatusOK {
		t.Fatalf("the payment's event: %d", got)
	}
	_, body, _ = s.do("GET", "/billing", "acme", nil)
	purchases, _, _ := strings.Cut(body[strings.Index(body, "Purchases"):], "</table>")
	if !strings.Contains(purchases, "<td>1,000 images</td><td>1000</td><td>none</td>") || strings.Contains(purchases, "share link") {
		t.Errorf("the purchases are not the pack alone:\n%s", purchases)
	}
	if !strings.Contains(body, "Receipts and payment details") {
		t.Errorf("a buyer is not offered its receipts:\n%s", body)
	}
	if status, _, header := s.do("POST", "/billing/portal", "acme", nil); status != http.StatusSeeOther || !strings.HasPrefix(header.Get("Location"), fake.URL+"/portal/cus_") {
		t.Errorf("Receipts and payment details: %d to %q, want 303 to the portal", status, header.Get("Location"))
	}
}

// TestCheckoutNotFound: the success page of a checkout the account did
// not make answers 404 in words about checkouts.
func TestCheckoutNotFound(t *testing.T) {
	fake := stripetest.New(t, webhookSecret)
	s, _ := sellingSite(t, fake.URL, nil)
	acmes := s.buy(fake.URL, "acme", "price_1000")
	for name, session := range map[string]string{"unknown": "cs_test_unknown", "none": "", "foreign": acmes} {
		status, body, _ := s.do("GET", "/billing/done?session="+url.QueryEscape(session), "globex", nil)
		if status != http.StatusNotFound || !strings.Contains(body, "This account made no such checkout; its receipt, if any, is on the Billing page.") || strings.Contains(body, "no such key") {
			t.Errorf("%s: %d\n%s", name, status, body)
		}
	}
}

// TestBillingStripeNotAnswering: while Stripe does not answer, Buy,
// Manage subscription and the page a checkout returns to each answer 503
// with a Retry-After and what became of the payment, within the
// seller's PageTimeout; Buy again once Stripe answers makes no second
// customer.
func TestBillingStripeNotAnswering(t *testing.T) {
	const bound = time.Second // the default is 10 s
	fake := stripetest.New(t, webhookSecret)
	outage := stripetest.NewOutage(t, fake.URL)
	s, _ := sellingSite(t, outage.URL, func(o *stripebilling.Options) { o.PageTimeout = bound })
	unavailable := func(what, method, path string, form url.Values, sentence string) {
		t.Helper()
		began := time.Now()
		status, body, header := s.do(method, path, "acme", form)
		if took := time.Since(began); status != http.StatusServiceUnavailable || header.Get("Retry-After") == "" || !strings.Contains(body, sentence) || took > bound+time.Second {
			t.Errorf("%s while Stripe does not answer: %d, Retry-After %q, after %v: %s; want 503 with a Retry-After within %v, saying %q",
				what, status, header.Get("Retry-After"), took, body, bound, sentence)
		}
	}
	buy := url.Values{"price": {"price_1000"}}

	outage.SetDown(true)
	unavailable("Buy", "POST", "/billing/checkout", buy, "The payment service is not answering just now; nothing was charged. Try again in a minute.")
	outage.SetDown(false)
	id := s.buy(fake.URL, "acme", "price_1000")
	if got := fake.Customers(); got != 1 {
		t.Errorf("Buy again after Stripe did not answer left %d customers, want 1", got)
	}
	fake.Pay(id, 1900)

	outage.SetDown(true)
	unavailable("Receipts and payment details", "POST", "/billing/portal", nil, "The payment service is not answering just now. Try again in a minute.")
	unavailable("back from the checkout", "GET", "/billing/done?session="+id, nil, "a payment made is added as soon as the payment service reports it")
	outage.SetDown(false)
	if status, body, _ := s.do("GET", "/billing/done?session="+id, "acme", nil); status != http.StatusOK || !strings.Contains(body, "1,000 credits added") {
		t.Errorf("back from the checkout once Stripe answers: %d\n%s", status, body)
	}
}
