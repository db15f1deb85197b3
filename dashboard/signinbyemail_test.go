package dashboard_test

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/accounts"
	"github.com/upscalekit/upscale/dashboard"
	"github.com/upscalekit/upscale/upscaletest"
)

// mailbox is a Mailer that keeps what it is sent, and is unavailable
// while down, counting the tries it refused so.
type mailbox struct {
	mu      sync.Mutex
	sent    []accounts.Mail
	down    atomic.Bool
	refused atomic.Int64
}

func (m *mailbox) Send(_ context.Context, mail accounts.Mail) error {
	if m.down.Load() {
		m.refused.Add(1)
		return fmt.Errorf("%w: the mail server is down", upscale.ErrUnavailable)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sent = append(m.sent, mail)
	return nil
}

// to returns the mail sent to address so far.
func (m *mailbox) to(address string) []accounts.Mail {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []accounts.Mail
	for _, mail := range m.sent {
		if mail.To == address {
			out = append(out, mail)
		}
	}
	return out
}

// count returns how many mails were sent so far, to any address.
func (m *mailbox) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sent)
}

// await waits up to 15 s for the nth mail to address, and returns it.
func (m *mailbox) await(t *testing.T, address string, n int) accounts.Mail {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if got := m.to(address); len(got) >= n {
			return got[n-1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d mails to %s after 15 s, want %d", len(m.to(address)), address, n)
		}
	}
}

// emailSite is a dashboard whose sign-in page mails links, and a browser.
type emailSite struct {
	t         *testing.T
	clock     *upscaletest.Clock
	bonus     *accounts.ShareBonus
	base      string
	browser   *http.Client
	mail      *mailbox
	directory *accounts.MemoryDirectory
	ledger    *upscale.MemoryLedger
	signIn    *dashboard.SignIn
}

var freePlan = upscale.Plan{Name: "free", MonthlyImages: 10, MaxFileBytes: 10 << 20}

// siteOptions change what newEmailSite makes: its EmailOptions, whether
// it has a ShareBonus (PerSignup 5, MonthlyCap 10), and where the
// dashboard logs (nowhere when nil).
type siteOptions struct {
	email      func(*dashboard.EmailOptions)
	shareBonus bool
	log        slog.Handler
	brand      dashboard.Brand
}

// newEmailSite returns an emailSite that opens accounts when signUps; the
// client address of a request is its X-Client header.
func newEmailSite(t *testing.T, signUps bool, options ...siteOptions) *emailSite {
	t.Helper()
	clock := upscaletest.NewClock(start)
	ledger := upscale.NewMemoryLedger(upscale.LedgerOptions{Now: clock.Now})
	directory := accounts.NewMemoryDirectory(accounts.MemoryDirectoryOptions{Ledger: ledger, Now: clock.Now})
	mail := &mailbox{}
	outbox := accounts.NewMemoryOutbox(accounts.MemoryOutboxOptions{Mailer: mail, Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		outbox.Close(ctx)
	})
	mux := http.NewServeMux()
	server := httptest.NewServer(mux)
	t.Cleanup(server.Close)
	email := &dashboard.EmailOptions{Directory: directory, Outbox: outbox, SignUps: signUps, Plan: freePlan}
	var bonus *accounts.ShareBonus
	log := slog.DiscardHandler
	var brand dashboard.Brand
	for _, o := range options {
		if o.email != nil {
			o.email(email)
		}
		if o.shareBonus {
			var err error
			if bonus, err = accounts.NewShareBonus(accounts.ShareBonusOptions{Directory: directory, Ledger: ledger, PerSignup: 5, MonthlyCap: 10, Now: clock.Now}); err != nil {
				t.Fatal(err)
			}
		}
		if o.log != nil {
			log = o.log
		}
		brand = cmp.Or(o.brand, brand)
	}
	signIn, err := dashboard.NewSignIn(dashboard.SignInOptions{
		Secret: secret, BaseURL: server.URL + "/dashboard/", Now: clock.Now,
		ClientAddress: func(r *http.Request) string { return r.Header.Get("X-Client") },
		Email:         email,
	})
	if err != nil {
		t.Fatal(err)
	}
	d, err := dashboard.New(dashboard.Config{SignIn: signIn, Keys: upscale.NewMemoryKeyStore(), Ledger: ledger, ShareBonus: bonus, Brand: brand, Now: clock.Now, Logger: slog.New(log)})
	if err != nil {
		t.Fatal(err)
	}
	mux.Handle("/dashboard/", http.StripPrefix("/dashboard", d))
	front, err := d.Storefront(dashboard.StorefrontOptions{Dashboard: "/dashboard/"})
	if err != nil {
		t.Fatal(err)
	}
	mux.Handle("GET /{$}", front)
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &emailSite{t: t, clock: clock, bonus: bonus, base: server.URL + "/dashboard/", browser: browser, mail: mail, directory: directory, ledger: ledger, signIn: signIn}
}

