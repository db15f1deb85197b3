package dashboard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/client"
	"github.com/upscalekit/upscale/dashboard"
	"github.com/upscalekit/upscale/upscaletest"
)

// site is a dashboard mounted under /dashboard/ by a host whose sign-in
// is the X-Test-Account header, in front of memory stores.
type site struct {
	t       *testing.T
	server  *httptest.Server
	keys    *upscale.CachedKeyStore
	ledger  *upscale.MemoryLedger
	secrets *upscale.MemoryWebhookSecrets
	log     *bytes.Buffer
	origin  string // serves a 16×16 PNG at every path
}

func newSite(t *testing.T, clock *upscaletest.Clock, configure ...func(*dashboard.Config)) *site {
	t.Helper()
	ctx := context.Background()
	keys := upscale.NewCachedKeyStore(upscale.NewMemoryKeyStore(), upscale.CachedKeyStoreOptions{TTL: time.Hour})
	t.Cleanup(func() { keys.Close() })
	ledger := upscale.NewMemoryLedger(upscale.LedgerOptions{Now: clock.Now})
	for _, a := range []upscale.Account{
		{ID: "acme", Plan: upscale.Plan{Name: "free", MonthlyImages: 10}, ShareBonus: 2, Credits: 5},
		{ID: "globex", Plan: upscale.Plan{Name: "unlimited", Paid: true, Unlimited: true}},
	} {
		if err := ledger.PutAccount(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	var log bytes.Buffer
	secrets := upscale.NewMemoryWebhookSecrets(upscale.MemoryWebhookSecretsOptions{Now: clock.Now})
	source := upscaletest.TestImagePNG(t, 16, 16)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(source) }))
	t.Cleanup(origin.Close)
	blobs, err := upscale.NewMemoryBlobStore(upscale.MemoryBlobStoreOptions{BaseURL: "http://results.test/outputs", Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	api, err := upscale.New(upscale.Config{
		Keys: keys, Ledger: ledger, Upscaler: upscaletest.PixelUpscaler{}, Blobs: blobs, Now: clock.Now,
		Fetch:    upscale.FetchPolicy{AllowPrivateNetworks: true}, // the origin is on loopback
		Capacity: upscale.Capacity{IdleRelease: -1},
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := dashboard.Config{
		Account: func(r *http.Request) string { return r.Header.Get("X-Test-Account") },
		Keys:    keys, Ledger: ledger, WebhookSecrets: secrets, Now: clock.Now,
		API: api, APIURL: "https://api.test/api/v1/upscale", Samples: []dashboard.Sample{{Name: "A square", URL: origin.URL + "/square.png"}},
		Logger: slog.New(slog.NewTextHandler(&log, nil)),
	}
	for _, c := range configure {
		c(&cfg)
	}
	d, err := dashboard.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	front, err := d.Storefront(dashboard.StorefrontOptions{Dashboard: "/dashboard/",
		Showcase: &dashboard.Showcase{Before: origin.URL + "/square.png", After: "http://results.test/outputs/square.png", Caption: "the square, ×2"}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/dashboard/", http.StripPrefix("/dashboard", d))
	mux.Handle("GET /{$}", front)
	s := &site{t: t, server: httptest.NewServer(mux), keys: keys, ledger: ledger, secrets: secrets, log: &log, origin: origin.URL}
	t.Cleanup(s.server.Close)
	return s
}

// do sends method to path (under /dashboard) as account, with form
// values for a POST from the site's own origin, and returns the status
// and the body.
func (s *site) do(method, path, account string, form url.Values) (int, string, http.Header) {
	s.t.Helper()
	req, _ := http.NewRequest(method, s.server.URL+"/dashboard"+path, strings.NewReader(form.Encode()))
	if account != "" {
		req.Header.Set("X-Test-Account", account)
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "same-origin")
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp.Header
}

var start = time.Date(2026, time.November, 20, 12, 0, 0, 0, time.UTC)

func TestOverview(t *testing.T) {
	clock := upscaletest.NewClock(start.AddDate(0, -1, 0)) // October
	s := newSite(t, clock)
	ctx := context.Background()
	charge := func(n int) {
		for range n {
			r, err := s.ledger.Reserve(ctx, "acme", false)
			if err == nil {
				err = s.ledger.Commit(ctx, r.ID)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	charge(4) // in October
	clock.Advance(start.Sub(clock.Now()))
	charge(3) // on the 20th of November
	clock.Advance(24 * time.Hour)
	charge(1) // the 21st

	status, page, header := s.do("GET", "/", "acme", nil)
	if status != http.StatusOK {
		t.Fatalf("overview: %d\n%s", status, page)
	}
	for _, want := range []string{
		`Plan <span class="plan">free</span>`,
		`<dt>Free images this month</dt>`, `<span class="left">6</span> <span class="of">of 10</span>`,
		`<dt>Share bonus</dt>`, `<span class="left">2</span>`, `<dt>Credits</dt>`, `<span class="left">5</span>`,
		"refill on 1 December 2026, 00:00 UTC",
		"This month: 4 images",
		"<title>20: 3</title>", "<title>21: 1</title>", "<title>30: 0</title>",
		"<td>October 2026</td><td>4</td>",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("overview lacks %q", want)
		}
	}
	if strings.Contains(page, "<title>31:") {
		t.Error("overview charts a 31st of November")
	}
	csp := header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "frame-ancestors 'none'") || strings.Contains(csp, "unsafe-inline") || header.Get("Cache-Control") != "no-store" {
		t.Errorf("headers %v; want a CSP without unsafe-inline, framing refused, and no caching", header)
	}
	if inline := regexp.MustCompile(`<script>|<style|style="|\son[a-z]+="`).FindString(page); inline != "" {
		t.Errorf("the page holds %q: inline script, style or an event handler, which the CSP refuses", inline)
	}

	_, page, _ = s.do("GET", "/", "globex", nil)
	if !strings.Contains(page, "Your plan is unlimited") || strings.Contains(page, "Free images") {
		t.Errorf("an unlimited account's overview:\n%s", page)
	}
}

func TestSignInRequired(t *testing.T) {
	s := newSite(t, upscaletest.NewClock(start))
	for _, path := range []string{"/", "/keys"} {
		if status, page, _ := s.do("GET", path, "", nil); status != http.StatusUnauthorized || !strings.Contains(page, "Sign in") {
			t.Errorf("GET %s signed out: %d, want 401 and the sign-in page", path, status)
		}
	}
	if status, _, _ := s.do("POST", "/keys", "", url.Values{"name": {"x"}}); status != http.StatusUnauthorized {
		t.Errorf("POST /keys signed out: %d, want 401", status)
	}
	if keys, _ := s.keys.ListKeys(context.Background(), ""); len(keys) != 0 {
		t.Errorf("a signed-out POST made keys: %+v", keys)
	}
}

func TestKeys(t *testing.T) {
	s := newSite(t, upscaletest.NewClock(start))
	ctx := context.Background()
	status, page, _ := s.do("POST", "/keys", "acme", url.Values{"name": {"<b>CI</b>"}})
	key := regexp.MustCompile(`<code id="new-key">(upk_[a-z0-9]+)</code>`).FindStringSubmatch(page)
	if status != http.StatusCreated || key == nil {
		t.Fatalf("make a key: %d\n%s", status, page)
	}
	if !strings.Contains(page, "&lt;b&gt;CI&lt;/b&gt;") || strings.Contains(page, "<b>CI</b>") {
		t.Error("the key's name is not escaped")
	}
	if account, err := s.keys.Authenticate(ctx, key[1]); err != nil || account != "acme" {
		t.Fatalf("the key shown: %q, %v; want it to authenticate as acme", account, err)
	}
	// Shown once: the list shows the hint, never the key.
	_, page, _ = s.do("GET", "/keys", "acme", nil)
	if strings.Contains(page, key[1]) || !strings.Contains(page, upscale.KeyHint(key[1])) {
		t.Errorf("the keys page shows the key, or not its hint:\n%s", page)
	}
	if strings.Contains(s.log.String(), key[1]) || !strings.Contains(s.log.String(), upscale.KeyID(key[1])) {
		t.Errorf("the log holds the key, or not its ID:\n%s", s.log)
	}
	// Another account sees nothing of it, and cannot revoke it.
	id := upscale.KeyID(key[1])
	if _, page, _ := s.do("GET", "/keys", "globex", nil); strings.Contains(page, id) || !strings.Contains(page, "No key yet") {
		t.Error("globex's keys page shows acme's key")
	}
	for _, method := range []string{"GET", "POST"} {
		if status, _, _ := s.do(method, "/keys/"+id+"/revoke", "globex", nil); status != http.StatusNotFound {
			t.Errorf("%s revoke of acme's key as globex: %d, want 404", method, status)
		}
	}
	// Revoked after a confirmation; the cached key is refused at once.
	status, page, _ = s.do("GET", "/keys/"+id+"/revoke", "acme", nil)
	if status != http.StatusOK || !strings.Contains(page, `<form method="post" class="confirm">`) || !strings.Contains(page, `href="../../keys"`) {
		t.Fatalf("the confirmation: %d\n%s", status, page)
	}
	status, _, header := s.do("POST", "/keys/"+id+"/revoke", "acme", nil)
	if status != http.StatusSeeOther || header.Get("Location") != "../../keys" {
		t.Fatalf("revoke: %d, Location %q; want 303 back to the keys", status, header.Get("Location"))
	}
	if _, err := s.keys.Authenticate(ctx, key[1]); !errors.Is(err, upscale.ErrUnauthorized) {
		t.Errorf("a key revoked in the page authenticates: %v", err)
	}
	if _, page, _ := s.do("GET", "/keys", "acme", nil); !strings.Contains(page, `class="revoked"`) || strings.Contains(page, id+"/revoke") {
		t.Error("the keys page does not show the key revoked")
	}
	if status, _, _ := s.do("POST", "/keys/"+id+"/revoke", "acme", nil); status != http.StatusNotFound {
		t.Errorf("revoke again: %d, want 404", status)
	}
}

// utf8Keys is a KeyLister whose server, as PostgreSQL's, fails on an ID
// that is not UTF-8 text. It keeps the IDs it was asked to revoke.
type utf8Keys struct {
	upscale.KeyLister
	asked []string
}

func (k *utf8Keys) RevokeKeyID(ctx context.Context, accountID, id string) error {
	k.asked = append(k.asked, id)
	if !utf8.ValidString(id) {
		return errors.New(`ERROR: invalid byte sequence for encoding "UTF8": 0xff (SQLSTATE 22021)`)
	}
	return k.KeyLister.RevokeKeyID(ctx, accountID, id)
}

// TestRevokeKeyIDMalformed: a revoke path whose ID no key can have, such
// as one that is not UTF-8, is not found, word for word as an unknown
// key, and never reaches the store.
func TestRevokeKeyIDMalformed(t *testing.T) {
	ctx := context.Background()
	keys := &utf8Keys{KeyLister: upscale.NewMemoryKeyStore()}
	key := upscale.NewKey("upk_")
	if err := keys.AddKey(ctx, key, "acme"); err != nil {
		t.Fatal(err)
	}
	d, err := dashboard.New(dashboard.Config{Account: func(*http.Request) string { return "acme" }, Keys: keys,
		Ledger: upscale.NewMemoryLedger(upscale.LedgerOptions{}), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	revoke := func(method, id string) (int, string) {
		t.Helper()
		w := httptest.NewRecorder()
		d.ServeHTTP(w, httptest.NewRequest(method, "/keys/"+id+"/revoke", nil))
		return w.Code, w.Body.String()
	}
	id := upscale.KeyID(key)
	for _, method := range []string{"GET", "POST"} {
		_, unknown := revoke(method, "0123456789abcdef")
		for _, malformed := range []string{"%FF", strings.Repeat("%FF", 16), id[:15] + "%FF", strings.ToUpper(id), id[:15], id + "0", "%27%20OR%20%27%27=%27"} {
			if status, page := revoke(method, malformed); status != http.StatusNotFound || page != unknown {
				t.Errorf("%s /keys/%s/revoke: %d; want 404, the page of an unknown key", method, malformed, status)
			}
		}
	}
	if want := []string{"0123456789abcdef"}; !slices.Equal(keys.asked, want) {
		t.Errorf("the store was asked to revoke %q; want only %q, the IDs a key can have", keys.asked, want)
	}
	if account, err := keys.Authenticate(ctx, key); err != nil || account != "acme" {
		t.Errorf("the key after the malformed revocations: %q, %v; want it working", account, err)
	}
}

func TestKeyNameRefused(t *testing.T) {
	s := newSite(t, upscaletest.NewClock(start))
	status, page, _ := s.do("POST", "/keys", "acme", url.Values{"name": {strings.Repeat("n", 65)}})
	if status != http.StatusBadRequest || !strings.Contains(page, `aria-invalid="true"`) || !strings.Contains(page, "at most 64 characters") || strings.Contains(page, `id="new-key"`) {
		t.Errorf("a name too long: %d\n%s", status, page)
	}
	if keys, _ := s.keys.ListKeys(context.Background(), "acme"); len(keys) != 0 {
		t.Errorf("a refused name made a key: %+v", keys)
	}
}

// postCrossSite sends form to path (under /dashboard) as account from
// another site, as a forged form would, and returns the status.
func (s *site) postCrossSite(path, account string, form url.Values) int {
	s.t.Helper()
	req, _ := http.NewRequest("POST", s.server.URL+"/dashboard"+path, strings.NewReader(form.Encode()))
	req.Header.Set("X-Test-Account", account)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestCrossOriginRefused(t *testing.T) {
	s := newSite(t, upscaletest.NewClock(start))
	if status := s.postCrossSite("/keys", "acme", url.Values{"name": {"x"}}); status != http.StatusForbidden {
		t.Errorf("a cross-site POST: %d, want 403", status)
	}
	if keys, _ := s.keys.ListKeys(context.Background(), "acme"); len(keys) != 0 {
		t.Errorf("a cross-site POST made a key: %+v", keys)
	}
}

func TestStatic(t *testing.T) {
	s := newSite(t, upscaletest.NewClock(start))
	for path, want := range map[string]string{"/static/dashboard.css": "text/css", "/static/dashboard.js": "text/javascript"} {
		status, _, header := s.do("GET", path, "", nil)
		if status != http.StatusOK || !strings.HasPrefix(header.Get("Content-Type"), want) {
			t.Errorf("GET %s: %d %q, want %s", path, status, header.Get("Content-Type"), want)
		}
	}
}

func TestWebhookSecret(t *testing.T) {
	s := newSite(t, upscaletest.NewClock(start))
	ctx := context.Background()
	if _, page, _ := s.do("GET", "/webhooks", "acme", nil); !strings.Contains(page, "no signing secret yet") {
		t.Fatalf("the webhooks page of an account without a secret:\n%s", page)
	}
	made := func() string {
		t.Helper()
		status, page, _ := s.do("POST", "/webhooks", "acme", nil)
		secret := regexp.MustCompile(`<code id="new-secret">(whsec_[^<]+)</code>`).FindStringSubmatch(page)
		if status != http.StatusCreated || secret == nil {
			t.Fatalf("make a secret: %d\n%s", status, page)
		}
		return html.UnescapeString(secret[1])
	}
	first := made()
	if got, _ := s.secrets.WebhookSecrets(ctx, "acme"); len(got) != 1 || got[0] != first {
		t.Fatalf("the store's secrets %q; want the one shown, %q", got, first)
	}
	_, page, _ := s.do("GET", "/webhooks", "acme", nil)
	if strings.Contains(html.UnescapeString(page), first) || !strings.Contains(html.UnescapeString(page), "<code>…"+first[len(first)-4:]+"</code>") {
		t.Errorf("the page after the secret was shown shows it again, or not its end:\n%s", page)
	}
	second := made()
	if got, _ := s.secrets.WebhookSecrets(ctx, "acme"); len(got) != 2 || got[0] != second || got[1] != first {
		t.Errorf("after a rotation the store signs with %q; want the new one, then the old", got)
	}
	// Asked for, the page shows the secrets that sign now, the new first.
	status, page, _ := s.do("POST", "/webhooks/secrets", "acme", nil)
	if shown := regexp.MustCompile(`<code id="secret-\d">(whsec_[^<]+)</code>`).FindAllStringSubmatch(page, -1); status != http.StatusOK || len(shown) != 2 ||
		html.UnescapeString(shown[0][1]) != second || html.UnescapeString(shown[1][1]) != first {
		t.Errorf("the secrets shown: %d %v\n%s", status, shown, page)
	}
	if status := s.postCrossSite("/webhooks/secrets", "acme", nil); status != http.StatusForbidden {
		t.Errorf("a cross-site POST that shows the secrets: %d, want 403", status)
	}
	if got, _ := s.secrets.WebhookSecrets(ctx, "globex"); len(got) != 0 || strings.Contains(s.log.String(), first) || strings.Contains(s.log.String(), second) {
		t.Error("another account got a secret, or the log holds one")
	}
}

// testerFunc is a WebhookTester of a function.
type testerFunc func(ctx context.Context, accountID, url string) (upscale.WebhookDelivery, error)

func (f testerFunc) SendTestWebhook(ctx context.Context, accountID, url string) (upscale.WebhookDelivery, error) {
	return f(ctx, accountID, url)
}

// TestWebhookDeliveries: the Webhooks page lists the account's latest
// deliveries, with their attempts and outcome, and sends a test event to
// the address given, saying how it went, or why it was not sent.
func TestWebhookDeliveries(t *testing.T) {
	clock := upscaletest.NewClock(start)
	log := upscale.NewMemoryWebhookLog(upscale.MemoryWebhookLogOptions{Now: clock.Now})
	var sent []string
	tester := testerFunc(func(ctx context.Context, accountID, url string) (upscale.WebhookDelivery, error) {
		if !strings.HasPrefix(url, "https://") {
			return upscale.WebhookDelivery{}, upscale.Explain(upscale.ErrInvalidWebhookURL, "webhookUrl must be https here.")
		}
		sent = append(sent, accountID+" "+url)
		if strings.Contains(url, "down") {
			return upscale.WebhookDelivery{Event: "upscale.test", Attempts: 1, LastStatus: 503, LastError: "the receiver answered 503 Service Unavailable"}, nil
		}
		return upscale.WebhookDelivery{Event: "upscale.test", Attempts: 1, LastStatus: 204, Delivered: true}, nil
	})
	s := newSite(t, clock, func(c *dashboard.Config) { c.WebhookLog, c.WebhookTester = log, tester })
	ctx := context.Background()
	for _, d := range []upscale.WebhookDelivery{
		{ID: "msg_job_1", AccountID: "acme", URL: "https://hooks.acme.example/in", Event: "upscale.job.succeeded", LastAt: start, LastStatus: 500, LastError: "the receiver answered 500 Internal Server Error"},
		{ID: "msg_job_1", AccountID: "acme", URL: "https://hooks.acme.example/in", Event: "upscale.job.succeeded", LastAt: start.Add(time.Minute), LastStatus: 200, Delivered: true},
		{ID: "msg_job_2", AccountID: "globex", URL: "https://hooks.globex.example/in", Event: "upscale.job.failed", LastAt: start, Delivered: true},
	} {
		if err := log.RecordAttempt(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	_, page, _ := s.do("GET", "/webhooks", "acme", nil)
	if !strings.Contains(page, "<td><code>upscale.job.succeeded</code></td><td>https://hooks.acme.example/in</td><td>2</td><td>delivered (200)</td>") || strings.Contains(page, "globex") {
		t.Errorf("acme's deliveries:\n%s", page)
	}
	for _, tc := range []struct{ url, want string }{
		{"https://hooks.acme.example/in", `<p id="tested" role="status">Delivered: your receiver answered 204.</p>`},
		{"https://down.acme.example/in", `<p id="tested" role="status">Not delivered: the receiver answered 503 Service Unavailable.</p>`},
	} {
		if status, page, _ := s.do("POST", "/webhooks/test", "acme", url.Values{"url": {tc.url}}); status != http.StatusOK || !strings.Contains(page, tc.want) {
			t.Errorf("a test event to %s: %d\n%s", tc.url, status, page)
		}
	}
	status, page, _ := s.do("POST", "/webhooks/test", "acme", url.Values{"url": {"http://plain.example/in"}})
	if status != http.StatusBadRequest || !strings.Contains(page, `<p class="problem" id="test-problem">webhookUrl must be https here.</p>`) || !strings.Contains(page, `value="http://plain.example/in"`) {
		t.Errorf("a test event to an address refused: %d\n%s", status, page)
	}
	if len(sent) != 2 || sent[0] != "acme https://hooks.acme.example/in" {
		t.Errorf("test events sent: %q", sent)
	}
	// Five a minute: the three above and two more; the sixth waits.
	for i := range 3 {
		status, page, header := s.do("POST", "/webhooks/test", "acme", url.Values{"url": {"https://hooks.acme.example/in"}})
		if i < 2 && status != http.StatusOK || i == 2 && (status != http.StatusTooManyRequests || header.Get("Retry-After") == "" || !strings.Contains(page, "At most 5 test events a minute")) {
			t.Errorf("test event %d of the minute: %d\n%s", 4+i, status, page)
		}
	}
	if len(sent) != 4 {
		t.Errorf("%d test events sent, want 4: none past the allowance", len(sent))
	}
}

func TestReference(t *testing.T) {
	s := newSite(t, upscaletest.NewClock(start))
	status, page, _ := s.do("GET", "/reference", "", nil) // no sign-in needed
	if status != http.StatusOK {
		t.Fatalf("the reference: %d", status)
	}
	for _, want := range []string{
		`<h2 id="post-api-v1-upscale-title"><span class="method">POST</span> <code>/api/v1/upscale</code></h2>`,
		`<span class="method">GET</span> <code>/api/v1/upscale/jobs/{id}</code>`,
		`<span class="method">DELETE</span> <code>/api/v1/upscale/jobs/{id}</code>`,
		`<td><code>imageUrl</code> <span class="required">required</span></td>`,
		`<code>Idempotency-Key</code> <span class="hint">(header)</span>`,
		`<dt><code>200</code></dt>`, `<dt><code>429</code></dt>`,
		`<h2 class="part">Webhooks</h2>`,
		"Send an <code>Idempotency-Key</code> to make retries safe",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the reference lacks %q", want)
		}
	}
	if strings.Contains(page, "`") {
		t.Error("the reference shows a backtick: a code span was not rendered")
	}
	for _, want := range []string{
		`<h2 id="authentication">Authentication</h2>`, "<code>Authorization: Bearer &lt;key&gt;</code>",
		`yours look like <code>upk_…</code>`,
		`<code id="quickstart-curl">curl -sS -X POST https://api.test/api/v1/upscale -H &#34;Authorization: Bearer $API_KEY&#34;`,
		`&#34;imageUrl&#34;:&#34;` + s.origin + `/square.png&#34;`,
		`&#34;via&#34;: &#34;free_pool&#34;`, // the 200 answer's example
		`<td><code>RateLimit-Policy</code></td>`, `<td><code>resizedTo</code> <span class="required">required</span></td>`,
		`One of: <code>2, 4, 8, 16, null</code>`,
		"is answered 405 <code>method_not_allowed</code>",
		`<tr><td><code>429</code></td><td><code>quota_exhausted</code> <code>rate_limited</code> </td>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the reference lacks %q", want)
		}
	}
	if strings.Contains(page, "nil") || strings.Contains(page, `id="get-api-v1-upscale"`) || strings.Contains(page, `id="put-api-v1-upscale-jobs-id"`) {
		t.Error("the reference shows <nil>, or a section for a method that is only refused")
	}
	errors := page[strings.Index(page, `<h2 id="errors">`):]
	for _, code := range upscale.ProblemCodes() {
		if !strings.Contains(errors, "<code>"+code+"</code> ") {
			t.Errorf("the error table lacks %s", code)
		}
	}
	_, made, _ := s.do("POST", "/keys", "acme", url.Values{"name": {"for the reference"}})
	key := regexp.MustCompile(`<code id="new-key">(upk_[a-z0-9]+)</code>`).FindStringSubmatch(made)[1]
	if _, page, _ := s.do("GET", "/reference", "acme", nil); !strings.Contains(page, "yours look like <code>"+upscale.KeyHint(key)+"</code>") {
		t.Errorf("signed in, the quickstart does not show the account's key's hint %s", upscale.KeyHint(key))
	}
	status, yaml, header := s.do("GET", "/reference/openapi.yaml", "", nil)
	if status != http.StatusOK || !strings.HasPrefix(yaml, "openapi: 3.1.0") || header.Get("Content-Type") != "application/yaml" {
		t.Errorf("the document: %d %q", status, header.Get("Content-Type"))
	}
}

func TestTry(t *testing.T) {
	s := newSite(t, upscaletest.NewClock(start))
	status, page, _ := s.do("GET", "/try", "acme", nil)
	sample := s.origin + "/square.png"
	if status != http.StatusOK || !strings.Contains(page, `value="`+sample+`" checked`) || !strings.Contains(page, "uses one image of your quota") ||
		!strings.Contains(page, `<option value="2" selected>×2</option>`) || !strings.Contains(page, "<option selected>photo</option>") || !strings.Contains(page, "<option selected>max</option>") {
		t.Fatalf("the Try it page: %d\n%s", status, page)
	}
	status, page, header := s.do("POST", "/try", "acme", url.Values{"sample": {sample}, "scale": {"4"}, "imageType": {"anime"}, "denoise": {"low"}})
	result := regexp.MustCompile(`<img id="result-image" src="(http://results\.test/outputs/[^"]+)"`).FindStringSubmatch(page)
	if status != http.StatusOK || result == nil || !strings.Contains(page, "Paid by <code>free_pool</code>") {
		t.Fatalf("try a sample: %d\n%s", status, page)
	}
	if csp := header.Get("Content-Security-Policy"); !strings.Contains(csp, "img-src 'self' data: "+s.origin+" http://results.test;") {
		t.Errorf("the result's CSP %q does not let the page show the source and the result", csp)
	}
	curl := html.UnescapeString(regexp.MustCompile(`<code id="curl">([^<]+)</code>`).FindStringSubmatch(page)[1])
	if want := `curl -sS -X POST https://api.test/api/v1/upscale -H "Authorization: Bearer $API_KEY" -H 'Content-Type: application/json' -d '{"imageUrl":"` + sample + `","scale":4,"imageType":"anime","denoise":"low"}'`; curl != want {
		t.Errorf("the curl command:\n%s\nwant\n%s", curl, want)
	}
	if b, _ := s.ledger.Balance(context.Background(), "acme"); b.Free != 9 {
		t.Errorf("free images left %d, want 9: one charged", b.Free)
	}
	// A refused image: the problem, and no charge.
	status, page, _ = s.do("POST", "/try", "acme", url.Values{"imageUrl": {"ftp://example.com/a.png"}, "scale": {"2"}, "imageType": {"photo"}, "denoise": {"max"}})
	if status != http.StatusBadRequest || !strings.Contains(page, "<code>invalid_image_url</code>") || !strings.Contains(page, "Nothing was charged") ||
		!strings.Contains(page, `name="imageUrl" type="url" placeholder="https://example.com/photo.jpg" value="ftp://example.com/a.png"`) || strings.Contains(page, "buy-link") {
		t.Errorf("try a bad address: %d, want the problem and the address kept in its field\n%s", status, page)
	}
	if b, _ := s.ledger.Balance(context.Background(), "acme"); b.Free != 9 {
		t.Errorf("free images left %d after a refusal, want 9", b.Free)
	}
}

// TestTryFormat: Try it asks for the format chosen, keeps it chosen, and
// its curl command sends it.
func TestTryFormat(t *testing.T) {
	s := newSite(t, upscaletest.NewClock(start))
	status, page, _ := s.do("POST", "/try", "acme", url.Values{"sample": {s.origin + "/square.png"}, "scale": {"2"}, "imageType": {"photo"}, "denoise": {"max"}, "format": {"webp"}})
	if status != http.StatusOK || !strings.Contains(page, "<option selected>webp</option>") || !strings.Contains(page, `&#34;format&#34;:&#34;webp&#34;`) {
		t.Errorf("Try it with format webp: %d\n%s", status, page)
	}
}

// TestTryLeadsToBuying: a problem the API answers with a buyUrl (out of
// images, where the host sells) links there from Try it.
func TestTryLeadsToBuying(t *testing.T) {
	spent := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusTooManyRequests)
		json.NewEncoder(w).Encode(upscale.Problem{Type: "urn:upscale:error:quota_exhausted", Title: "Quota exhausted", Status: http.StatusTooManyRequests,
			Code: "quota_exhausted", Detail: "This account has no images left this month.", BuyURL: "https://app.test/dashboard/billing"})
	})
	s := newSite(t, upscaletest.NewClock(start), func(c *dashboard.Config) { c.API = spent })
	status, page, _ := s.do("POST", "/try", "acme", url.Values{"sample": {s.origin + "/square.png"}, "scale": {"2"}, "imageType": {"photo"}, "denoise": {"max"}})
	if status != http.StatusTooManyRequests || !strings.Contains(page, `<a href="https://app.test/dashboard/billing" id="buy-link">Buy images or a plan</a>`) {
		t.Errorf("Try it out of images: %d, want a link to buy\n%s", status, page)
	}
}

// TestTryCurlIsShellSafe runs Try it's curl command through sh, with curl
// a function that keeps its arguments: whatever the image's and the API's
// addresses hold, curl gets them as they are, the key from the
// environment, and nothing else runs.
func TestTryCurlIsShellSafe(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh to run the command with")
	}
	hostile := []string{
		`https://example.com/a'b.png`,
		`https://example.com/'; touch pwned; '.png`,
		`https://example.com/$(touch pwned).png`,
		"https://example.com/`touch pwned`.png",
		`https://example.com/a\'b;touch pwned;\\.png`,
		`https://example.com/'"'"'$(touch pwned)'\''.png`,
		`https://example.com/$API_KEY%20.png`,
		"https://example.com/a b|touch pwned&.png",
	}
	if _, err := dashboard.New(dashboard.Config{Account: func(*http.Request) string { return "acme" }, Keys: upscale.NewMemoryKeyStore(),
		Ledger: upscale.NewMemoryLedger(upscale.LedgerOptions{}), API: http.NotFoundHandler(), APIURL: "https://api.test/a\nb"}); err == nil {
		t.Error("New accepted an APIURL that is no URL, which Try it cannot call")
	}
	images := append([]string{"https://example.com/a.png", "https://example.com/a\n'\ntouch pwned\n'.png"}, hostile...)
	apis := append([]string{"https://api.test/api/v1/upscale"}, hostile...)
	for _, api := range apis {
		d, err := dashboard.New(dashboard.Config{
			Account: func(*http.Request) string { return "acme" },
			Keys:    upscale.NewMemoryKeyStore(), Ledger: upscale.NewMemoryLedger(upscale.LedgerOptions{}),
			API: http.NotFoundHandler(), APIURL: api, Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, image := range images {
			form := url.Values{"imageUrl": {image}, "scale": {"2"}, "imageType": {"photo"}, "denoise": {"max"}}
			req := httptest.NewRequest(http.MethodPost, "/try", strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			w := httptest.NewRecorder()
			d.ServeHTTP(w, req)
			code := regexp.MustCompile(`<code id="curl">([^<]+)</code>`).FindStringSubmatch(w.Body.String())
			if code == nil {
				t.Fatalf("no curl command for API %q, image %q:\n%s", api, image, w.Body)
			}
			curl := html.UnescapeString(code[1])
			got := runCurl(t, sh, curl)
			want := []string{"-sS", "-X", "POST", api, "-H", "Authorization: Bearer upk_from_env", "-H", "Content-Type: application/json", "-d"}
			if len(got) != len(want)+1 || !slices.Equal(got[:len(want)], want) {
				t.Errorf("API %q, image %q: the command\n%s\ngave curl %q; want %q and the body", api, image, curl, got, want)
				continue
			}
			var body client.Request
			if err := json.Unmarshal([]byte(got[len(want)]), &body); err != nil || body != (client.Request{ImageURL: image, Scale: 2, ImageType: "photo", Denoise: "max"}) {
				t.Errorf("API %q, image %q: curl's body %q, %v; want the request for the image", api, image, got[len(want)], err)
			}
		}
	}
}

// runCurl runs command in sh, in a directory of its own, with curl a
// function that writes its arguments to files, and returns them. It
// fails t when the command wrote anything else there.
func runCurl(t *testing.T, sh, command string) []string {
	t.Helper()
	dir := t.TempDir()
	args := filepath.Join(dir, "args")
	if err := os.Mkdir(args, 0o700); err != nil {
		t.Fatal(err)
	}
	stub := `curl() { n=0; for a in "$@"; do n=$((n+1)); printf %s "$a" > "$ARGS/$n"; done; }`
	cmd := exec.Command(sh, "-c", stub+"\n"+command)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "API_KEY=upk_from_env", "ARGS="+args)
	if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("sh -c %q: %v\n%s", command, err, out)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the command %q wrote %v beside curl's arguments: it ran something else", command, entries)
	}
	var got []string
	for n := 1; ; n++ {
		arg, err := os.ReadFile(filepath.Join(args, strconv.Itoa(n)))
		if err != nil {
			return got
		}
		got = append(got, string(arg))
	}
}
