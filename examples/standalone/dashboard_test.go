package main

import (
	"bytes"
	"context"
	"image"
	_ "image/png"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/client"
	"github.com/upscalekit/upscale/internal/testservers"
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
	b := newBrowser(t, srv.base)
	send, signIn := b.send, b.signIn

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
		newBrowser(t, srv.base).signIn(link) // another browser
	}
	if out, err := exec.Command(bin, "dashboard", "link", "-account", "nobody", "-data", data).CombinedOutput(); err == nil {
		t.Errorf("a link for an unknown account: %s", out)
	}

	status, page = send("GET", srv.base+"/", nil)
	if status != http.StatusOK || !strings.Contains(page, `<a href="/dashboard/" class="button">Sign in to your account</a>`) || !strings.Contains(page, `href="/dashboard/reference"`) ||
		!strings.Contains(page, `src="`+srv.base+`/samples/photo-enlarged.png"`) || !strings.Contains(page, "curl -sS -X POST "+srv.base+"/api/v1/upscale") {
		t.Errorf("the storefront: %d\n%s", status, page)
	}
	resp, err := http.Get(srv.base + "/samples/photo-enlarged.png")
	if err != nil {
		t.Fatal(err)
	}
	enlarged, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if cfg, _, err := image.DecodeConfig(bytes.NewReader(enlarged)); err != nil || resp.StatusCode != http.StatusOK || cfg.Width != 512 || cfg.Height != 512 {
		t.Errorf("the showcase's result: %d, %+v, %v; want the 256×256 photo ×2", resp.StatusCode, cfg, err)
	}
}

// TestSignUpByEmail: with an SMTP server (Mailpit), a person with only an
// inbox asks the dashboard for a link, follows the mail, finds an account
// of their own with the free plan's images, makes a key and upscales with
// it, paid by the free pool; asked again, the link signs the same account
// in. With -signups closed, an unknown address opens nothing.
func TestSignUpByEmail(t *testing.T) {
	t.Parallel() // waits on mail
	bin := buildStandalone(t)
	mail := testservers.Mailpit(t)
	origin := newButterflyOrigin(t)
	flags := []string{"-smtp-url", "smtp://" + mail.SMTP, "-mail-from", "Upscale <no-reply@upscale.test>"}
	data := t.TempDir()
	srv := startStandalone(t, bin, append(flags, "-data", data)...)
	defer srv.stop(t)
	if !slices.ContainsFunc(srv.banner, func(line string) bool { return strings.HasPrefix(line, "sign-in by email at ") }) {
		t.Errorf("the banner does not say sign-in by email is on:\n%s", strings.Join(srv.banner, "\n"))
	}
	b := newBrowser(t, srv.base)
	address := "ada-" + strings.ToLower(upscale.NewKey(""))[:8] + "@example.com"
	if status, page := b.send("POST", srv.base+"/dashboard/signin/email", url.Values{"email": {address}}); status != http.StatusOK || !strings.Contains(page, "a link is on its way") {
		t.Fatalf("ask for a link: %d\n%s", status, page)
	}
	b.signIn(awaitLink(t, mail, address, 1, "Open your upscale account"))
	status, page := b.send("GET", srv.base+"/dashboard/", nil)
	account := regexp.MustCompile(`<code id="account-id">(acct_[a-z0-9]+)</code>`).FindStringSubmatch(page)
	if status != http.StatusOK || account == nil || !strings.Contains(page, `<span class="left">10</span> <span class="of">of 10</span>`) {
		t.Fatalf("the new account's overview: %d\n%s", status, page)
	}
	if !strings.Contains(page, `<code id="share-link">`+srv.base+"/dashboard/signup?ref=") {
		t.Errorf("the new account's overview shows no share link:\n%s", page)
	}
	status, page = b.send("POST", srv.base+"/dashboard/keys", url.Values{"name": {"first"}})
	key := regexp.MustCompile(`<code id="new-key">(upk_[a-z0-9]+)</code>`).FindStringSubmatch(page)
	if status != http.StatusCreated || key == nil {
		t.Fatalf("make a key: %d\n%s", status, page)
	}
	api := &client.Client{BaseURL: srv.base, Key: key[1], MaxAttempts: 1}
	resp, err := api.Upscale(context.Background(), client.Request{ImageURL: origin + "/a.png", Scale: 2})
	if err != nil || resp.Via != string(upscale.PoolFree) {
		t.Fatalf("the new account's key: %+v, %v; want a result paid by free_pool", resp, err)
	}
	if _, page := b.send("GET", srv.base+"/dashboard/history", nil); !strings.Contains(page, "<td>first</td>") || !strings.Contains(page, `<a href="`+strings.ReplaceAll(resp.URL, "&", "&amp;")+`">open</a>`) {
		t.Errorf("the history does not show the key's request with its result:\n%s", page)
	}
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	defer receiver.Close()
	if _, page := b.send("POST", srv.base+"/dashboard/webhooks/test", url.Values{"url": {receiver.URL + "/hooks"}}); !strings.Contains(page, "Delivered: your receiver answered 204.") ||
		!strings.Contains(page, "<td><code>upscale.test</code></td><td>"+receiver.URL+"/hooks</td><td>1</td><td>delivered (204)</td>") {
		t.Errorf("a test event from the Webhooks page:\n%s", page)
	}
	other := newBrowser(t, srv.base)
	other.send("POST", srv.base+"/dashboard/signin/email", url.Values{"email": {strings.ToUpper(address)}})
	other.signIn(awaitLink(t, mail, address, 2, "Sign in to upscale"))
	if _, page := other.send("GET", srv.base+"/dashboard/", nil); !strings.Contains(page, `<code id="account-id">`+account[1]+"</code>") {
		t.Errorf("the second link did not sign in %s", account[1])
	}

	out, err := exec.Command(bin, "accounts", "opened", "-data", data).CombinedOutput()
	if err != nil || !strings.Contains(string(out), account[1]+"  "+address) || !strings.Contains(string(out), time.Now().UTC().Format(time.DateOnly)+": 1 opened") {
		t.Errorf("accounts opened: %v\n%s\nwant %s for %s, one today", err, out, account[1], address)
	}

	closed := startStandalone(t, bin, append(flags, "-data", t.TempDir(), "-signups", "closed", "-metrics-addr", "127.0.0.1:0")...)
	defer closed.stop(t)
	stranger := "stranger-" + strings.ToLower(upscale.NewKey(""))[:8] + "@example.com"
	if status, page := newBrowser(t, closed.base).send("POST", closed.base+"/dashboard/signin/email", url.Values{"email": {stranger}}); status != http.StatusOK || !strings.Contains(page, "a link is on its way") {
		t.Fatalf("ask for a link, sign-ups closed: %d\n%s", status, page)
	}
	awaitMetrics(t, closed.metrics, "upscale_dashboard_links_no_account_total 1") // decided: nothing will be mailed
	if got := mail.Messages(t, stranger); len(got) != 0 {
		t.Errorf("sign-ups closed: %d mails to an address without an account", len(got))
	}
}