// do sends a same-origin request from client, and returns the answer with
// its body read.
func (s *emailSite) do(method, u, client string, form url.Values) (*http.Response, string) {
	s.t.Helper()
	req, _ := http.NewRequest(method, u, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.Header.Set("X-Client", client)
	resp, err := s.browser.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// ask asks for a link for email, from client.
func (s *emailSite) ask(email, client string) (*http.Response, string) {
	return s.do(http.MethodPost, s.base+"signin/email", client, url.Values{"email": {email}})
}

// follow opens the link in m, presses its button, and returns the POST's
// answer and the link's page.
func (s *emailSite) follow(m accounts.Mail) (*http.Response, string) {
	s.t.Helper()
	link := regexp.MustCompile(`https?://\S+`).FindString(m.Text)
	if link == "" || !strings.Contains(m.HTML, `href="`+strings.ReplaceAll(link, "&", "&amp;")+`"`) {
		s.t.Fatalf("no link in the mail, or not the same in its text and its HTML: %+v", m)
	}
	status, page := s.do(http.MethodGet, link, "browser", nil)
	token := regexp.MustCompile(`name="token" value="([^"]+)"`).FindStringSubmatch(page)
	if status.StatusCode != http.StatusOK || token == nil {
		s.t.Fatalf("the link's page: %d\n%s", status.StatusCode, page)
	}
	resp, _ := s.do(http.MethodPost, s.base+"signin", "browser", url.Values{"token": {token[1]}})
	return resp, page
}

// overview returns the overview page as the browser sees it.
func (s *emailSite) overview() (int, string) {
	resp, page := s.do(http.MethodGet, s.base, "browser", nil)
	return resp.StatusCode, page
}

// TestSignUpByEmail: an address asks for a link, its mail opens its account
// on the plan with its free images and signs it in; asked again after
// signing out, the link signs the same account in; a used link fails.
func TestSignUpByEmail(t *testing.T) {
	s := newEmailSite(t, true)
	for _, path := range []string{"signin", "", "keys"} {
		if resp, page := s.do(http.MethodGet, s.base+path, "browser", nil); !strings.Contains(page, `signin/email"`) || !strings.Contains(page, "Sign in or create an account") {
			t.Fatalf("/dashboard/%s signed out (%d) offers no form to sign in or open an account by email:\n%s", path, resp.StatusCode, page)
		}
	}
	resp, page := s.ask("Ada@Example.com", "a")
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "a link is on its way") {
		t.Fatalf("asking for a link: %d\n%s", resp.StatusCode, page)
	}
	opening := s.mail.await(t, "ada@example.com", 1)
	if opening.Subject != "Open your upscale account" {
		t.Errorf("the first mail's subject %q, want the account's opening", opening.Subject)
	}
	resp, linkPage := s.follow(opening)
	if !strings.Contains(linkPage, "<strong>ada@example.com</strong>") || resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("following the link: %d\n%s", resp.StatusCode, linkPage)
	}
	account, err := s.directory.AccountOf(context.Background(), "ada@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if status, page := s.overview(); status != http.StatusOK || !strings.Contains(page, `<code id="account-id">`+account+"</code>") || !strings.Contains(page, "Signed in as <strong>ada@example.com</strong>") || !strings.Contains(page, `<span class="left">10</span>`) ||
		!strings.Contains(page, `id="first-key"`) {
		t.Fatalf("the overview after the link: %d, want the new account %s with its 10 free images, and how to make a first key\n%s", status, account, page)
	}
	// The used link works no more.
	if resp, _ := s.follow(opening); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the used link: %d, want 401", resp.StatusCode)
	}
	s.do(http.MethodPost, s.base+"signout", "browser", nil)
	s.clock.Advance(time.Second) // a session begun at a sign-out's instant is signed out of
	s.ask("ada@example.com", "a")
	signIn := s.mail.await(t, "ada@example.com", 2)
	if signIn.Subject != "Sign in to upscale" {
		t.Errorf("the second mail's subject %q, want a sign-in", signIn.Subject)
	}
	if resp, _ := s.follow(signIn); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("signing in again: %d", resp.StatusCode)
	}
	if _, page := s.overview(); !strings.Contains(page, `<code id="account-id">`+account+"</code>") || !strings.Contains(page, "Signed in as <strong>ada@example.com</strong>") {
		t.Errorf("signed in again, but not to %s as ada@example.com", account)
	}
}

