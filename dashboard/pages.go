package dashboard

import (
	"cmp"
	"context"
	"errors"
	"html/template"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/accounts"
)

var templateFuncs = template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return t.UTC().Format("2 Jan 2006, 15:04 UTC")
	},
	"day":   func(t time.Time) string { return t.UTC().Format("2 January 2006") },
	"mod":   func(a, b int) int { return a % b },
	"add":   func(a, b int64) int64 { return a + b },
	"count": count,
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

// pool is one row of the overview's balances.
type pool struct {
	Name string
	Left int64
	// Of is the pool's allowance, 0 for pools that do not refill.
	Of int64
}

// bar is one day of the overview's chart, in the SVG's units.
type bar struct {
	Day          int
	Images       int64
	X, Y, Height int
	// Middle is the bar's middle, where its day's label is centred.
	Middle int
}

// monthTotal is one past month's images.
type monthTotal struct {
	Month  string
	Images int64
}

// frame is what every page's layout shows: the account, the page's place
// in the navigation, and the path back to the dashboard's root, which
// the links start with so that the dashboard works under any prefix.
type frame struct {
	Nav, Account, Root string
	// SignOut is whether the layout offers to sign out: the dashboard
	// signs in itself (Config.SignIn).
	SignOut bool
	// Webhooks, Try and Billing are whether the dashboard has those
	// pages.
	Webhooks, Try, Billing bool
}

func (d *Dashboard) frame(r *http.Request, account, nav string) frame {
	root := strings.Repeat("../", strings.Count(r.URL.Path, "/")-1)
	return frame{Nav: nav, Account: account, Root: cmp.Or(root, "./"), SignOut: d.cfg.SignIn != nil, Webhooks: d.cfg.WebhookSecrets != nil, Try: d.cfg.API != nil, Billing: d.cfg.Seller != nil}
}

type overviewPage struct {
	frame
	Plan   upscale.Plan
	Pools  []pool
	Refill time.Time
	// Charted is whether the ledger reports usage (UsageReporter); the
	// rest of the page's usage is empty otherwise.
	Charted   bool
	UsedMonth int64
	Bars      []bar
	Width     int
	Months    []monthTotal
	// Share is the account's share link and what it earned, when the
	// dashboard has a ShareBonus.
	Share *sharePanel
	// NoKeys says the account has never had a key: the page shows how to
	// make the first.
	NoKeys bool
}

// sharePanel is an account's share link, its terms, and what it earned
// this month.
type sharePanel struct {
	Link string
	accounts.Share
}

// The chart's geometry: one bar per day.
const (
	barWidth, barGap, chartHeight = 14, 4, 120
)

func (d *Dashboard) overview(w http.ResponseWriter, r *http.Request, account string) {
	ctx := r.Context()
	b, err := d.cfg.Ledger.Balance(ctx, account)
	if err != nil {
		d.fail(w, r, account, "read the balance", err)
		return
	}
	now := d.cfg.Now()
	monthStart, refill := upscale.MonthBounds(now)
	page := overviewPage{frame: d.frame(r, account, "overview"), Plan: b.Plan, Pools: pools(b), Refill: refill}
	keys, err := d.cfg.Keys.ListKeys(ctx, account)
	if err != nil {
		d.fail(w, r, account, "list the keys", err)
		return
	}
	page.NoKeys = len(keys) == 0
	if usage, ok := d.cfg.Ledger.(upscale.UsageReporter); ok {
		days, err := usage.UsageByDay(ctx, account, monthStart.AddDate(-1, 0, 0), now)
		if err != nil {
			d.fail(w, r, account, "read the usage", err)
			return
		}
		page.Charted = true
		page.UsedMonth, page.Bars, page.Months = chart(days, monthStart, refill)
		page.Width = len(page.Bars)*(barWidth+barGap) + 24 // and room for the labels at both ends
	}
	if b := d.cfg.ShareBonus; b != nil {
		share, err := b.Share(ctx, account, now)
		if err != nil {
			d.fail(w, r, account, "read the share link", err)
			return
		}
		page.Share = &sharePanel{Link: d.cfg.SignIn.opts.BaseURL + "signup?ref=" + share.Code, Share: share}
	}
	d.render(w, r, http.StatusOK, "overview", page)
}

