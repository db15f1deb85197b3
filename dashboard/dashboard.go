// Package dashboard is the account pages the API's callers use: their
// balances and usage, their API keys, their webhook signing secret, a
// page to try the engine on their account, the API's reference, and,
// with a Seller, a Billing page to buy credits and plans. It is
// an http.Handler a host mounts behind its own sign-in, under any prefix
// (http.StripPrefix): Config.Account says who is signed in, and the pages
// read and change only that account, through the interfaces the handler
// already uses (KeyLister, QuotaLedger, UsageReporter, WebhookSecrets,
// the handler itself). A host without a sign-in of its own can use
// SignIn's one-time links, as the standalone does.
//
// Every page is rendered on the server and works without JavaScript
// (dashboard.js only adds copy buttons and the before/after slider).
// Every response carries a Content-Security-Policy without
// 'unsafe-inline' and with frame-ancestors 'none', and is not cached;
// every state change is a POST refused from another origin
// (http.CrossOriginProtection). A key or a secret is shown once, in the
// answer to the POST that made it, and never logged.
package dashboard

import (
	"bytes"
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/accounts"
	"github.com/upscalekit/upscale/api"
)

// Config configures a Dashboard. Keys, Ledger, and Account or SignIn are
// required; every other zero field means the default beside it.
type Config struct {
	// Account returns the account signed in for r, "" when none: the
	// host's sign-in, such as a session cookie it checks.
	Account func(r *http.Request) string
	// SignInURL is where a request without an account is sent (303).
	// Empty means a 401 page that says to sign in.
	SignInURL string
	// SignIn, when Account is nil, signs account holders in with one-time
	// links (the standalone's way), served at signin and signout.
	SignIn *SignIn
	// Keys lists, makes and revokes the account's keys. To revoke a key
	// at once on this replica, give the CachedKeyStore the handler uses.
	Keys upscale.KeyLister
	// Ledger gives the account's balances; when it is an UsageReporter,
	// the overview also charts what the account used.
	Ledger upscale.QuotaLedger
	// History, when set, gives the account a page of its latest calls,
	// requests and jobs: the Handler's Config.History.
	History upscale.CallHistory
	// WebhookSecrets, when set, gives the account a page to make or
	// rotate the secret that signs its webhooks, shown once, or to show
	// the ones that sign now.
	WebhookSecrets upscale.WebhookSecrets
	// WebhookLog, when set with WebhookSecrets, lists the account's
	// webhooks on that page with their attempts (the Handler's
	// Config.WebhookLog); WebhookTester lets it send a test event.
	WebhookLog    upscale.WebhookLog
	WebhookTester WebhookTester
	// ShareBonus, when set, shows each account its share link, which
	// opens accounts by email (SignIn's EmailOptions with SignUps), and
	// what it earned this month; the host runs its Pay.
	ShareBonus *accounts.ShareBonus
	// Seller, when set, gives the account a Billing page where it buys
	// credit packs and plans and manages its subscription; Ledger must
	// then be an upscale.BillingLedger, which the page reads the
	// subscription and the purchases from.
	Seller Seller
	// API is the API's handler (upscale.Handler, or its Middleware), through
	// which the Try it page runs images for the signed-in account. Nil
	// means no Try it page.
	API http.Handler
	// APIURL is the API's address as callers reach it, for the Try it
	// page's curl command. Empty means "/api/v1/upscale".
	APIURL string
	// Samples are the images the Try it page offers, the first chosen.
	Samples []Sample
	// Brand names the operator's product on every page and in every mail.
	Brand Brand
	// KeyPrefix starts every key the dashboard makes. Empty means "upk_".
	KeyPrefix string
	// Logger receives every action, never a key. Nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
}

// Dashboard serves the account pages.
type Dashboard struct {
	cfg    Config
	policy string // the pages' Content-Security-Policy
	// testEvents is each account's allowance of test webhooks.
	testEvents upscale.RateLimiter
	pages      map[string]*template.Template
	reference  reference
	handler    http.Handler
}

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// contentSecurityPolicy allows the pages' own styles, script and images
// only, and no framing.
const contentSecurityPolicy = "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self' data:; " +
	"form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

