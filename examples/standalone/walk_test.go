package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/billing/stripebilling/stripetest"
	"github.com/upscalekit/upscale/client"
	"github.com/upscalekit/upscale/internal/browsertest"
	"github.com/upscalekit/upscale/internal/testservers"
)

// TestStrangerBuysInABrowser walks a stranger through the product in
// chromium, as the operator "Pixelgrow" sells it: the storefront at /
// with its prices, sign-up by mail (Mailpit), a key, Try it, the history
// showing that image, running low and the banner that leads to Billing,
// the prices there, paying for a pack (the fake Stripe's Checkout) and
// the credits arriving. No page names "upscale" but the API's path, and
// every page passes axe-core and fits a phone.
func TestStrangerBuysInABrowser(t *testing.T) {
	bin := buildStandalone(t)
	data := t.TempDir()
	config := filepath.Join(data, "config.json")
	branded := strings.Replace(billingConfig, `"billing": {`, `"brand": {"name": "Pixelgrow", "support": "help@pixelgrow.example"},
  "billing": {`, 1)
	if err := os.WriteFile(config, []byte(branded), 0o600); err != nil {
		t.Fatal(err)
	}
	fake := stripetest.New(t, stripeSecret)
	fake.SetPrice(stripetest.Price{ID: "price_1000", Active: true, Amount: 1000, Currency: "usd"})
	fake.SetPrice(stripetest.Price{ID: "price_unlimited", Recurring: true, Active: true, Amount: 2900, Currency: "usd"})
	t.Setenv(stripeKeyEnv, "sk_test_standalone")
	t.Setenv(stripeHookEnv, stripeSecret)
	mail := testservers.Mailpit(t)
	b := browsertest.New(t)
	srv := startStandalone(t, bin, "-data", data, "-config", config, "-stripe-api-base", fake.URL,
		"-smtp-url", "smtp://"+mail.SMTP, "-mail-from", "Pixelgrow <no-reply@pixelgrow.test>")
	defer srv.stop(t)
	fake.SendEventsTo(srv.base + webhookPath)
	origin := newButterflyOrigin(t)
	address := "stranger-" + strings.ToLower(upscale.NewKey(""))[:8] + "@example.com"
	// named checks that the page names the operator's product, and not
	// this package, but in the API's path.
	named := func(page string) {
		t.Helper()
		text := b.Text("body")
		if !strings.Contains(text, "Pixelgrow") || strings.Contains(strings.ReplaceAll(strings.ToLower(text), "/api/v1/upscale", ""), "upscale") {
			t.Errorf("the %s page does not name Pixelgrow alone:\n%s", page, text)
		}
	}

	b.Do(chromedp.Navigate(srv.base+"/"), chromedp.WaitVisible("#start"))
	if text := b.Text("main"); !strings.Contains(text, "$10.00") || !strings.Contains(text, "$0.01 an image") || !strings.Contains(text, "$29.00 a month") ||
		!strings.Contains(text, "10 free images a month") {
		t.Errorf("the storefront does not say what it sells and what is free:\n%s", text)
	}
	named("storefront")
	b.Check("storefront")
	b.Do(chromedp.SendKeys("#email", address), chromedp.Click("#start button"), chromedp.WaitVisible("#sent"))
	b.Do(chromedp.Navigate(awaitLink(t, mail, address, 1, "Open your Pixelgrow account")), chromedp.WaitVisible("form.signin button"),
		chromedp.Click("form.signin button"), chromedp.WaitVisible(".pools"))
	if pools, header := b.Text(".pools"), b.Text("header"); !strings.Contains(pools, "10 of 10") || !strings.Contains(header, address) {
		t.Errorf("the new account's overview: pools %q, header %q; want 10 of 10, signed in as %s", pools, header, address)
	}
	named("overview")
	b.Check("overview")

	b.Do(chromedp.Click(`nav a[href="./keys"]`), chromedp.WaitVisible("form.new-key"),
		chromedp.SendKeys("#name", "laptop"), chromedp.Click("form.new-key button"), chromedp.WaitVisible("#new-key"))
	api := &client.Client{BaseURL: srv.base, Key: b.Text("#new-key"), MaxAttempts: 1}
	b.Do(chromedp.Click(`nav a[href="./try"]`), chromedp.WaitVisible("form.try"), chromedp.Click("form.try button"), chromedp.WaitVisible("#result-image"))
	named("Try it")
	b.Do(chromedp.Click(`nav a[href="./history"]`), chromedp.WaitVisible("table.history"))
	if history := b.Text("table.history tbody"); !strings.Contains(history, "Try it") || !strings.Contains(history, "free_pool") || !strings.Contains(history, "open") {
		t.Errorf("the history after Try it: %q", history)
	}
	b.Check("history")

	// Running low: seven more images through the key leave two.
	for range 7 {
		if _, err := api.Upscale(context.Background(), client.Request{ImageURL: origin + "/a.png", Scale: 2}); err != nil {
			t.Fatal(err)
		}
	}
	b.Do(chromedp.Navigate(srv.base+"/dashboard/"), chromedp.WaitVisible("#running-out"))
	if banner := b.Text("#running-out"); !strings.Contains(banner, "Only 2 images left") {
		t.Errorf("the banner when running low: %q", banner)
	}
	b.Check("running-low")
	b.Do(chromedp.Click("#running-out a"), chromedp.WaitVisible("#packs"))
	if packs := b.Text("#packs + p + ul"); !strings.Contains(packs, "Buy 1,000 images for $10.00") {
		t.Errorf("the packs on the Billing page: %q", packs)
	}
	named("Billing")
	b.Check("billing-prices")
	b.Do(chromedp.Click("#packs + p + ul button"), chromedp.WaitVisible("#go"), chromedp.Click("#go"), chromedp.WaitVisible(".made"))
	if done := b.Text(".made"); !strings.Contains(done, "1,000 credits added") {
		t.Errorf("back from paying: %q", done)
	}
	b.Do(chromedp.Navigate(srv.base+"/dashboard/"), chromedp.WaitVisible(".pools"))
	if pools := b.Text(".pools"); !strings.Contains(pools, "1000") {
		t.Errorf("the overview after paying: %q; want the 1,000 credits", pools)
	}
	if got, err := api.Upscale(context.Background(), client.Request{ImageURL: origin + "/a.png", Scale: 8}); err != nil || got.Via != "credit" {
		t.Errorf("scale 8 after buying: %+v, %v; want it paid by a credit", got, err)
	}
}
