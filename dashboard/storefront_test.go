package dashboard_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/billing/stripebilling/stripetest"
	"github.com/upscalekit/upscale/dashboard"
)

// get fetches u and returns the status, the body and the header.
func get(t *testing.T, u string) (int, string, http.Header) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp.Header
}

// TestStorefront: the site's root shows the product, the sample before
// and after, every offer with its price, the way into the dashboard and
// the API as one curl command, under the dashboard's headers, with the
// sample's origins allowed to load.
func TestStorefront(t *testing.T) {
	fake := stripetest.New(t, webhookSecret)
	s, seller := sellingSite(t, fake.URL, nil)
	fake.SetPrice(stripetest.Price{ID: "price_1000", Active: true, Amount: 1000, Currency: "usd"})
	fake.SetPrice(stripetest.Price{ID: "price_unlimited", Recurring: true, Active: true, Amount: 2900, Currency: "eur"})
	if err := seller.ReadPrices(context.Background()); err != nil {
		t.Fatal(err)
	}
	status, page, header := get(t, s.server.URL+"/")
	for _, want := range []string{
		`<h1 id="product">upscale</h1>`, "sharper than resizing.",
		`<img class="before" id="before" src="` + s.origin + `/square.png"`, `<img src="http://results.test/outputs/square.png"`, "Right: the square, ×2.",
		"<strong>1,000 images</strong>: <span class=\"amount\">$10.00</span>", "$0.01 an image.", "€29.00 a month",
		`<a href="/dashboard/" class="button">Sign in to your account</a>`, `<a href="/dashboard/reference">API reference</a>`,
		"curl -sS -X POST https://api.test/api/v1/upscale", `{&#34;imageUrl&#34;:&#34;` + s.origin + `/square.png&#34;,&#34;scale&#34;:2`,
		`href="/dashboard/static/dashboard.css"`,
	} {
		if status != http.StatusOK || !strings.Contains(page, want) {
			t.Fatalf("the storefront: %d, lacks %q\n%s", status, want, page)
		}
	}
	if strings.Contains(page, "signin/email") || strings.Contains(page, "Free:") {
		t.Errorf("a storefront whose dashboard opens no account by email offers to:\n%s", page)
	}
	if csp := header.Get("Content-Security-Policy"); !strings.Contains(csp, "img-src 'self' data: "+s.origin+" http://results.test;") || header.Get("Cache-Control") != "no-store" {
		t.Errorf("the storefront's headers: %v", header)
	}
}

// TestStorefrontSignsUp: with sign-ups open, the storefront says what a
// new account and a share link get, and its form opens an account by
// mail; with them closed, it signs in and promises nothing free.
func TestStorefrontSignsUp(t *testing.T) {
	s := newEmailSite(t, true, siteOptions{shareBonus: true})
	root := strings.TrimSuffix(s.base, "dashboard/")
	_, page := s.do(http.MethodGet, root, "browser", nil)
	for _, want := range []string{`<form method="post" action="/dashboard/signin/email"`, "Create my account</button>", "with 10 free images a month, no card needed",
		"<strong>Free:</strong> 10 images every month", "uses it earns you 5 more"} {
		if !strings.Contains(page, want) {
			t.Fatalf("the storefront lacks %q\n%s", want, page)
		}
	}
	resp, answer := s.do(http.MethodPost, s.base+"signin/email", "browser", url.Values{"email": {"ada@example.com"}})
	if resp.StatusCode != http.StatusOK || !strings.Contains(answer, "a link is on its way") {
		t.Fatalf("the storefront's form: %d\n%s", resp.StatusCode, answer)
	}
	if m := s.mail.await(t, "ada@example.com", 1); m.Subject != "Open your upscale account" {
		t.Errorf("the storefront's form mailed %q", m.Subject)
	}

	closed := newEmailSite(t, false)
	_, page = closed.do(http.MethodGet, strings.TrimSuffix(closed.base, "dashboard/"), "browser", nil)
	if !strings.Contains(page, "Email me a sign-in link</button>") || strings.Contains(page, "free images") || strings.Contains(page, "Free:") {
		t.Errorf("the storefront with sign-ups closed:\n%s", page)
	}
}

// TestStorefrontOptions: a storefront that could not find the dashboard
// is refused.
func TestStorefrontOptions(t *testing.T) {
	d, err := dashboard.New(dashboard.Config{Account: func(*http.Request) string { return "" }, Keys: upscale.NewMemoryKeyStore(), Ledger: upscale.NewMemoryLedger(upscale.LedgerOptions{})})
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"", "dashboard/", "/dashboard", "https://example.com/dashboard/"} {
		if _, err := d.Storefront(dashboard.StorefrontOptions{Dashboard: path}); err == nil {
			t.Errorf("Storefront with the dashboard at %q: no error", path)
		}
	}
}
