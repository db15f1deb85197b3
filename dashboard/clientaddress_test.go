package dashboard_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/dashboard"
	"github.com/upscalekit/upscale/upscaletest"
)

var proxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16"), netip.MustParsePrefix("::ffff:10.200.0.0/112"), netip.MustParsePrefix("2001:db8:aa::/48")}

func TestProxiedClientAddress(t *testing.T) {
	for _, c := range []struct {
		name, peer string
		header     http.Header
		want       string
	}{
		{"OK", "10.0.0.2:5000", http.Header{"X-Forwarded-For": {"203.0.113.7"}}, "203.0.113.7"},
		{"ProxyChain", "10.0.0.2:5000", http.Header{"X-Forwarded-For": {"203.0.113.7, 10.0.1.1", "10.0.0.9"}}, "203.0.113.7"},
		{"ForgedHopBeforeTheClient", "10.0.0.2:5000", http.Header{"X-Forwarded-For": {"198.51.100.1, 203.0.113.7"}}, "203.0.113.7"},
		{"UntrustedPeer", "192.0.2.1:5000", http.Header{"X-Forwarded-For": {"203.0.113.7"}}, "192.0.2.1"},
		{"NoHeader", "10.0.0.2:5000", nil, "10.0.0.2"},
		{"AllTrusted", "10.0.0.2:5000", http.Header{"X-Forwarded-For": {"10.0.0.3"}}, "10.0.0.3"},
		{"HopNotAnAddress", "10.0.0.2:5000", http.Header{"X-Forwarded-For": {"203.0.113.7, garbage"}}, "10.0.0.2"},
		{"HopWithPort", "10.0.0.2:5000", http.Header{"X-Forwarded-For": {"203.0.113.7:4711"}}, "203.0.113.7"},
		{"IPv4Mapped", "[::ffff:10.0.0.2]:5000", http.Header{"X-Forwarded-For": {"::ffff:203.0.113.7"}}, "203.0.113.7"},
		{"IPv4MappedProxyPrefix", "10.200.0.2:5000", http.Header{"X-Forwarded-For": {"203.0.113.7"}}, "203.0.113.7"},
		{"IPv6Proxy", "[2001:db8:aa::1]:5000", http.Header{"X-Forwarded-For": {"2001:db8:bb::7"}}, "2001:db8:bb::7"},
		{"Forwarded", "10.0.0.2:5000", http.Header{"Forwarded": {`for=198.51.100.1, for="[2001:db8:cc::1]:4711";proto=https`, "For=10.0.0.4"}}, "2001:db8:cc::1"},
		{"ForwardedUnknown", "10.0.0.2:5000", http.Header{"Forwarded": {"for=unknown"}}, "10.0.0.2"},
		{"ForwardedWithoutFor", "10.0.0.2:5000", http.Header{"Forwarded": {"proto=https"}}, "10.0.0.2"},
		{"TrustingNone", "10.0.0.2:5000", http.Header{"X-Forwarded-For": {"203.0.113.7"}}, "10.0.0.2"},
		{"XForwardedForFirst", "10.0.0.2:5000", http.Header{"X-Forwarded-For": {"203.0.113.7"}, "Forwarded": {"for=198.51.100.1"}}, "203.0.113.7"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr, r.Header = c.peer, c.header
			trusted := proxies
			if c.name == "TrustingNone" {
				trusted = nil
			}
			if got := dashboard.ProxiedClientAddress(trusted)(r); got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}

// TestSignInAttemptsBehindProxy: behind a trusted proxy each client has
// its own allowance of sign-in attempts, and a client that reaches the
// server directly cannot take another's by naming it in X-Forwarded-For.
func TestSignInAttemptsBehindProxy(t *testing.T) {
	clock := upscaletest.NewClock(start)
	signIn, err := dashboard.NewSignIn(dashboard.SignInOptions{
		Secret: secret, BaseURL: "http://example.com/dashboard/", Now: clock.Now,
		ClientAddress: dashboard.ProxiedClientAddress(proxies),
	})
	if err != nil {
		t.Fatal(err)
	}
	ledger := upscale.NewMemoryLedger(upscale.LedgerOptions{Now: clock.Now})
	if err := ledger.PutAccount(context.Background(), upscale.Account{ID: "acme", Plan: upscale.Plan{Name: "free", MonthlyImages: 10}}); err != nil {
		t.Fatal(err)
	}
	d, err := dashboard.New(dashboard.Config{SignIn: signIn, Keys: upscale.NewMemoryKeyStore(), Ledger: ledger, Now: clock.Now, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	attempt := func(peer, forwardedFor string) int {
		t.Helper()
		r := httptest.NewRequest(http.MethodPost, "/signin", strings.NewReader(url.Values{"token": {"forged"}}.Encode()))
		r.RemoteAddr = peer
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set("Sec-Fetch-Site", "same-origin")
		if forwardedFor != "" {
			r.Header.Set("X-Forwarded-For", forwardedFor)
		}
		w := httptest.NewRecorder()
		d.ServeHTTP(w, r)
		return w.Code
	}
	for i := range 5 {
		if got := attempt("10.0.0.2:5000", "203.0.113.7"); got != http.StatusUnauthorized {
			t.Fatalf("attempt %d through the proxy: %d, want 401", i+1, got)
		}
	}
	if got := attempt("10.0.0.2:5000", "203.0.113.7"); got != http.StatusTooManyRequests {
		t.Errorf("a sixth attempt of the same client: %d, want 429", got)
	}
	if got := attempt("10.0.0.2:5000", "203.0.113.8"); got != http.StatusUnauthorized {
		t.Errorf("another client through the same proxy: %d, want 401 (an allowance of its own)", got)
	}
	for i := range 5 {
		if got := attempt("192.0.2.1:5000", "203.0.113.99"); got != http.StatusUnauthorized {
			t.Fatalf("direct attempt %d: %d, want 401", i+1, got)
		}
	}
	if got := attempt("192.0.2.1:5000", "203.0.113.100"); got != http.StatusTooManyRequests {
		t.Errorf("a direct client naming another in X-Forwarded-For: %d, want 429 (its own allowance is spent)", got)
	}
}