// pools are the rows of b's balances, none on an unlimited plan.
func pools(b upscale.Balance) []pool {
	if b.Plan.Unlimited {
		return nil
	}
	var rows []pool
	if b.Plan.MonthlyImages > 0 {
		rows = append(rows, pool{Name: "Free images this month", Left: b.Free, Of: b.Plan.MonthlyImages})
	}
	return append(rows, pool{Name: "Share bonus", Left: b.ShareBonus}, pool{Name: "Credits", Left: b.Credits})
}

// chart lays out this month's days (from monthStart until next) as bars,
// and totals the months before it, the latest first.
func chart(days []upscale.DayUsage, monthStart, next time.Time) (usedMonth int64, bars []bar, months []monthTotal) {
	perDay := map[int]int64{}
	var most int64 = 1
	for _, du := range days {
		var n int64
		for _, images := range du.ByPool {
			n += images
		}
		if du.Day.Before(monthStart) {
			month := du.Day.Format("January 2006")
			if len(months) == 0 || months[len(months)-1].Month != month {
				months = append(months, monthTotal{Month: month})
			}
			months[len(months)-1].Images += n
			continue
		}
		perDay[du.Day.Day()] += n
		usedMonth += n
		most = max(most, perDay[du.Day.Day()])
	}
	for day := 1; day <= next.AddDate(0, 0, -1).Day(); day++ {
		height := int(perDay[day] * chartHeight / most)
		x := (day - 1) * (barWidth + barGap)
		bars = append(bars, bar{Day: day, Images: perDay[day], X: x, Y: chartHeight - height, Height: height, Middle: x + barWidth/2})
	}
	slices.Reverse(months)
	return usedMonth, bars, months
}

type keysPage struct {
	frame
	Keys []upscale.KeyInfo
	// Made is the key just made, shown this once, and its name.
	Made, MadeName string
	// Problem says why the name given was refused.
	Problem, Name string
}

func (d *Dashboard) keys(w http.ResponseWriter, r *http.Request, account string) {
	d.renderKeys(w, r, account, http.StatusOK, keysPage{})
}

// renderKeys renders the keys page with the account's keys and what page
// already holds.
func (d *Dashboard) renderKeys(w http.ResponseWriter, r *http.Request, account string, status int, page keysPage) {
	keys, err := d.cfg.Keys.ListKeys(r.Context(), account)
	if err != nil {
		d.fail(w, r, account, "list the keys", err)
		return
	}
	page.frame, page.Keys = d.frame(r, account, "keys"), keys
	d.render(w, r, status, "keys", page)
}

func (d *Dashboard) createKey(w http.ResponseWriter, r *http.Request, account string) {
	name := r.PostFormValue("name")
	if err := upscale.ValidateKeyName(name); err != nil {
		d.renderKeys(w, r, account, http.StatusBadRequest, keysPage{Problem: err.Error(), Name: name})
		return
	}
	key := upscale.NewKey(d.cfg.KeyPrefix)
	info, err := d.cfg.Keys.AddNamedKey(r.Context(), key, account, name)
	if err != nil {
		d.fail(w, r, account, "make a key", err)
		return
	}
	d.cfg.Logger.Info("dashboard: key made", "account", account, "key_id", info.ID)
	d.renderKeys(w, r, account, http.StatusCreated, keysPage{Made: key, MadeName: name})
}

type revokePage struct {
	frame
	Key upscale.KeyInfo
}

// keyNotFound answers for a key the account does not have: another
// account's, a revoked one, an unknown one, and an ID no key can have
// alike.
func (d *Dashboard) keyNotFound(w http.ResponseWriter, r *http.Request, account string) {
	d.notFound(w, r, account, "keys", "This account has no such key, or it is revoked already.", "your API keys")
}

// The revoke pages take the key's ID from a path that is anyone's: an ID
// no key can have is not found before any store is asked, as a store may
// refuse it (PostgreSQL refuses text that is not UTF-8).

func (d *Dashboard) confirmRevoke(w http.ResponseWriter, r *http.Request, account string) {
	id := r.PathValue("id")
	if !upscale.ValidKeyID(id) {
		d.keyNotFound(w, r, account)
		return
	}
	keys, err := d.cfg.Keys.ListKeys(r.Context(), account)
	if err != nil {
		d.fail(w, r, account, "list the keys", err)
		return
	}
	i := slices.IndexFunc(keys, func(k upscale.KeyInfo) bool { return k.ID == id && k.Revoked.IsZero() })
	if i < 0 {
		d.keyNotFound(w, r, account)
		return
	}
	d.render(w, r, http.StatusOK, "revoke", revokePage{frame: d.frame(r, account, "keys"), Key: keys[i]})
}