// TestEmailAnswersAlike: an address with an account and one without get
// the same page, byte for byte but the address, whether accounts open or
// not; only the first gets a mail where they do not.
func TestEmailAnswersAlike(t *testing.T) {
	for _, signUps := range []bool{true, false} {
		t.Run(fmt.Sprintf("SignUps=%v", signUps), func(t *testing.T) {
			s := newEmailSite(t, signUps)
			if _, _, err := s.directory.OpenAccount(context.Background(), "known@example.com", freePlan, ""); err != nil {
				t.Fatal(err)
			}
			known, knownPage := s.ask("known@example.com", "a")
			unknown, unknownPage := s.ask("other@example.com", "b")
			if known.StatusCode != unknown.StatusCode || strings.ReplaceAll(knownPage, "known@", "other@") != unknownPage {
				t.Errorf("known: %d, unknown: %d; the pages differ:\n%s\n---\n%s", known.StatusCode, unknown.StatusCode, knownPage, unknownPage)
			}
			s.mail.await(t, "known@example.com", 1)
			if !signUps {
				for deadline := time.Now().Add(15 * time.Second); s.signIn.MailStats().NoAccount != 1; time.Sleep(10 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("MailStats %+v after 15 s; want the link for no account counted", s.signIn.MailStats())
					}
				} // decided: no mail follows
				if n := len(s.mail.to("other@example.com")); n != 0 {
					t.Errorf("with sign-ups closed, %d mails to an address without an account", n)
				}
				if _, err := s.directory.AccountOf(context.Background(), "other@example.com"); err == nil {
					t.Error("with sign-ups closed, an account was opened")
				}
			} else {
				s.mail.await(t, "other@example.com", 1)
			}
		})
	}
}

// TestEmailLinkLimits: the sixth link in an hour for one address is
// refused (429, Retry-After), whoever asks; so is the sixth from one
// client, whatever the address; a malformed address is a 400.
func TestEmailLinkLimits(t *testing.T) {
	s := newEmailSite(t, true)
	for i := range 5 {
		if resp, _ := s.ask("ada@example.com", fmt.Sprintf("client-%d", i)); resp.StatusCode != http.StatusOK {
			t.Fatalf("link %d: %d", i+1, resp.StatusCode)
		}
	}
	resp, page := s.ask("ada@example.com", "client-5")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !strings.Contains(page, `id="too-many-links"`) {
		t.Errorf("the sixth link for one address: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	for i := range 5 {
		s.ask(fmt.Sprintf("user%d@example.com", i), "busy")
	}
	if resp, _ := s.ask("user5@example.com", "busy"); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("the sixth link from one client: %d, want 429", resp.StatusCode)
	}
	// A client past its allowance spends nothing of an address's: it
	// cannot lock the address out.
	for range 6 {
		s.ask("victim@example.com", "busy")
	}
	if resp, _ := s.ask("victim@example.com", "victim"); resp.StatusCode != http.StatusOK {
		t.Errorf("the address's own link after another client was refused for it: %d, want 200", resp.StatusCode)
	}
	// An IPv6 client's allowance is its /64's.
	for i := range 5 {
		s.ask(fmt.Sprintf("v6-%d@example.com", i), fmt.Sprintf("2001:db8::%x", i+1))
	}
	if resp, _ := s.ask("v6-5@example.com", "2001:db8::ffff"); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a sixth link from another address of the same /64: %d, want 429", resp.StatusCode)
	}
	if resp, page := s.ask("not an address", "c"); resp.StatusCode != http.StatusBadRequest || !strings.Contains(page, "not an email address") {
		t.Errorf("a malformed address: %d\n%s", resp.StatusCode, page)
	}
}

