package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stripe/stripe-go/v84"

	"github.com/upscalekit/upscale/billing/stripebilling/stripetest"
	"github.com/upscalekit/upscale/client"
	"github.com/upscalekit/upscale/internal/browsertest"
)

// billingConfig is a config file that sells a pack of 1,000 images and
// the unlimited plan to acme, on the free plan, whose key is billingKey.
const (
	billingKey    = "upk_test_acme_billing_0001"
	billingConfig = `{
  "freeTierMaxFileBytes": 5242880,
  "plans": {
    "free":      {"monthlyImages": 10, "maxFileBytes": 26214400},
    "unlimited": {"paid": true, "unlimited": true, "maxFileBytes": 52428800}
  },
  "accounts": [{"id": "acme", "plan": "free"}],
  "keys": [{"key": "` + billingKey + `", "account": "acme"}],
  "billing": {
    "packs": [{"price": "price_1000", "units": 1000, "label": "1,000 images"}],
    "plans": [{"price": "price_unlimited", "plan": "unlimited", "label": "Unlimited"}]
  }
}`
	stripeSecret = "whsec_standalone_test"
)

// writeBillingConfig writes billingConfig into dir, and returns its path
// and the config it loads as.
func writeBillingConfig(t *testing.T, dir string) (string, fileConfig) {
	t.Helper()
	file := filepath.Join(dir, "config.json")
	if err := os.WriteFile(file, []byte(billingConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := loadConfig(file)
	if err != nil {
		t.Fatal(err)
	}
	return file, c
}

// TestBillingInABrowser sells as a buyer meets it, in chromium, against
// the fake Stripe (its Checkout and portal pages, its signed events sent
// to the server's webhook): a scale-8 request is refused with where to
// pay; sign in, Billing, Buy, Pay, and the page shows the credits; scale 8
// then answers 200 via credit; Subscribe, Pay, and requests go via
// unlimited; cancelling in the portal shows "Ends on". Every page of the
// dashboard passes axe-core and fits a phone.
func TestBillingInABrowser(t *testing.T) {
	bin := buildStandalone(t)
	data := t.TempDir()
	config, _ := writeBillingConfig(t, data)
	fake := stripetest.New(t, stripeSecret)
	t.Setenv(stripeKeyEnv, "sk_test_standalone")
	t.Setenv(stripeHookEnv, stripeSecret)
	srv := startStandalone(t, bin, "-data", data, "-config", config, "-stripe-api-base", fake.URL, "-metrics-addr", "127.0.0.1:0")
	defer srv.stop(t)
	if !slices.ContainsFunc(srv.banner, func(line string) bool {
		return strings.HasPrefix(line, "selling through Stripe: register the webhook endpoint "+srv.base+webhookPath)
	}) {
		t.Errorf("the banner does not say where to register the webhook:\n%s", strings.Join(srv.banner, "\n"))
	}
	fake.SendEventsTo(srv.base + webhookPath)
	origin := newButterflyOrigin(t)
	api := &client.Client{BaseURL: srv.base, Key: billingKey, MaxAttempts: 1}
	upscale := func(scale int) (*client.Response, error) {
		return api.Upscale(context.Background(), client.Request{ImageURL: origin + "/a.png", Scale: scale})
	}
	_, err := upscale(8)
	if p, ok := errors.AsType[*client.Error](err); !ok || p.Code != "paid_plan_required" || p.BuyURL != srv.base+billingPath {
		t.Fatalf("scale 8 before buying: %v; want 403 paid_plan_required with the Billing page as buyUrl", err)
	}

	out, err := exec.Command(bin, "dashboard", "link", "-account", "acme", "-public-url", srv.base, "-data", data).Output()
	if err != nil {
		t.Fatal(err)
	}
	b := browsertest.New(t)
	b.Do(chromedp.Navigate(strings.TrimSpace(string(out))), chromedp.WaitVisible("form.signin button"), chromedp.Click("form.signin button"), chromedp.WaitVisible(".pools"))
	b.Do(chromedp.Click(`nav a[href="./billing"]`), chromedp.WaitVisible("#packs"))
	b.Check("billing")
	b.Do(chromedp.Click("#packs + p + ul button"), chromedp.WaitVisible("#go"), chromedp.Click("#go"), chromedp.WaitVisible(".made"))
	if done := b.Text(".made"); !strings.Contains(done, "1,000 credits added: 1,000 images.") {
		t.Errorf("back from paying for the pack: %q", done)
	}
	b.Check("billing-paid")
	if res, err := upscale(8); err != nil || res.Via != "credit" {
		t.Errorf("scale 8 after buying credits: %v, %v; want 200 via credit", res, err)
	}

	b.Do(chromedp.Navigate(srv.base+billingPath), chromedp.WaitVisible("#plans"), chromedp.Click("#plans ~ ul button"), chromedp.WaitVisible("#go"), chromedp.Click("#go"), chromedp.WaitVisible(".made"))
	if done := b.Text(".made"); !strings.Contains(done, "You are on the unlimited plan.") {
		t.Errorf("back from subscribing: %q", done)
	}
	if res, err := upscale(2); err != nil || res.Via != "unlimited" {
		t.Errorf("a request on the subscription: %v, %v; want 200 via unlimited", res, err)
	}
	b.Do(chromedp.Navigate(srv.base+billingPath), chromedp.WaitVisible("#plans"))
	b.Check("billing-subscribed")
	b.Do(chromedp.Click("#plans + form button"), chromedp.WaitVisible("#go"), chromedp.Click("#go"), chromedp.WaitVisible("#plans"))
	if plan := b.Text("#balance + p"); !strings.Contains(plan, "Ends on") {
		t.Errorf("back from cancelling in the portal: %q; want Ends on", plan)
	}
	b.Check("billing-cancelled")
	if status := statusOf(t, srv.base+webhookPath); status != http.StatusMethodNotAllowed {
		t.Errorf("GET of the webhook: %d, want 405", status)
	}
	forged, err := http.Post(srv.base+webhookPath, "application/json", strings.NewReader(`{"id":"evt_forged","object":"event"}`))
	if err != nil {
		t.Fatal(err)
	}
	forged.Body.Close()
	if forged.StatusCode != http.StatusBadRequest {
		t.Errorf("an event without a signature: %d, want 400", forged.StatusCode)
	}
	// One subscription, paid once: nothing doubled.
	checkMetrics(t, srv.metrics, "upscale_billing_refused_events_total 1\n", "upscale_billing_double_subscriptions_total 0\n")
}

// TestBillingSetUp: without STRIPE_SECRET_KEY nothing is sold and nothing
// changes; the key without the webhook secret, -stripe-api-base without
// the key, or the key with nothing on offer are refused; -stripe-api-base
// must be plain http on loopback, so that the secret key goes nowhere
// else; `standalone billing check` prints what keeps Stripe from selling,
// and "ok" once nothing does.
func TestBillingSetUp(t *testing.T) {
	dir := t.TempDir()
	configFile, c := writeBillingConfig(t, dir)
	noOffers := c
	noOffers.Billing = fileBilling{}
	const key = "sk_test_0123456789"
	for _, tc := range []struct {
		name, key, hook, apiBase string
		config                   fileConfig
		refusal                  string // "" when it is accepted
	}{
		{"NoKey", "", "", "", c, ""},
		{"NoWebhookSecret", key, "", "", c, stripeHookEnv + " is not"},
		{"APIBaseWithoutKey", "", "", "http://127.0.0.1:12111", c, "-stripe-api-base needs " + stripeKeyEnv},
		{"NothingOnOffer", key, stripeSecret, "", noOffers, "offers nothing"},
		{"Selling", key, stripeSecret, "", c, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(stripeKeyEnv, tc.key)
			t.Setenv(stripeHookEnv, tc.hook)
			b, err := newBilling(tc.config, nil, "https://upscale.example", tc.apiBase, slog.New(slog.DiscardHandler))
			switch {
			case tc.refusal != "" && (err == nil || !strings.Contains(err.Error(), tc.refusal)):
				t.Errorf("err = %v, want a refusal saying %q", err, tc.refusal)
			case tc.refusal == "" && err != nil:
				t.Errorf("err = %v", err)
			case tc.refusal == "" && (b != nil) != (tc.key != ""):
				t.Errorf("seller %v with key %q: want one exactly when the key is set", b, tc.key)
			}
		})
	}
	for base, allowed := range map[string]bool{
		"":                          true,
		"http://127.0.0.1:12111":    true,
		"http://localhost:12111":    true,
		"http://[::1]:12111/":       true,
		"https://127.0.0.1:12112":   false,
		"http://10.0.0.5:12111":     false,
		"http://stripe.evil.test":   false,
		"http://127.0.0.1:12111/v1": false,
	} {
		if err := checkAPIBase(base); (err == nil) != allowed {
			t.Errorf("checkAPIBase(%q) = %v; allowed %v", base, err, allowed)
		}
	}

	fake := stripetest.New(t, stripeSecret)
	t.Setenv(stripeKeyEnv, key)
	t.Setenv(stripeHookEnv, stripeSecret)
	check := func() (string, error) {
		var out strings.Builder
		err := runSubcommand(context.Background(), []string{"billing", "check", "-data", dir, "-config", configFile,
			"-public-url", "https://upscale.example", "-stripe-api-base", fake.URL}, &out, io.Discard)
		return out.String(), err
	}
	out, err := check()
	if err == nil || !strings.Contains(out, "problem: ") || !strings.Contains(out, "price_1000") || !strings.Contains(out, "https://upscale.example"+webhookPath) {
		t.Errorf("billing check with nothing set up at Stripe: %q, %v; want the problems named", out, err)
	}
	fake.SetPrice(stripetest.Price{ID: "price_1000", Active: true, Amount: 1000, Currency: "usd"})
	fake.SetPrice(stripetest.Price{ID: "price_unlimited", Recurring: true, Active: true, Amount: 2900, Currency: "usd"})
	fake.Endpoint("https://upscale.example"+webhookPath, stripe.APIVersion, "*")
	if out, err := check(); err != nil || !strings.HasPrefix(out, "ok: 2 offers") || !strings.Contains(out, "price_1000 (1,000 images): $10.00\n") || !strings.Contains(out, "$29.00 a month\n") {
		t.Errorf("billing check set up right: %q, %v; want ok, and what each offer costs", out, err)
	}
}

// TestBillingDoubles: `standalone billing doubles` lists the accounts
// with more than one live subscription at Stripe (two plan checkouts paid
// in the same moment), with both subscriptions, and none once one is
// cancelled.
func TestBillingDoubles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	configFile, c := writeBillingConfig(t, dir)
	fake := stripetest.New(t, stripeSecret)
	t.Setenv(stripeKeyEnv, "sk_test_0123456789")
	t.Setenv(stripeHookEnv, stripeSecret)
	store, err := storage{dataDir: dir}.open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.seed(ctx, store); err != nil {
		t.Fatal(err)
	}
	seller, err := newBilling(c, store, "https://upscale.example", fake.URL, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	var subs []string
	for range 2 { // the second made once the first was paid, before its event came
		url, err := seller.Checkout(ctx, "acme", "price_unlimited")
		if err != nil {
			t.Fatal(err)
		}
		id := filepath.Base(url)
		fake.Pay(id, 2900)
		subs = append(subs, fake.Subscription(id))
	}
	store.Close()
	doubles := func() string {
		t.Helper()
		var out strings.Builder
		if err := runSubcommand(ctx, []string{"billing", "doubles", "-data", dir, "-config", configFile, "-stripe-api-base", fake.URL}, &out, io.Discard); err != nil {
			t.Fatalf("billing doubles: %v", err)
		}
		return out.String()
	}
	if out := doubles(); !strings.Contains(out, "acme ") || !strings.Contains(out, subs[0]) || !strings.Contains(out, subs[1]) || !strings.HasSuffix(out, ": 1\n") {
		t.Errorf("billing doubles with two live subscriptions:\n%s\nwant acme with %v", out, subs)
	}
	fake.UpdateSubscription(subs[0], "customer.subscription.deleted", "canceled", false)
	if out := doubles(); strings.Contains(out, "acme") || !strings.HasSuffix(out, ": 0\n") {
		t.Errorf("billing doubles once one was cancelled:\n%s\nwant none", out)
	}
}

// TestBillingOffersRefused: each thing wrong with an offer in the config
// file is named as what it is: a plan offer without a label is not told
// that its plan is unknown.
func TestBillingOffersRefused(t *testing.T) {
	plans := map[string]filePlan{"free": {}, "unlimited": {}}
	for _, tc := range []struct {
		name    string
		billing fileBilling
		refusal string
	}{
		{"PlanWithoutLabel", fileBilling{Plans: []fileSub{{Price: "price_u", Plan: "unlimited"}}}, "billing.plans[0]: a plan offer needs a price and a label, which the Billing page shows"},
		{"PlanWithoutPrice", fileBilling{Plans: []fileSub{{Plan: "unlimited", Label: "Unlimited"}}}, "billing.plans[0]: a plan offer needs a price and a label, which the Billing page shows"},
		{"UnknownPlan", fileBilling{Plans: []fileSub{{Price: "price_u", Plan: "gold", Label: "Gold"}}}, `billing.plans[0]: plan "gold" is not one of the file's plans (free, unlimited)`},
		{"PackWithoutLabel", fileBilling{Packs: []filePack{{Price: "price_1000", Units: 1000}}}, "billing.packs[0]: a pack needs a price, a positive number of units and a label"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.billing.validate(plans); err == nil || err.Error() != tc.refusal {
				t.Errorf("got %v, want %q", err, tc.refusal)
			}
		})
	}
	ok := fileBilling{Plans: []fileSub{{Price: "price_u", Plan: "unlimited", Label: "Unlimited"}}}
	if err := ok.validate(plans); err != nil {
		t.Errorf("a whole plan offer: %v", err)
	}
}