func (d *Dashboard) revokeKey(w http.ResponseWriter, r *http.Request, account string) {
	id := r.PathValue("id")
	if !upscale.ValidKeyID(id) {
		d.keyNotFound(w, r, account)
		return
	}
	err := d.cfg.Keys.RevokeKeyID(r.Context(), account, id)
	if errors.Is(err, upscale.ErrNotFound) {
		d.keyNotFound(w, r, account)
		return
	}
	if err != nil {
		d.fail(w, r, account, "revoke a key", err)
		return
	}
	d.cfg.Logger.Info("dashboard: key revoked", "account", account, "key_id", id)
	// Relative to this page, as the mount point is the host's: Redirect
	// would resolve it against the path after the host's StripPrefix.
	w.Header().Set("Location", "../../keys")
	w.WriteHeader(http.StatusSeeOther)
}

// signInPage is the sign-in page: a button that spends a working link
// (Token, for an account, or for an address whose account it may open:
// ByEmail), or why there is none; and the form that asks for a link by
// email, when the SignIn has one (Email, SignUps).
type signInPage struct {
	frame
	Token, For string
	// Links is whether the dashboard signs in with links (Config.SignIn).
	Links, Broken, SignedOut, TooMany bool
	ByEmail, Email, SignUps           bool
	// Sent answers a link asked for Address, the same whether it has an
	// account or not; BadAddress and TooManyLinks refuse one.
	Address                        string
	Sent, BadAddress, TooManyLinks bool
	// OpensFull refuses to open an account past the day's cap.
	OpensFull bool
	// Ref is the share code of the share link the visitor came by, which
	// the form sends on.
	Ref string
	// Minutes is how long a link works (SignInOptions.LinkTTL).
	Minutes int
}

// signInFrame is the sign-in page as every answer of the sign-in pages
// starts it.
func (d *Dashboard) signInFrame(r *http.Request) signInPage {
	page := signInPage{frame: d.frame(r, "", ""), Links: true, Minutes: int(d.cfg.SignIn.opts.LinkTTL.Minutes())}
	if e := d.cfg.SignIn.opts.Email; e != nil {
		page.Email, page.SignUps = true, e.SignUps
	}
	return page
}

func (d *Dashboard) signInPage(w http.ResponseWriter, r *http.Request) {
	page := d.signInFrame(r)
	page.SignedOut = r.URL.Query().Has("signed-out")
	token := r.URL.Query().Get("token")
	if claims, ok := d.cfg.SignIn.link(token); ok {
		page.Token, page.For, page.ByEmail = token, cmp.Or(claims.Email, claims.Subject), claims.Email != ""
		d.render(w, r, http.StatusOK, "signin", page)
		return
	}
	page.Broken = token != ""
	d.render(w, r, http.StatusUnauthorized, "signin", page)
}

func (d *Dashboard) signInWithLink(w http.ResponseWriter, r *http.Request) {
	allowed, retryAfter, err := d.cfg.SignIn.attempt(r)
	if err != nil {
		d.fail(w, r, "", "limit the sign-in attempts", err)
		return
	}
	if !allowed {
		d.cfg.Logger.Warn("dashboard: too many sign-in attempts", "client", d.cfg.SignIn.opts.ClientAddress(r))
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(retryAfter.Seconds()))))
		page := d.signInFrame(r)
		page.TooMany = true
		d.render(w, r, http.StatusTooManyRequests, "signin", page)
		return
	}
	account, ok, err := d.cfg.SignIn.useLink(w, r, r.PostFormValue("token"))
	if errors.Is(err, errOpensFull) {
		d.cfg.Logger.Warn("dashboard: an account not opened: the day's cap is reached", "client", d.cfg.SignIn.opts.ClientAddress(r))
		now := d.cfg.Now().UTC()
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC).Sub(now).Seconds()))))
		page := d.signInFrame(r)
		page.OpensFull = true
		d.render(w, r, http.StatusTooManyRequests, "signin", page)
		return
	}
	if err != nil {
		d.fail(w, r, account, "sign in with a link", err)
		return
	}
	if !ok {
		d.cfg.Logger.Info("dashboard: a sign-in link that does not work", "client", d.cfg.SignIn.opts.ClientAddress(r))
		page := d.signInFrame(r)
		page.Broken = true
		d.render(w, r, http.StatusUnauthorized, "signin", page)
		return
	}
	d.cfg.Logger.Info("dashboard: signed in with a link", "account", account)
	w.Header().Set("Location", "./")
	w.WriteHeader(http.StatusSeeOther)
}