// TestEmailLinkLimitsPerMailbox: the address's allowance is its
// mailbox's: +tags share it, and so do Gmail's dotted names at either of
// its domains, while dots elsewhere make other mailboxes; each link goes
// to the address as written.
func TestEmailLinkLimitsPerMailbox(t *testing.T) {
	s := newEmailSite(t, true)
	var allowed, want []string
	for i := range 100 {
		address := fmt.Sprintf("victim+%d@example.com", i)
		if i < 5 {
			want = append(want, address)
		}
		switch resp, _ := s.ask(address, fmt.Sprintf("client-%d", i)); resp.StatusCode {
		case http.StatusOK:
			allowed = append(allowed, address)
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("link %d, for %s: %d", i+1, address, resp.StatusCode)
		}
	}
	if !slices.Equal(allowed, want) {
		t.Fatalf("links allowed for one mailbox's +tags: %v; want the first five", allowed)
	}
	for _, address := range allowed {
		if m := s.mail.await(t, address, 1); m.To != address || m.Subject != "Open your upscale account" {
			t.Errorf("the link for %s: to %s, %q; want the address's own opening", address, m.To, m.Subject)
		}
	}
	for _, tc := range []struct {
		name, first, then string
		want              int
	}{
		{"GmailDots", "Bob.Smith@gmail.com", "bobsmith+x@googlemail.com", http.StatusTooManyRequests},
		{"OtherDots", "a.b@example.com", "ab@example.com", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range 5 {
				s.ask(tc.first, fmt.Sprintf("%s-%d", tc.name, i))
			}
			if resp, _ := s.ask(tc.then, tc.name+"-then"); resp.StatusCode != tc.want {
				t.Errorf("%s after five links for %s: %d, want %d", tc.then, tc.first, resp.StatusCode, tc.want)
			}
		})
	}
}

// budgetLogs is a slog.Handler that counts the records saying the mail
// budget is spent.
type budgetLogs struct{ n atomic.Int32 }

func (b *budgetLogs) Enabled(context.Context, slog.Level) bool { return true }
func (b *budgetLogs) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "mail budget is spent") {
		b.n.Add(1)
	}
	return nil
}
func (b *budgetLogs) WithAttrs([]slog.Attr) slog.Handler { return b }
func (b *budgetLogs) WithGroup(string) slog.Handler      { return b }

// TestMailBudget: past MailsPerHour, links are asked for and answered
// as ever, from every client and for every address, but not mailed; they
// are counted, and logged once an hour; the budget refills over the hour.
func TestMailBudget(t *testing.T) {
	log := &budgetLogs{}
	s := newEmailSite(t, true, siteOptions{email: func(e *dashboard.EmailOptions) { e.MailsPerHour = 3 }, log: log})
	// ask asks for n links, each from a client of its own for an address
	// of its own, all answered as a link on its way.
	asked := 0
	ask := func(n int) {
		t.Helper()
		for range n {
			address := fmt.Sprintf("user%d@example.com", asked)
			if resp, page := s.ask(address, fmt.Sprintf("client-%d", asked)); resp.StatusCode != http.StatusOK || !strings.Contains(page, "a link is on its way") {
				t.Fatalf("link %d: %d, want 200 with a link on its way\n%s", asked+1, resp.StatusCode, page)
			}
			asked++
		}
	}
	// await waits for the stats, and for the mails posted to arrive.
	await := func(want dashboard.MailStats) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); s.signIn.MailStats() != want || s.mail.count() != int(want.Posted); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("MailStats %+v and %d mails after 15 s, want %+v", s.signIn.MailStats(), s.mail.count(), want)
			}
		}
	}
	ask(5)
	await(dashboard.MailStats{Posted: 3, OverBudget: 2})
	if n := log.n.Load(); n != 1 {
		t.Errorf("the spent budget logged %d times in its hour, want once", n)
	}
	s.clock.Advance(time.Hour)
	ask(4)
	await(dashboard.MailStats{Posted: 6, OverBudget: 3})
	if n := log.n.Load(); n != 2 {
		t.Errorf("the spent budget logged %d times in two hours, want twice", n)
	}
	budget := upscale.NewMemoryRateLimiter(upscale.MemoryRateLimiterOptions{PerSecond: 1, Burst: 1})
	for _, e := range []dashboard.EmailOptions{{MailsPerHour: -1}, {MailsPerHour: 3, Budget: budget}} {
		e.Directory, e.Outbox = s.directory, accounts.NewMemoryOutbox(accounts.MemoryOutboxOptions{Mailer: s.mail})
		if _, err := dashboard.NewSignIn(dashboard.SignInOptions{Secret: secret, BaseURL: s.base, Email: &e}); err == nil {
			t.Errorf("NewSignIn took MailsPerHour %d with Budget %v", e.MailsPerHour, e.Budget)
		}
	}
}