// TestMailsPerHourFlag: past -mails-per-hour, a link asked for is answered
// as a link on its way but not posted, and /metrics counts it.
func TestMailsPerHourFlag(t *testing.T) {
	t.Parallel() // waits on mail
	bin := buildStandalone(t)
	mail := testservers.Mailpit(t)
	srv := startStandalone(t, bin, "-data", t.TempDir(), "-metrics-addr", "127.0.0.1:0",
		"-smtp-url", "smtp://"+mail.SMTP, "-mail-from", "Upscale <no-reply@upscale.test>", "-mails-per-hour", "1")
	defer srv.stop(t)
	b := newBrowser(t, srv.base)
	for i := range 2 {
		address := "budget" + strconv.Itoa(i) + "-" + strings.ToLower(upscale.NewKey(""))[:8] + "@example.com"
		if status, page := b.send("POST", srv.base+"/dashboard/signin/email", url.Values{"email": {address}}); status != http.StatusOK || !strings.Contains(page, "a link is on its way") {
			t.Fatalf("ask for link %d: %d\n%s", i+1, status, page)
		}
	}
	awaitMetrics(t, srv.metrics, "upscale_dashboard_mails_posted_total 1", "upscale_dashboard_mails_over_budget_total 1")
}

// awaitMetrics waits up to 30 s for the exposition at metrics to have
// each of the lines want.
func awaitMetrics(t *testing.T, metrics string, want ...string) {
	t.Helper()
	for i := range want {
		want[i] += "\n" // a whole line: "… 1" is not "… 10"
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		missing := missingMetrics(t, metrics, want)
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics after 30 s lacks %q", missing)
		}
	}
}

// browser is a client with cookies that sends the dashboard's forms as a
// browser on its page would.
type browser struct {
	t      *testing.T
	base   string
	client *http.Client
}

func newBrowser(t *testing.T, base string) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, base: base, client: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (b *browser) send(method, u string, form url.Values) (int, string) {
	b.t.Helper()
	req, _ := http.NewRequest(method, u, strings.NewReader(form.Encode()))
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "same-origin")
	}
	resp, err := b.client.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// signIn opens link and presses its button.
func (b *browser) signIn(link string) {
	b.t.Helper()
	status, page := b.send("GET", link, nil)
	token := regexp.MustCompile(`name="token" value="([^"]+)"`).FindStringSubmatch(page)
	if status != http.StatusOK || token == nil {
		b.t.Fatalf("the link %s: %d\n%s", link, status, page)
	}
	if status, _ := b.send("POST", b.base+"/dashboard/signin", url.Values{"token": {token[1]}}); status != http.StatusSeeOther {
		b.t.Fatalf("sign in: %d", status)
	}
}

// awaitLink waits up to 30 s for the nth mail to address, checks its
// subject, and returns the link in it.
func awaitLink(t *testing.T, mail testservers.MailpitServer, address string, n int, subject string) string {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if got := mail.Messages(t, address); len(got) >= n {
			m := got[0] // newest first
			link := regexp.MustCompile(`https?://\S+/dashboard/signin\?token=\S+`).FindString(m.Text)
			if m.Subject != subject || link == "" {
				t.Fatalf("mail %d to %s: subject %q, text %q; want %q with a sign-in link", n, address, m.Subject, m.Text, subject)
			}
			return link
		}
		if time.Now().After(deadline) {
			t.Fatalf("no mail %d to %s after 30 s", n, address)
		}
	}
}