// emailLink asks for a sign-in link by email: refused at once for an
// address that is none, or past its allowance or its client's; else the
// link is mailed, if the address may sign in, after the answer, which is
// the same whichever it is.
func (d *Dashboard) emailLink(w http.ResponseWriter, r *http.Request) {
	page := d.signInFrame(r)
	page.Ref = shareCode(r.PostFormValue("ref"))
	email, err := accounts.Address(r.PostFormValue("email"))
	if err != nil {
		page.BadAddress, page.Address = true, r.PostFormValue("email")
		d.render(w, r, http.StatusBadRequest, "signin", page)
		return
	}
	allowed, retryAfter, err := d.cfg.SignIn.askLink(r, email)
	if err != nil {
		d.fail(w, r, "", "limit the links asked for", err)
		return
	}
	page.Address = email
	if !allowed {
		d.cfg.Logger.Warn("dashboard: too many sign-in links asked for", "client", d.cfg.SignIn.opts.ClientAddress(r))
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(retryAfter.Seconds()))))
		page.TooManyLinks = true
		d.render(w, r, http.StatusTooManyRequests, "signin", page)
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), mailLinkTimeout)
		defer cancel()
		if err := d.cfg.SignIn.mailLink(ctx, d.cfg.Logger, email, page.Ref); err != nil {
			d.cfg.Logger.Error("dashboard: mail a sign-in link", "err", err)
		}
	}()
	page.Sent = true
	d.render(w, r, http.StatusOK, "signin", page)
}

// signUpPage is the sign-in page of a share link (signup?ref=CODE): its
// form sends the code on, and the account it opens earns the sharer its
// share bonus.
func (d *Dashboard) signUpPage(w http.ResponseWriter, r *http.Request) {
	page := d.signInFrame(r)
	page.Ref = shareCode(r.URL.Query().Get("ref"))
	d.render(w, r, http.StatusOK, "signin", page)
}

// shareCode is code when it may be a share code (letters and digits, as
// NewShareCode makes them), else "".
func shareCode(code string) string {
	if len(code) == 0 || len(code) > 64 || strings.Trim(code, "abcdefghijklmnopqrstuvwxyz0123456789") != "" {
		return ""
	}
	return code
}

// mailLinkTimeout bounds the finding of an address's account and the
// posting of its link, after the page has answered.
const mailLinkTimeout = 30 * time.Second

func (d *Dashboard) signOut(w http.ResponseWriter, r *http.Request) {
	account, err := d.cfg.SignIn.signOut(w, r)
	if err != nil {
		d.fail(w, r, account, "sign out", err)
		return
	}
	if account != "" {
		d.cfg.Logger.Info("dashboard: signed out", "account", account)
	}
	w.Header().Set("Location", "signin?signed-out")
	w.WriteHeader(http.StatusSeeOther)
}

// webhooksPage shows whether the account has a webhook signing secret,
// by its last characters, and a secret just made, once.
type webhooksPage struct {
	frame
	Hint, Made string
}

func (d *Dashboard) webhooks(w http.ResponseWriter, r *http.Request, account string) {
	d.renderWebhooks(w, r, account, http.StatusOK, "")
}

// renderWebhooks renders the webhooks page, with made, the secret just
// made, when there is one.
func (d *Dashboard) renderWebhooks(w http.ResponseWriter, r *http.Request, account string, status int, made string) {
	secrets, err := d.cfg.WebhookSecrets.WebhookSecrets(r.Context(), account)
	if err != nil {
		d.fail(w, r, account, "read the webhook secrets", err)
		return
	}
	page := webhooksPage{frame: d.frame(r, account, "webhooks"), Made: made}
	if len(secrets) > 0 {
		page.Hint = "…" + secrets[0][max(len(secrets[0])-4, 0):]
	}
	d.render(w, r, status, "webhooks", page)
}

func (d *Dashboard) rotateWebhookSecret(w http.ResponseWriter, r *http.Request, account string) {
	secret, err := d.cfg.WebhookSecrets.RotateWebhookSecret(r.Context(), account)
	if err != nil {
		d.fail(w, r, account, "make a webhook secret", err)
		return
	}
	d.cfg.Logger.Info("dashboard: webhook secret made", "account", account)
	d.renderWebhooks(w, r, account, http.StatusCreated, secret)
}