// TestMailServerDown: the page answers at once while the mail server is
// down, and the link is sent once it is back.
func TestMailServerDown(t *testing.T) {
	s := newEmailSite(t, true)
	s.mail.down.Store(true)
	if resp, _ := s.ask("ada@example.com", "a"); resp.StatusCode != http.StatusOK {
		t.Fatalf("asking with the server down: %d", resp.StatusCode)
	}
	for deadline := time.Now().Add(15 * time.Second); s.mail.refused.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no try to send while the server was down, after 15 s")
		}
	}
	s.mail.down.Store(false)
	if m := s.mail.await(t, "ada@example.com", 1); m.Subject != "Open your upscale account" {
		t.Errorf("sent once the server was back: %+v", m)
	}
}

// TestOpensPerDay: past the day's cap, a link that would open an account
// answers 429 until the next day, and is not spent; an address that has
// an account still signs in.
func TestOpensPerDay(t *testing.T) {
	s := newEmailSite(t, true, siteOptions{email: func(e *dashboard.EmailOptions) { e.OpensPerDay = 1 }})
	s.ask("first@example.com", "a")
	if resp, _ := s.follow(s.mail.await(t, "first@example.com", 1)); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the day's first account: %d", resp.StatusCode)
	}
	s.ask("second@example.com", "b")
	resp, _ := s.follow(s.mail.await(t, "second@example.com", 1))
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "43200" {
		t.Errorf("past the cap: %d, Retry-After %q; want 429 until midnight UTC (12 h)", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if _, err := s.directory.AccountOf(context.Background(), "second@example.com"); err == nil {
		t.Error("an account was opened past the cap")
	}
	s.ask("first@example.com", "c")
	if resp, _ := s.follow(s.mail.await(t, "first@example.com", 2)); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("an address with an account, past the cap: %d, want signed in", resp.StatusCode)
	}
}

