package main

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/upscalekit/upscale/client"
)

// TestDashboard: the banner's link signs the demo account in to
// /dashboard/, whose overview shows its balance; a key made there
// upscales through the API, and revoked there answers 401 at once; the
// dashboard link command makes more links; / says where everything is.
func TestDashboard(t *testing.T) {
	bin := buildStandalone(t)
	data := t.TempDir()
	origin := newButterflyOrigin(t)
	srv := startStandalone(t, bin, "-data", data)
	defer srv.stop(t)
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	send := func(method, u string, form url.Values) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, u, strings.NewReader(form.Encode()))
		if method == http.MethodPost {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Sec-Fetch-Site", "same-origin")
		}
		resp, err := browser.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	signIn := func(link string) {
		t.Helper()
		status, page := send("GET", link, nil)
		token := regexp.MustCompile(`name="token" value="([^"]+)"`).FindStringSubmatch(page)
		if status != http.StatusOK || token == nil {
			t.Fatalf("the link %s: %d\n%s", link, status, page)
		}
		if status, _ := send("POST", srv.base+"/dashboard/signin", url.Values{"token": {token[1]}}); status != http.StatusSeeOther {
			t.Fatalf("sign in: %d", status)
		}
	}

	if !strings.HasPrefix(srv.dashboard, srv.base+"/dashboard/signin?token=") {
		t.Fatalf("the banner's dashboard link %q", srv.dashboard)
	}
	signIn(srv.dashboard)
	status, page := send("GET", srv.base+"/dashboard/", nil)
	if status != http.StatusOK || !strings.Contains(page, "<strong>demo</strong>") || !strings.Contains(page, `<span class="left">10</span> <span class="of">of 10</span>`) {
		t.Fatalf("the overview: %d\n%s", status, page)
	}

	status, page = send("POST", srv.base+"/dashboard/keys", url.Values{"name": {"site"}})
	key := regexp.MustCompile(`<code id="new-key">(upk_[a-z0-9]+)</code>`).FindStringSubmatch(page)
	if status != http.StatusCreated || key == nil {
		t.Fatalf("make a key: %d\n%s", status, page)
	}
	if upscaleVia(t, srv.base, key[1], origin+"/a.png", &srv.stderr) == "" {
		t.Fatal("the dashboard's key does not upscale")
	}
	_, page = send("GET", srv.base+"/dashboard/keys", nil)
	id := regexp.MustCompile(`keys/([0-9a-f]{16})/revoke`).FindStringSubmatch(page)
	if id == nil {
		t.Fatal("no revoke link on the keys page")
	}
	if status, _ := send("POST", srv.base+"/dashboard/keys/"+id[1]+"/revoke", nil); status != http.StatusSeeOther {
		t.Fatalf("revoke: %d", status)
	}
	api := &client.Client{BaseURL: srv.base, Key: key[1], MaxAttempts: 1}
	if _, err := api.Upscale(context.Background(), client.Request{ImageURL: origin + "/a.png"}); !isProblem(err, http.StatusUnauthorized, "unauthorized") {
		t.Errorf("the key revoked in the dashboard: %v; want 401 at once", err)
	}

	out, err := exec.Command(bin, "dashboard", "link", "-account", "demo", "-public-url", srv.base, "-data", data).Output()
	if link := strings.TrimSpace(string(out)); err != nil || !strings.HasPrefix(link, srv.base+"/dashboard/signin?token=") {
		t.Fatalf("dashboard link: %q, %v", out, err)
	} else {
		jar, _ := cookiejar.New(nil)
		browser.Jar = jar // another browser
		signIn(link)
	}
	if out, err := exec.Command(bin, "dashboard", "link", "-account", "nobody", "-data", data).CombinedOutput(); err == nil {
		t.Errorf("a link for an unknown account: %s", out)
	}

	status, page = send("GET", srv.base+"/", nil)
	if status != http.StatusOK || !strings.Contains(page, `href="/dashboard/"`) || !strings.Contains(page, `href="/openapi.yaml"`) {
		t.Errorf("the landing page: %d\n%s", status, page)
	}
}
