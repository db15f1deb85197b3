package main

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestTrustedProxies: behind -trusted-proxies each client that the proxy
// names in X-Forwarded-For has its own sign-in allowance, and the log
// names it; without the flag the header is not read, and everyone behind
// the proxy shares its allowance.
func TestTrustedProxies(t *testing.T) {
	bin := buildStandalone(t)
	attempt := func(base, client string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, base+"/dashboard/signin", strings.NewReader(url.Values{"token": {"forged"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		req.Header.Set("X-Forwarded-For", client)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		name         string
		args         []string
		otherAllowed bool // whether another client still may try after the first spent its allowance
		logged       string
	}{
		{"Trusted", []string{"-trusted-proxies", "10.0.0.0/8, 127.0.0.1"}, true, "client=203.0.113.7"},
		{"NotTrusted", nil, false, "client=127.0.0.1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := startStandalone(t, bin, append([]string{"-data", t.TempDir()}, c.args...)...)
			for i := range 5 {
				if got := attempt(srv.base, "203.0.113.7"); got != http.StatusUnauthorized {
					t.Fatalf("attempt %d: %d, want 401", i+1, got)
				}
			}
			if got := attempt(srv.base, "203.0.113.7"); got != http.StatusTooManyRequests {
				t.Errorf("a sixth attempt of the same client: %d, want 429", got)
			}
			want := http.StatusTooManyRequests
			if c.otherAllowed {
				want = http.StatusUnauthorized
			}
			if got := attempt(srv.base, "203.0.113.8"); got != want {
				t.Errorf("another client behind the proxy: %d, want %d", got, want)
			}
			srv.stop(t)
			if !strings.Contains(srv.stderr.String(), c.logged) {
				t.Errorf("the log does not name %s:\n%s", c.logged, srv.stderr.String())
			}
		})
	}
}

func TestTrustedProxiesFlag(t *testing.T) {
	o, err := parseFlags([]string{"-trusted-proxies", "10.1.2.3/8,192.0.2.7", "-trusted-proxies", "2001:db8::/32"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range o.trustedProxies {
		got = append(got, p.String())
	}
	if want := "10.0.0.0/8 192.0.2.7/32 2001:db8::/32"; strings.Join(got, " ") != want {
		t.Errorf("prefixes %q, want %q", got, want)
	}
	if _, err := parseFlags([]string{"-trusted-proxies", "10.0.0.0/8,proxy.internal"}, io.Discard); err == nil || !strings.Contains(err.Error(), "-trusted-proxies") || !strings.Contains(err.Error(), "proxy.internal") {
		t.Errorf("a host name: %v, want an error naming the flag and the value", err)
	}
}
