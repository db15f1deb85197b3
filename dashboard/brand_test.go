package dashboard_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/dashboard"
	"github.com/upscalekit/upscale/upscaletest"
)

var pixelgrow = dashboard.Brand{Name: "Pixelgrow", Support: "help@pixelgrow.example", LogoURL: "https://cdn.pixelgrow.example/logo.svg"}

// TestBrand: every page and every mail names the operator's product, never
// "upscale"; the pages show its logo, which their policy lets load, and
// its support address; the mail that opens an account says how many free
// images it comes with, and who to write to.
func TestBrand(t *testing.T) {
	s := newEmailSite(t, true, siteOptions{brand: pixelgrow})
	_, page := s.ask("ada@example.com", "a")
	opening := s.mail.await(t, "ada@example.com", 1)
	if opening.Subject != "Open your Pixelgrow account" {
		t.Errorf("the mail's subject %q", opening.Subject)
	}
	for _, body := range []string{opening.Text, opening.HTML} {
		if !strings.Contains(body, "Open your Pixelgrow account with this link") || !strings.Contains(body, "10 free images every month") ||
			!strings.Contains(body, "help@pixelgrow.example") || strings.Contains(body, "upscale") {
			t.Errorf("the mail that opens an account:\n%s", body)
		}
	}
	s.follow(opening)
	_, overview := s.do(http.MethodGet, s.base, "browser", nil)
	for name, body := range map[string]string{"the sign-in page": page, "the overview": overview} {
		if !strings.Contains(body, "<title>") || !strings.Contains(body, " · Pixelgrow</title>") ||
			!strings.Contains(body, `<img src="https://cdn.pixelgrow.example/logo.svg" alt="" class="logo"> Pixelgrow</a>`) ||
			!strings.Contains(body, `<a href="mailto:help@pixelgrow.example">help@pixelgrow.example</a>`) || strings.Contains(strings.ReplaceAll(body, "api/v1/upscale", ""), "upscale") {
			t.Errorf("%s does not name the brand alone:\n%s", name, body)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, s.base, nil)
	resp, err := s.browser.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "img-src 'self' data: https://cdn.pixelgrow.example;") {
		t.Errorf("the policy %q does not let the logo load", csp)
	}
	s.do(http.MethodPost, s.base+"signout", "browser", nil)
	s.ask("ada@example.com", "a")
	if signIn := s.mail.await(t, "ada@example.com", 2); signIn.Subject != "Sign in to Pixelgrow" || strings.Contains(signIn.Text, "free images") {
		t.Errorf("the sign-in mail: %q\n%s", signIn.Subject, signIn.Text)
	}
}

// TestBrandRefused: a support address or a logo that the pages could not
// use is refused when the dashboard is made, naming the field.
func TestBrandRefused(t *testing.T) {
	for name, tc := range map[string]struct {
		brand dashboard.Brand
		field string
	}{
		"NamedSupport": {dashboard.Brand{Support: "Help <help@example.com>"}, "Brand.Support"},
		"NoAddress":    {dashboard.Brand{Support: "help"}, "Brand.Support"},
		"HTTPLogo":     {dashboard.Brand{LogoURL: "http://cdn.example/logo.svg"}, "Brand.LogoURL"},
		"RelativeLogo": {dashboard.Brand{LogoURL: "logo.svg"}, "Brand.LogoURL"},
		"ScriptLogo":   {dashboard.Brand{LogoURL: "javascript:alert(1)"}, "Brand.LogoURL"},
		"PolicyInHost": {dashboard.Brand{LogoURL: "https://cdn.example;script-src/logo.svg"}, "Brand.LogoURL"}, // would be read as another directive
	} {
		t.Run(name, func(t *testing.T) {
			_, err := dashboard.New(dashboard.Config{Account: func(*http.Request) string { return "acme" }, Keys: upscale.NewMemoryKeyStore(),
				Ledger: upscale.NewMemoryLedger(upscale.LedgerOptions{}), Brand: tc.brand})
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("New = %v, want a refusal naming %s", err, tc.field)
			}
		})
	}
	if _, err := dashboard.New(dashboard.Config{Account: func(*http.Request) string { return "acme" }, Keys: upscale.NewMemoryKeyStore(),
		Ledger: upscale.NewMemoryLedger(upscale.LedgerOptions{Now: upscaletest.NewClock(start).Now}), Brand: dashboard.Brand{LogoURL: "/logo.svg", Support: "help@example.com"}}); err != nil {
		t.Errorf("a logo on the site and a bare address: %v", err)
	}
}
