package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/client"
	"github.com/upscalekit/upscale/internal/browsertest"
	"github.com/upscalekit/upscale/internal/testservers"
)

// TestDashboardInABrowser uses the standalone's dashboard in chromium as
// its account holder would: sign in with the banner's link, read the
// balance, make a key and use it, revoke it; a used link and a POST from
// another site are refused. Every page passes axe-core, fits a phone, and
// is kept as a screenshot (artifacts/).
func TestDashboardInABrowser(t *testing.T) {
	bin := buildStandalone(t)
	b := browsertest.New(t)
	srv := startStandalone(t, bin, "-data", t.TempDir())
	defer srv.stop(t)
	origin := newButterflyOrigin(t)

	b.Do(chromedp.Navigate(srv.base+"/"), chromedp.WaitVisible("#compare img"))
	b.Check("storefront")
	b.Do(chromedp.Navigate(srv.dashboard), chromedp.WaitVisible("form.signin button"))
	b.Check("signin")
	b.Do(chromedp.Click("form.signin button"), chromedp.WaitVisible(".pools"))
	if pools := b.Text(".pools"); !strings.Contains(pools, "10 of 10") {
		t.Errorf("the overview's balances: %q; want the demo account's 10 free images", pools)
	}
	b.Check("overview")

	b.Do(chromedp.Click(`nav a[href="./keys"]`), chromedp.WaitVisible("form.new-key"))
	b.Check("keys")
	b.Do(chromedp.SendKeys("#name", "from the browser"), chromedp.Click("form.new-key button"), chromedp.WaitVisible("#new-key"))
	key := b.Text("#new-key")
	b.Check("key-made")
	if upscaleVia(t, srv.base, key, origin+"/a.png", &srv.stderr) == "" {
		t.Fatal("the key made in the browser does not upscale")
	}
	b.Do(chromedp.Click("a.danger"), chromedp.WaitVisible("form.confirm"))
	b.Check("revoke")
	b.Do(chromedp.Click("form.confirm button"), chromedp.WaitVisible("tr.revoked"))
	b.Do(chromedp.Navigate(srv.base+"/dashboard/keys/0123456789abcdef/revoke"), chromedp.WaitVisible("main p"))
	b.Check("notfound")
	api := &client.Client{BaseURL: srv.base, Key: key, MaxAttempts: 1}
	if _, err := api.Upscale(context.Background(), client.Request{ImageURL: origin + "/a.png"}); !isProblem(err, http.StatusUnauthorized, "unauthorized") {
		t.Errorf("the key revoked in the browser: %v; want 401", err)
	}
	b.Do(chromedp.Navigate(srv.base+"/dashboard/"), chromedp.WaitVisible(".chart"))
	if used := b.Text("#usage"); !strings.Contains(used, "This month: 1 image") {
		t.Errorf("the overview after one image: %q", used)
	}

	// Try it on the photo sample, ×2: the result loads at 512 pixels and
	// the free pool has one image less.
	b.Do(chromedp.Click(`nav a[href="./try"]`), chromedp.WaitVisible("form.try"))
	b.Check("try")
	b.Do(chromedp.Click("form.try button"), chromedp.WaitVisible("#result-image"))
	width, err := chromedp.Run(b.Ctx, chromedp.Evaluate[int](`new Promise(done => {
		const img = document.getElementById("result-image");
		if (img.complete) { done(img.naturalWidth); } else { img.onload = () => done(img.naturalWidth); img.onerror = () => done(-1); }
	})`, chromedp.EvalAwaitPromise))
	if err != nil || width != 512 {
		t.Errorf("the Try it result: %d pixels wide (%v), want 512", width, err)
	}
	b.Check("try-result")
	b.Do(chromedp.Navigate(srv.base+"/dashboard/"), chromedp.WaitVisible(".pools"))
	if pools := b.Text(".pools"); !strings.Contains(pools, "8 of 10") {
		t.Errorf("the balance after Try it: %q; want 8 of 10 (one for the key's image, one for Try it)", pools)
	}
	b.Check("overview-used")

	b.Do(chromedp.Navigate(srv.base+"/dashboard/webhooks"), chromedp.WaitVisible("main form button"), chromedp.Click("main form button"), chromedp.WaitVisible("#new-secret"))
	if secret := b.Text("#new-secret"); !strings.HasPrefix(secret, "whsec_") {
		t.Errorf("the webhook secret shown: %q", secret)
	}
	b.Check("webhooks")
	b.Do(chromedp.Click(`nav a[href="./reference"]`), chromedp.WaitVisible("#post-api-v1-upscale"))
	b.Check("reference")

	// Another site's page posts a form to the dashboard in the signed-in
	// browser: refused, and no key is made.
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte(`<!doctype html><title>x</title><form method="post" action="` + srv.base + `/dashboard/keys"><input name="name" value="forged"></form><script>document.forms[0].submit()</script>`))
	}))
	defer evil.Close()
	b.Do(chromedp.Navigate(evil.URL), chromedp.WaitVisible("body"))
	b.Do(chromedp.Navigate(srv.base+"/dashboard/keys"), chromedp.WaitVisible("table.keys"))
	if keys := b.Text("table.keys"); strings.Contains(keys, "forged") {
		t.Error("a form posted from another site made a key")
	}

	// The banner's link, used already, signs in no more.
	b.Do(chromedp.Navigate(srv.dashboard), chromedp.WaitVisible("form.signin button"), chromedp.Click("form.signin button"), chromedp.WaitVisible(".problem"))
	b.Check("signin-used")

	// Signing out ends the session.
	b.Do(chromedp.Navigate(srv.base+"/dashboard/"), chromedp.WaitVisible("form.signout button"), chromedp.Click("form.signout button"), chromedp.WaitVisible("#signed-out"))
	b.Do(chromedp.Navigate(srv.base+"/dashboard/"), chromedp.WaitVisible("main p"))
	if text := b.Text("main"); strings.Contains(text, "Overview") {
		t.Error("the overview after signing out")
	}
}