var templateFuncs = template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return t.UTC().Format("2 Jan 2006, 15:04 UTC")
	},
	"day":     func(t time.Time) string { return t.UTC().Format("2 January 2006") },
	"mod":     func(a, b int) int { return a % b },
	"add":     func(a, b int64) int64 { return a + b },
	"count":   count,
	"price":   Price,
	"each":    priceEach,
	"mb":      upscale.Megabytes,
	"seconds": seconds,
}

// count writes n with its thousands grouped, as a buyer reads an amount:
// "1,000".
func count(n int64) string {
	digits := strconv.FormatInt(n, 10)
	sign := ""
	if n < 0 {
		sign, digits = "-", digits[1:]
	}
	var b strings.Builder
	for i, d := range digits {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(d)
	}
	return sign + b.String()
}

// New returns a Dashboard for cfg.
func New(cfg Config) (*Dashboard, error) {
	switch {
	case cfg.Account == nil && cfg.SignIn == nil:
		return nil, errors.New("dashboard: Config.Account or Config.SignIn is required: it says who is signed in")
	case cfg.Keys == nil:
		return nil, errors.New("dashboard: Config.Keys is required")
	case cfg.Ledger == nil:
		return nil, errors.New("dashboard: Config.Ledger is required")
	}
	if _, ok := cfg.Ledger.(upscale.BillingLedger); cfg.Seller != nil && !ok {
		return nil, errors.New("dashboard: Config.Seller needs a Ledger that is an upscale.BillingLedger, which the Billing page reads")
	}
	if cfg.ShareBonus != nil && (cfg.SignIn == nil || cfg.SignIn.opts.Email == nil || !cfg.SignIn.opts.Email.SignUps) {
		return nil, errors.New("dashboard: Config.ShareBonus needs a SignIn whose EmailOptions open accounts (SignUps): a share link opens accounts")
	}
	brand, err := cfg.Brand.withDefaults()
	if err != nil {
		return nil, err
	}
	cfg.Brand = brand
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = "upk_"
	}
	if cfg.APIURL == "" {
		cfg.APIURL = "/api/v1/upscale"
	}
	if _, err := url.Parse(cfg.APIURL); err != nil {
		return nil, fmt.Errorf("dashboard: Config.APIURL: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	d := &Dashboard{cfg: cfg, pages: map[string]*template.Template{}}
	d.policy = withImagesFrom(contentSecurityPolicy, brand.logoOrigin())
	d.testEvents = upscale.NewMemoryRateLimiter(upscale.MemoryRateLimiterOptions{PerSecond: testEventsPerMinute / 60.0, Burst: testEventsPerMinute, Now: cfg.Now})
	if d.reference, err = loadReference(); err != nil {
		return nil, err
	}
	for _, page := range []string{"overview", "keys", "revoke", "signin", "notfound", "webhooks", "reference", "try", "billing", "storefront", "history"} {
		t, err := template.New("layout.html").Funcs(templateFuncs).ParseFS(templateFiles, "templates/layout.html", "templates/"+page+".html")
		if err != nil {
			return nil, fmt.Errorf("dashboard: %w", err)
		}
		d.pages[page] = t
	}
	static, err := fs.Sub(staticFiles, "static")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", d.signedIn(d.overview))
	mux.HandleFunc("GET /reference", d.referencePage)
	mux.HandleFunc("GET /reference/openapi.yaml", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		w.Write(api.OpenAPI)
	})
	mux.HandleFunc("GET /keys", d.signedIn(d.keys))
	mux.HandleFunc("POST /keys", d.signedIn(d.createKey))
	mux.HandleFunc("GET /keys/{id}/revoke", d.signedIn(d.confirmRevoke))
	mux.HandleFunc("POST /keys/{id}/revoke", d.signedIn(d.revokeKey))
	if cfg.API != nil {
		mux.HandleFunc("GET /try", d.signedIn(d.tryPage))
		mux.HandleFunc("POST /try", d.signedIn(d.try))
	}
	if cfg.History != nil {
		mux.HandleFunc("GET /history", d.signedIn(d.history))
	}
	if cfg.WebhookSecrets != nil {
		mux.HandleFunc("GET /webhooks", d.signedIn(d.webhooks))
		mux.HandleFunc("POST /webhooks", d.signedIn(d.rotateWebhookSecret))
		mux.HandleFunc("POST /webhooks/secrets", d.signedIn(d.showWebhookSecrets))
		if cfg.WebhookTester != nil {
			mux.HandleFunc("POST /webhooks/test", d.signedIn(d.sendTestWebhook))
		}
	}
	if cfg.Seller != nil {
		mux.HandleFunc("GET /billing", d.signedIn(d.billing))
		mux.HandleFunc("POST /billing/checkout", d.signedIn(d.checkout))
		mux.HandleFunc("POST /billing/portal", d.signedIn(d.portal))
		mux.HandleFunc("GET /billing/receipts/{id}", d.signedIn(d.receipt))
		mux.HandleFunc("GET /billing/done", d.signedIn(d.done))
	}
	if cfg.SignIn != nil {
		mux.HandleFunc("GET /signin", d.signInPage)
		mux.HandleFunc("POST /signin", d.signInWithLink)
		mux.HandleFunc("POST /signout", d.signOut)
		if e := cfg.SignIn.opts.Email; e != nil {
			mux.HandleFunc("POST /signin/email", d.emailLink)
			if e.SignUps {
				mux.HandleFunc("GET /signup", d.signUpPage)
			}
		}
	}
	d.handler = http.NewCrossOriginProtection().Handler(mux)
	return d, nil
}