// TestShareLink: an account's overview shows its share link; an address
// that opens its account through it is brought by that account, which
// earns its share bonus once the new account has used its first image,
// once however often Pay runs, and never past the month's cap.
func TestShareLink(t *testing.T) {
	ctx := context.Background()
	s := newEmailSite(t, true, siteOptions{shareBonus: true})
	site, bonus := s, s.bonus
	sharer, _, err := s.directory.OpenAccount(ctx, "sharer@example.com", freePlan, "")
	if err != nil {
		t.Fatal(err)
	}
	code, _ := s.directory.ShareCode(ctx, sharer)
	s.clock.Advance(time.Second) // Opened lists by time: the sharer first
	for i := range 3 {
		invited := fmt.Sprintf("invited%d@example.com", i)
		_, page := site.do(http.MethodGet, site.base+"signup?ref="+code, "browser", nil)
		if !strings.Contains(page, `name="ref" value="`+code+`"`) || !strings.Contains(page, "your account comes with 10 free images every month, and once you use your first, the friend who shared this link earns 5 images.") {
			t.Fatalf("the share link's page does not send the code on:\n%s", page)
		}
		site.do(http.MethodPost, site.base+"signin/email", fmt.Sprintf("c%d", i), url.Values{"email": {invited}, "ref": {code}})
		if resp, _ := site.follow(s.mail.await(t, invited, 1)); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("opening %s: %d", invited, resp.StatusCode)
		}
		site.do(http.MethodPost, site.base+"signout", "browser", nil)
		s.clock.Advance(time.Second)
	}
	opened, _ := s.directory.Opened(ctx, start)
	if len(opened) != 4 || opened[1].Referrer != sharer || opened[2].Referrer != sharer {
		t.Fatalf("opened %+v; want the three invited brought by %s", opened, sharer)
	}
	if paid, err := bonus.Pay(ctx); err != nil || paid != 0 {
		t.Errorf("Pay before any image: %d, %v; want none", paid, err)
	}
	for _, e := range opened[1:] {
		for range 2 { // a request retried charges once, and pays once
			r, err := s.ledger.Reserve(ctx, e.AccountID, false)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.ledger.Commit(ctx, r.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	if paid, err := bonus.Pay(ctx); err != nil || paid != 2 {
		t.Errorf("Pay after their images: %d, %v; want 2 (the third past the cap of 10)", paid, err)
	}
	if paid, err := bonus.Pay(ctx); err != nil || paid != 0 {
		t.Errorf("Pay again: %d, %v; want none", paid, err)
	}
	if b, _ := s.ledger.Balance(ctx, sharer); b.ShareBonus != 10 {
		t.Errorf("the sharer's share bonus %d, want 10", b.ShareBonus)
	}
	// The sharer signs in through its own link: nothing opens, nothing
	// is earned; its overview shows its link and what it earned.
	site.do(http.MethodPost, site.base+"signin/email", "sharer", url.Values{"email": {"sharer@example.com"}, "ref": {code}})
	site.follow(s.mail.await(t, "sharer@example.com", 1))
	if again, _ := s.directory.Opened(ctx, start); len(again) != 4 {
		t.Errorf("the sharer's own link opened %d accounts, want none", len(again)-4)
	}
	if paid, _ := bonus.Pay(ctx); paid != 0 {
		t.Errorf("the sharer's own link earned %d payments, want none", paid)
	}
	_, page := site.do(http.MethodGet, site.base, "browser", nil)
	if !strings.Contains(page, `<code id="share-link">`+site.base+"signup?ref="+code+"</code>") || !strings.Contains(page, `<strong id="share-earned">10</strong>`) {
		t.Errorf("the sharer's overview:\n%s", page)
	}
}

// BenchmarkEmailLinkAnswer measures the answer to a link asked for an
// address with an account and for one without: the lookup and the mail
// come after the answer, so the two take the same time.
//
//	go test -run '^$' -bench EmailLinkAnswer -count 6 ./dashboard
func BenchmarkEmailLinkAnswer(b *testing.B) {
	ledger := upscale.NewMemoryLedger(upscale.LedgerOptions{})
	directory := accounts.NewMemoryDirectory(accounts.MemoryDirectoryOptions{Ledger: ledger})
	if _, _, err := directory.OpenAccount(context.Background(), "known@example.com", freePlan, ""); err != nil {
		b.Fatal(err)
	}
	outbox := accounts.NewMemoryOutbox(accounts.MemoryOutboxOptions{Mailer: &mailbox{}, Logger: slog.New(slog.DiscardHandler)})
	defer outbox.Close(context.Background())
	unlimited := upscale.NewMemoryRateLimiter(upscale.MemoryRateLimiterOptions{PerSecond: 1e9, Burst: 1 << 30})
	signIn, err := dashboard.NewSignIn(dashboard.SignInOptions{Secret: secret, BaseURL: "https://upscale.example/dashboard/",
		Email: &dashboard.EmailOptions{Directory: directory, Outbox: outbox, SignUps: true, Plan: freePlan, Limit: unlimited}})
	if err != nil {
		b.Fatal(err)
	}
	d, err := dashboard.New(dashboard.Config{SignIn: signIn, Keys: upscale.NewMemoryKeyStore(), Ledger: ledger, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	for _, email := range []string{"known@example.com", "other@example.com"} {
		b.Run(strings.SplitN(email, "@", 2)[0], func(b *testing.B) {
			body := url.Values{"email": {email}}.Encode()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/signin/email", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				req.Header.Set("Sec-Fetch-Site", "same-origin")
				w := httptest.NewRecorder()
				d.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("%d", w.Code)
				}
			}
		})
	}
}