// TestSignUpInABrowser: with a mail server (Mailpit), a person with a
// browser and an inbox opens an account on the dashboard, makes a key and
// upscales with it, paid by the free pool; signs out, asks for a link
// again and signs in; the used link and a forged one fail. Every page
// passes axe-core.
func TestSignUpInABrowser(t *testing.T) {
	bin := buildStandalone(t)
	mail := testservers.Mailpit(t)
	b := browsertest.New(t)
	srv := startStandalone(t, bin, "-data", t.TempDir(), "-smtp-url", "smtp://"+mail.SMTP, "-mail-from", "Upscale <no-reply@upscale.test>")
	defer srv.stop(t)
	origin := newButterflyOrigin(t)
	address := "browser-" + strings.ToLower(upscale.NewKey(""))[:8] + "@example.com"
	ask := func() {
		t.Helper()
		b.Do(chromedp.WaitVisible("form.email-link"), chromedp.SendKeys("#email", address), chromedp.Click("form.email-link button"), chromedp.WaitVisible("#sent"))
	}

	b.Do(chromedp.Navigate(srv.base + "/dashboard/signin"))
	b.Check("signin-email")
	ask()
	b.Check("link-sent")
	opening := awaitLink(t, mail, address, 1, "Open your upscale account")
	b.Do(chromedp.Navigate(opening), chromedp.WaitVisible("form.signin button"))
	b.Check("signup-link")
	b.Do(chromedp.Click("form.signin button"), chromedp.WaitVisible(".pools"))
	if pools := b.Text(".pools"); !strings.Contains(pools, "10 of 10") {
		t.Errorf("the new account's balances: %q; want the free plan's 10 images", pools)
	}
	if share := b.Text("#share-link"); !strings.HasPrefix(share, srv.base+"/dashboard/signup?ref=") {
		t.Errorf("the new account's share link: %q", share)
	}
	b.Check("overview-new-account")

	b.Do(chromedp.Click(`nav a[href="./keys"]`), chromedp.WaitVisible("form.new-key"),
		chromedp.SendKeys("#name", "first"), chromedp.Click("form.new-key button"), chromedp.WaitVisible("#new-key"))
	api := &client.Client{BaseURL: srv.base, Key: b.Text("#new-key"), MaxAttempts: 1}
	if resp, err := api.Upscale(context.Background(), client.Request{ImageURL: origin + "/a.png", Scale: 2}); err != nil || resp.Via != string(upscale.PoolFree) {
		t.Errorf("the new account's key: %+v, %v; want a result paid by free_pool", resp, err)
	}

	b.Do(chromedp.Navigate(srv.base+"/dashboard/"), chromedp.WaitVisible("form.signout button"), chromedp.Click("form.signout button"), chromedp.WaitVisible("#signed-out"))
	ask()
	b.Do(chromedp.Navigate(awaitLink(t, mail, address, 2, "Sign in to upscale")), chromedp.WaitVisible("form.signin button"),
		chromedp.Click("form.signin button"), chromedp.WaitVisible(".pools"))
	if pools := b.Text(".pools"); !strings.Contains(pools, "9 of 10") {
		t.Errorf("signed in again: balances %q; want the account's, one image used", pools)
	}

	// The used link, and a forged one, sign in no more.
	b.Do(chromedp.Navigate(opening), chromedp.WaitVisible("form.signin button"), chromedp.Click("form.signin button"), chromedp.WaitVisible(".problem"))
	b.Check("signup-link-used")
	forged := opening[:len(opening)-4] + "AAAA"
	b.Do(chromedp.Navigate(forged), chromedp.WaitVisible(".problem"))
	if text := b.Text(".problem"); !strings.Contains(text, "does not work") {
		t.Errorf("a forged link: %q", text)
	}
}