// ServeHTTP implements http.Handler.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.setHeaders(w)
	d.handler.ServeHTTP(w, r)
}

// setHeaders sets the headers every page is answered with.
func (d *Dashboard) setHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", d.policy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
}

// account returns the account signed in for r, "" when none, and the
// address it signed in with where the session knows it: the host's
// (Config.Account), or else the SignIn's, whose session it renews. It
// fails when the SignIn cannot tell whether the session was signed out
// of.
func (d *Dashboard) account(w http.ResponseWriter, r *http.Request) (account, email string, err error) {
	if d.cfg.Account != nil {
		return d.cfg.Account(r), "", nil
	}
	session, ok, err := d.cfg.SignIn.session(r)
	if !ok {
		return "", "", err
	}
	d.cfg.SignIn.touch(w, session)
	return session.Subject, session.Email, nil
}

// signedIn runs page for the request's account, or sends the request to
// sign in. When who is signed in cannot be told, it answers with an error
// page, never the page.
func (d *Dashboard) signedIn(page func(w http.ResponseWriter, r *http.Request, account string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		account, holder, err := d.account(w, r)
		if err != nil {
			d.fail(w, r, "", "check the session", err)
			return
		}
		if account != "" {
			page(w, withSignedIn(r, holder), account)
			return
		}
		if d.cfg.SignInURL != "" {
			http.Redirect(w, r, d.cfg.SignInURL, http.StatusSeeOther)
			return
		}
		page := signInPage{frame: d.frame(r, "", "")}
		if d.cfg.SignIn != nil && d.cfg.SignIn.opts.Email != nil {
			page = d.signInFrame(r) // its form asks for a link, or opens an account
		}
		d.render(w, r, http.StatusUnauthorized, "signin", page)
	}
}

// frame is what every page's layout shows: the account, the page's place
// in the navigation, and the path back to the dashboard's root, which
// the links start with so that the dashboard works under any prefix.
type frame struct {
	Nav, Account, Root string
	// Holder is who is signed in as the header names them: their email
	// where the session knows it, else Account.
	Holder string
	Brand  Brand
	// Running warns an account that has few images left, or none.
	Running *runningOut
	// SignOut is whether the layout offers to sign out: the dashboard
	// signs in itself (Config.SignIn).
	SignOut bool
	// Webhooks, Try, Billing and History are whether the dashboard has
	// those pages.
	Webhooks, Try, Billing, History bool
}

func (d *Dashboard) frame(r *http.Request, account, nav string) frame {
	root := strings.Repeat("../", strings.Count(r.URL.Path, "/")-1)
	var holder string
	if s := signedInOf(r); s != nil {
		holder = s.holder
	}
	return frame{Nav: nav, Account: account, Holder: cmp.Or(holder, account), Brand: d.cfg.Brand, Root: cmp.Or(root, "./"),
		SignOut: d.cfg.SignIn != nil, Webhooks: d.cfg.WebhookSecrets != nil, Try: d.cfg.API != nil, Billing: d.cfg.Seller != nil, History: d.cfg.History != nil,
		Running: d.runningOut(r, account)}
}

