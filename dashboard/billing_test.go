package dashboard_test

import (
	"net/http"
	"net/url"
	"path"
	"strings"
	"testing"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/billing/stripebilling"
	"github.com/upscalekit/upscale/billing/stripebilling/stripetest"
	"github.com/upscalekit/upscale/dashboard"
	"github.com/upscalekit/upscale/upscaletest"
)

// TestBilling: the Billing page sells packs and the plan through Stripe's
// pages (the fake's here): each button is a POST answered 303 to the
// checkout; coming back, the page shows the credits added before any
// webhook; the plan shows when it renews, when it ends once cancelled,
// and a banner while a renewal payment fails; purchases are listed with
// what was refunded.
func TestBilling(t *testing.T) {
	const secret = "whsec_dashboard_test"
	fake := stripetest.New(t, secret)
	var seller *stripebilling.Billing
	s := newSite(t, upscaletest.NewClock(start), func(c *dashboard.Config) {
		var err error
		seller, err = stripebilling.New(stripebilling.Options{
			SecretKey: "sk_test_dashboard", WebhookSecret: secret, APIBase: fake.URL,
			Ledger: c.Ledger.(upscale.BillingLedger), Checkouts: upscale.NewMemoryCheckoutStore(),
			Offers: []upscale.Offer{
				{Price: "price_1000", Units: 1000, Label: "1,000 images"},
				{Price: "price_unlimited", Plan: upscale.Plan{Name: "unlimited", Paid: true, Unlimited: true}, Label: "Unlimited, 29 € a month"},
			},
			FreePlan:   upscale.Plan{Name: "free", MonthlyImages: 10},
			SuccessURL: "https://app.test/dashboard/billing/done?session={CHECKOUT_SESSION_ID}",
			CancelURL:  "https://app.test/dashboard/billing", ReturnURL: "https://app.test/dashboard/billing",
			Logger: c.Logger,
		})
		if err != nil {
			t.Fatal(err)
		}
		c.Seller = seller
	})
	status, body, header := s.do("GET", "/billing", "acme", nil)
	if csp := header.Get("Content-Security-Policy"); !strings.Contains(csp, "form-action 'self' "+fake.URL+";") {
		t.Errorf("the Billing page's policy %q does not let its forms lead to the checkout", csp)
	}
	if status != http.StatusOK || !strings.Contains(body, "Buy 1,000 images") || !strings.Contains(body, "Subscribe: Unlimited, 29 € a month") || strings.Contains(body, "Purchases") {
		t.Fatalf("the Billing page: %d\n%s", status, body)
	}
	buy := func(price string) string {
		t.Helper()
		status, _, header := s.do("POST", "/billing/checkout", "acme", url.Values{"price": {price}})
		if status != http.StatusSeeOther || !strings.HasPrefix(header.Get("Location"), fake.URL+"/checkout/cs_") {
			t.Fatalf("Buy %s: %d to %q, want 303 to the checkout", price, status, header.Get("Location"))
		}
		return path.Base(header.Get("Location"))
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
	if _, body, _ = s.do("GET", "/billing", "acme", nil); !strings.Contains(body, "<td>1,000 images</td><td>1000</td><td>100 refunded</td>") {
		t.Errorf("the purchases after a 10%% refund:\n%s", body)
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
