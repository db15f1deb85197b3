package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/accounts"
	"github.com/upscalekit/upscale/dashboard"
	"github.com/upscalekit/upscale/upscaletest"
)

var secret = []byte("0123456789abcdef0123456789abcdef")

// linkSite is a dashboard that signs in with links, mounted at
// /dashboard/, and a browser (a client with cookies) to use it.
type linkSite struct {
	t       *testing.T
	signIn  *dashboard.SignIn
	keys    *upscale.MemoryKeyStore
	base    string
	browser *http.Client
}

// newLinkSite returns a linkSite on clock whose SignIn keeps sign-outs in
// sessions (nil for its default).
func newLinkSite(t *testing.T, clock *upscaletest.Clock, sessions accounts.SessionStore) *linkSite {
	t.Helper()
	ledger := upscale.NewMemoryLedger(upscale.LedgerOptions{Now: clock.Now})
	if err := ledger.PutAccount(context.Background(), upscale.Account{ID: "acme", Plan: upscale.Plan{Name: "free", MonthlyImages: 10}}); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	server := httptest.NewServer(mux)
	t.Cleanup(server.Close)
	signIn, err := dashboard.NewSignIn(dashboard.SignInOptions{Secret: secret, BaseURL: server.URL + "/dashboard/", Sessions: sessions, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	keys := upscale.NewMemoryKeyStore()
	d, err := dashboard.New(dashboard.Config{SignIn: signIn, Keys: keys, Ledger: ledger, Now: clock.Now, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	mux.Handle("/dashboard/", http.StripPrefix("/dashboard", d))
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &linkSite{t: t, signIn: signIn, keys: keys, base: server.URL + "/dashboard/", browser: browser}
}

// copy returns the site in another browser, given a copy of this one's
// cookies, as whoever copied them would use them.
func (s *linkSite) copy() *linkSite {
	jar, _ := cookiejar.New(nil)
	u, _ := url.Parse(s.base)
	jar.SetCookies(u, s.browser.Jar.Cookies(u))
	other := *s
	other.browser = &http.Client{Jar: jar, CheckRedirect: s.browser.CheckRedirect}
	return &other
}

// get fetches a URL with the browser.
func (s *linkSite) get(u string) (int, string) {
	s.t.Helper()
	resp, err := s.browser.Get(u)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// post sends a same-origin form to path under the dashboard.
func (s *linkSite) post(path string, form url.Values) *http.Response {
	s.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := s.browser.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// signIn opens link and presses its button, and returns the POST's answer.
func (s *linkSite) signInWith(link string) *http.Response {
	s.t.Helper()
	status, page := s.get(link)
	token := regexp.MustCompile(`name="token" value="([^"]+)"`).FindStringSubmatch(page)
	if status != http.StatusOK || token == nil || !strings.Contains(page, "<strong>acme</strong>") {
		s.t.Fatalf("the link's page: %d\n%s", status, page)
	}
	return s.post("signin", url.Values{"token": {token[1]}})
}

// signedIn reports whether the overview shows acme's balance.
func (s *linkSite) signedIn() bool {
	s.t.Helper()
	status, page := s.get(s.base)
	return status == http.StatusOK && strings.Contains(page, `<span class="left">10</span>`)
}

func TestSignInLink(t *testing.T) {
	clock := upscaletest.NewClock(start)
	s := newLinkSite(t, clock, nil)
	if s.signedIn() {
		t.Fatal("signed in before any link")
	}
	link, err := s.signIn.Link("acme")
	if err != nil || !strings.HasPrefix(link, s.base+"signin?token=") {
		t.Fatalf("Link = %q, %v", link, err)
	}
	// Opening the link spends nothing: a scanner's fetch leaves it working.
	s.get(link)
	resp := s.signInWith(link)
	cookie := resp.Header.Get("Set-Cookie")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "./" ||
		!strings.Contains(cookie, "HttpOnly") || !strings.Contains(cookie, "SameSite=Lax") || !strings.Contains(cookie, "Path=/dashboard/") || strings.Contains(cookie, "Secure") {
		t.Fatalf("sign in: %d, Location %q, Set-Cookie %q", resp.StatusCode, resp.Header.Get("Location"), cookie)
	}
	if !s.signedIn() {
		t.Fatal("not signed in after the link")
	}
	// Used once: the same link no longer signs in, from any browser.
	other := newLinkSite(t, clock, nil)
	other.signIn, other.base = s.signIn, s.base
	if status, page := other.get(link); status != http.StatusOK || !strings.Contains(page, "Sign in") {
		t.Fatalf("the used link's page: %d", status)
	}
	if resp := other.post("signin", url.Values{"token": {strings.TrimPrefix(link, s.base+"signin?token=")}}); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a used link: %d, want 401", resp.StatusCode)
	}
	// Sign out.
	if resp := s.post("signout", nil); resp.StatusCode != http.StatusSeeOther || !strings.Contains(resp.Header.Get("Set-Cookie"), "Max-Age=0") {
		t.Errorf("sign out: %d, Set-Cookie %q", resp.StatusCode, resp.Header.Get("Set-Cookie"))
	}
	if s.signedIn() {
		t.Error("still signed in after signing out")
	}
}

func TestSignInLinkRefusals(t *testing.T) {
	clock := upscaletest.NewClock(start)
	s := newLinkSite(t, clock, nil)
	expired, _ := s.signIn.Link("acme")
	clock.Advance(15*time.Minute + time.Second)
	forger, _ := dashboard.NewSignIn(dashboard.SignInOptions{Secret: []byte(strings.Repeat("x", 32)), BaseURL: s.base, Now: clock.Now})
	forged, _ := forger.Link("acme")
	fresh, _ := s.signIn.Link("acme")
	broken := fresh[:len(fresh)-3]
	var answers []string
	for _, link := range []string{expired, forged, broken} {
		status, page := s.get(link)
		if status != http.StatusUnauthorized || strings.Contains(page, "acme") {
			t.Errorf("the page of a link that does not work: %d\n%s", status, page)
		}
		answers = append(answers, page)
		token := strings.TrimPrefix(link, s.base+"signin?token=")
		if resp := s.post("signin", url.Values{"token": {token}}); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("POST of a link that does not work: %d", resp.StatusCode)
		}
	}
	if answers[0] != answers[1] || answers[1] != answers[2] {
		t.Error("expired, forged and broken links are told apart")
	}
	if s.signedIn() {
		t.Error("signed in by a link that does not work")
	}
	// A cross-site POST of a good link is refused.
	req, _ := http.NewRequest(http.MethodPost, s.base+"signin", strings.NewReader(url.Values{"token": {strings.TrimPrefix(fresh, s.base+"signin?token=")}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := s.browser.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || s.signedIn() {
		t.Errorf("a cross-site sign-in: %d, want 403", resp.StatusCode)
	}
}

func TestSessionExpiry(t *testing.T) {
	clock := upscaletest.NewClock(start)
	s := newLinkSite(t, clock, nil)
	link, _ := s.signIn.Link("acme")
	s.signInWith(link)
	// Used every 50 minutes, the session lasts its 12 hours, no more.
	for elapsed := 50 * time.Minute; elapsed < 12*time.Hour; elapsed += 50 * time.Minute {
		clock.Advance(50 * time.Minute)
		if !s.signedIn() {
			t.Fatalf("signed out %v after signing in, though used every 50 minutes", elapsed)
		}
	}
	clock.Advance(50 * time.Minute)
	if s.signedIn() {
		t.Error("signed in past the session's 12 hours")
	}
	// Idle for an hour, a session ends.
	link, _ = s.signIn.Link("acme")
	s.signInWith(link)
	clock.Advance(59 * time.Minute)
	if !s.signedIn() {
		t.Fatal("signed out after 59 idle minutes")
	}
	clock.Advance(time.Hour)
	if s.signedIn() {
		t.Error("signed in after an idle hour")
	}
}

func TestSecureCookieBehindHTTPS(t *testing.T) {
	signIn, err := dashboard.NewSignIn(dashboard.SignInOptions{Secret: secret, BaseURL: "https://example.com/account"})
	if err != nil {
		t.Fatal(err)
	}
	if link, _ := signIn.Link("acme"); !strings.HasPrefix(link, "https://example.com/account/signin?token=") {
		t.Errorf("link %q", link)
	}
	d, err := dashboard.New(dashboard.Config{SignIn: signIn, Keys: upscale.NewMemoryKeyStore(), Ledger: upscale.NewMemoryLedger(upscale.LedgerOptions{})})
	if err != nil {
		t.Fatal(err)
	}
	link, _ := signIn.Link("acme")
	req := httptest.NewRequest(http.MethodPost, "/signin", strings.NewReader("token="+strings.TrimPrefix(link, "https://example.com/account/signin?token=")))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	w := httptest.NewRecorder()
	d.ServeHTTP(w, req)
	if cookie := w.Header().Get("Set-Cookie"); w.Code != http.StatusSeeOther || !strings.Contains(cookie, "Secure") || !strings.Contains(cookie, "Path=/account/") {
		t.Errorf("sign in behind https: %d, Set-Cookie %q; want Secure, Path=/account/", w.Code, cookie)
	}
	for _, opts := range []dashboard.SignInOptions{{Secret: secret[:31], BaseURL: "https://example.com/"}, {Secret: secret, BaseURL: "/dashboard/"}} {
		if _, err := dashboard.NewSignIn(opts); err == nil {
			t.Errorf("NewSignIn(%+v) accepted", opts)
		}
	}
}

// TestSignInAttemptsLimited: one address may try five sign-ins at once,
// then one every 12 seconds; past that it is told to wait, with
// Retry-After, and even a good link waits.
func TestSignInAttemptsLimited(t *testing.T) {
	clock := upscaletest.NewClock(start)
	s := newLinkSite(t, clock, nil)
	for i := range 5 {
		if resp := s.post("signin", url.Values{"token": {"forged"}}); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("attempt %d: %d, want 401", i+1, resp.StatusCode)
		}
	}
	link, _ := s.signIn.Link("acme")
	token := strings.TrimPrefix(link, s.base+"signin?token=")
	resp := s.post("signin", url.Values{"token": {token}})
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a sixth attempt: %d, Retry-After %q; want 429 and when to come back", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	clock.Advance(12 * time.Second)
	if resp := s.post("signin", url.Values{"token": {token}}); resp.StatusCode != http.StatusSeeOther || !s.signedIn() {
		t.Errorf("the good link 12 s later: %d, want it to sign in (the refused try did not spend it)", resp.StatusCode)
	}
}

// TestSignOutEndsCopiedSessions: signing out ends the session wherever
// its cookie was copied, also one begun in the same second (JWT keeps
// whole seconds), and a sign-in after it works, in that second too.
func TestSignOutEndsCopiedSessions(t *testing.T) {
	clock := upscaletest.NewClock(start) // on a whole second
	s := newLinkSite(t, clock, nil)
	clock.Advance(200 * time.Millisecond)
	link, _ := s.signIn.Link("acme")
	s.signInWith(link)
	copied := s.copy()
	if !copied.signedIn() {
		t.Fatal("the copied cookie is not signed in before signing out")
	}
	clock.Advance(400 * time.Millisecond) // in the second the session began
	if resp := s.post("signout", nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign out: %d", resp.StatusCode)
	}
	if copied.signedIn() {
		t.Error("the cookie copied before signing out still shows the account")
	}
	if resp := copied.post("keys", url.Values{"name": {"copied"}}); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("make a key with the copied cookie after signing out: %d, want 401", resp.StatusCode)
	}
	if keys, _ := s.keys.ListKeys(context.Background(), "acme"); len(keys) != 0 {
		t.Errorf("the copied cookie made a key after signing out: %+v", keys)
	}

	clock.Advance(200 * time.Millisecond) // still the same second
	link, _ = s.signIn.Link("acme")
	if resp := s.signInWith(link); resp.StatusCode != http.StatusSeeOther || !s.signedIn() {
		t.Fatalf("a sign-in after signing out, in the same second: %d, and not signed in", resp.StatusCode)
	}
	if copied.signedIn() {
		t.Error("the copied cookie works again after a new sign-in")
	}
	// Signing out with a session already ended ends nothing more.
	copied.post("signout", nil)
	if !s.signedIn() {
		t.Error("signing out with the ended copy ended the new session")
	}
}

// TestSignOutOfAnIdleSession: a session idled out is still signed out
// of, as its copy may have been kept busy.
func TestSignOutOfAnIdleSession(t *testing.T) {
	clock := upscaletest.NewClock(start)
	s := newLinkSite(t, clock, nil)
	link, _ := s.signIn.Link("acme")
	s.signInWith(link)
	copied := s.copy()
	for range 3 {
		clock.Advance(50 * time.Minute)
		if !copied.signedIn() {
			t.Fatal("the copy, used every 50 minutes, is signed out")
		}
	}
	if s.signedIn() {
		t.Fatal("the session idle for 150 minutes is signed in")
	}
	s.post("signout", nil)
	if copied.signedIn() {
		t.Error("the busy copy outlives signing out of the idle session")
	}
}

// sessionsSwitch is a SessionStore that counts what it is asked, and
// that can be cut off.
type sessionsSwitch struct {
	accounts.SessionStore
	down  atomic.Bool
	reads atomic.Int32
}

func (s *sessionsSwitch) SignOut(ctx context.Context, accountID string, at time.Time) error {
	if s.down.Load() {
		return fmt.Errorf("sessions: %w", upscale.ErrUnavailable)
	}
	return s.SessionStore.SignOut(ctx, accountID, at)
}

func (s *sessionsSwitch) SignedOutAt(ctx context.Context, accountID string) (time.Time, error) {
	s.reads.Add(1)
	if s.down.Load() {
		return time.Time{}, fmt.Errorf("sessions: %w", upscale.ErrUnavailable)
	}
	return s.SessionStore.SignedOutAt(ctx, accountID)
}

// TestSessionStoreAsked: a page asks the SessionStore once; when it
// cannot answer, pages answer 503 and make nothing, signing out keeps the
// cookie to try again, and the session works once the store is back.
func TestSessionStoreAsked(t *testing.T) {
	clock := upscaletest.NewClock(start)
	sessions := &sessionsSwitch{SessionStore: accounts.NewMemorySessions()}
	s := newLinkSite(t, clock, sessions)
	link, _ := s.signIn.Link("acme")
	s.signInWith(link)
	for path, want := range map[string]int32{"": 1, "keys": 1, "static/dashboard.css": 0} {
		sessions.reads.Store(0)
		s.get(s.base + path)
		if got := sessions.reads.Load(); got != want {
			t.Errorf("GET /%s asked the SessionStore %d times, want %d", path, got, want)
		}
	}

	sessions.down.Store(true)
	if status, page := s.get(s.base); status != http.StatusServiceUnavailable || strings.Contains(page, "acme") {
		t.Errorf("the overview while the SessionStore is down: %d\n%s", status, page)
	}
	if resp := s.post("keys", url.Values{"name": {"ci"}}); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("make a key while the SessionStore is down: %d, want 503", resp.StatusCode)
	}
	if keys, _ := s.keys.ListKeys(context.Background(), "acme"); len(keys) != 0 {
		t.Errorf("a key made while the SessionStore is down: %+v", keys)
	}
	if resp := s.post("signout", nil); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Set-Cookie") != "" {
		t.Errorf("sign out while the SessionStore is down: %d, Set-Cookie %q; want 503, the cookie kept", resp.StatusCode, resp.Header.Get("Set-Cookie"))
	}
	sessions.down.Store(false)
	if !s.signedIn() {
		t.Error("not signed in once the SessionStore is back")
	}
}