// runningOut is the banner of an account with few images left: at most a
// fifth of its monthly free images (one, at least), in all its pools.
type runningOut struct {
	Left int64
	// Refill is when the free images refill; zero on a plan without any.
	Refill time.Time
}

// runningOut returns account's banner, nil when it has images enough, is
// unlimited, or its balance cannot be read (the page says so itself).
func (d *Dashboard) runningOut(r *http.Request, account string) *runningOut {
	if account == "" {
		return nil
	}
	b, err := d.balance(r, account)
	if err != nil || b.Plan.Unlimited {
		return nil
	}
	left := b.Free + b.ShareBonus + b.Credits
	if left > max(b.Plan.MonthlyImages/5, 1) {
		return nil
	}
	banner := &runningOut{Left: left}
	if b.Plan.MonthlyImages > 0 {
		_, banner.Refill = upscale.MonthBounds(d.cfg.Now())
	}
	return banner
}

// signedIn is what the page of a signed-in request and its frame share:
// the address of who signed in ("" when the session does not know it),
// and the account's balance, read once for both.
type signedIn struct {
	holder      string
	balance     upscale.Balance
	balanceErr  error
	balanceRead bool
}

type signedInKey struct{}

// withSignedIn is r of a page signed in by holder.
func withSignedIn(r *http.Request, holder string) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), signedInKey{}, &signedIn{holder: holder}))
}

// signedInOf is r's signedIn, nil for a request of no signed-in page.
func signedInOf(r *http.Request) *signedIn {
	s, _ := r.Context().Value(signedInKey{}).(*signedIn)
	return s
}

// balance returns account's balance, read once for a signed-in page and
// its banner.
func (d *Dashboard) balance(r *http.Request, account string) (upscale.Balance, error) {
	s := signedInOf(r)
	if s == nil {
		return d.cfg.Ledger.Balance(r.Context(), account)
	}
	if !s.balanceRead {
		s.balance, s.balanceErr = d.cfg.Ledger.Balance(r.Context(), account)
		s.balanceRead = true
	}
	return s.balance, s.balanceErr
}

// origin is the scheme://host of an absolute http(s) URL whose host is
// only what a host name or address is written with, else "": it goes into
// a Content-Security-Policy, where a ; or a space would start another
// directive or source.
func origin(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		strings.Trim(strings.ToLower(u.Host), "abcdefghijklmnopqrstuvwxyz0123456789.-:[]") != "" {
		return ""
	}
	return u.Scheme + "://" + u.Host
}

// withImagesFrom is policy with images allowed from origins too, those
// not "".
func withImagesFrom(policy string, origins ...string) string {
	sources := []string{"img-src 'self' data:"}
	for _, o := range origins {
		if o != "" && !slices.Contains(sources, o) {
			sources = append(sources, o)
		}
	}
	return strings.Replace(policy, "img-src 'self' data:", strings.Join(sources, " "), 1)
}

// render writes page with data, under status; a page that cannot be
// rendered whole is a 500, never half a page.
func (d *Dashboard) render(w http.ResponseWriter, r *http.Request, status int, page string, data any) {
	var b bytes.Buffer
	if err := d.pages[page].Execute(&b, data); err != nil {
		d.cfg.Logger.Error("dashboard: render a page", "page", page, "path", r.URL.Path, "err", err)
		http.Error(w, "Something went wrong on our side; try again in a moment.", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(b.Bytes())
}

// notFoundPage says what the account has none of, and leads back to the
// page of its Nav, named Back.
type notFoundPage struct {
	frame
	Message, Back string
}

// notFound answers 404 with message, leading back to nav's page, named
// back.
func (d *Dashboard) notFound(w http.ResponseWriter, r *http.Request, account, nav, message, back string) {
	d.render(w, r, http.StatusNotFound, "notfound", notFoundPage{frame: d.frame(r, account, nav), Message: message, Back: back})
}

// fail answers a store's failure with a page that says so, logging it.
func (d *Dashboard) fail(w http.ResponseWriter, r *http.Request, account, action string, err error) {
	d.cfg.Logger.Error("dashboard: "+action, "account", account, "err", err)
	status := http.StatusInternalServerError
	if errors.Is(err, upscale.ErrUnavailable) {
		status = http.StatusServiceUnavailable
	}
	http.Error(w, "Something went wrong on our side; try again in a moment.", status)
}
