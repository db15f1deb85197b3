package dashboard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	texttemplate "text/template"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/accounts"
)

// EmailOptions lets people ask the sign-in page for a link by email
// (SignInOptions.Email): an address that has an account gets a link that
// signs it in; one that has none, a link that opens its account, on
// Plan, when SignUps allows. Every address gets the same answer, so the
// form tells nobody which addresses have accounts. Directory and Outbox
// are required.
type EmailOptions struct {
	// Directory finds and opens the accounts of addresses.
	Directory accounts.Directory
	// Outbox sends the links, without holding up the page.
	Outbox accounts.Outbox
	// SignUps opens an account for an address that has none; false sends
	// links to the addresses that have accounts only.
	SignUps bool
	// Plan is the plan an account opens on.
	Plan upscale.Plan
	// OpensPerDay caps the accounts opened in a day (UTC), so that nobody
	// can open free accounts by the thousand unseen: past it, a link that
	// would open one answers 429 until the next day. Concurrent openings
	// may pass it by a few. Zero means no cap.
	OpensPerDay int
	// Limit limits the links asked for, per mailbox and per client
	// address, keyed by the digests of "mail-to " and the mailbox and of
	// "mail-from " and the client's. A mailbox is the address without
	// the +tag of its local part, and at gmail.com and googlemail.com
	// (one mailbox) without its dots too, which reach the same person;
	// the account and the mail keep the address as written. Nil means 5
	// an hour each, one more every 12 minutes (MemoryRateLimiter: one
	// process).
	Limit upscale.RateLimiter
	// MailsPerHour caps the links mailed for the whole server, whoever
	// asks and for whatever address, so that many clients together
	// cannot have it mail without end: MailsPerHour at once, refilled
	// evenly over an hour (so at most twice it in any hour). Past it, the
	// page answers as it does for a link on its way, nothing is mailed,
	// SignIn.MailStats counts it, and the first in each hour is logged.
	// Zero means 1000. Set MailsPerHour or Budget, not both.
	MailsPerHour int
	// Budget keeps the cap, under the digest of "mail-budget", at its
	// own rate, in place of MailsPerHour: replicas that must share one
	// cap give one RateLimiter on their shared store. Nil means
	// MailsPerHour in a MemoryRateLimiter: each process its own.
	Budget upscale.RateLimiter
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
		if err := d.cfg.SignIn.mailLink(ctx, d.cfg.Logger, d.cfg.Brand, email, page.Ref); err != nil {
			d.cfg.Logger.Error("dashboard: mail a sign-in link", "err", err)
		}
	}()
	page.Sent = true
	d.render(w, r, http.StatusOK, "signin", page)
}

// mailLinkTimeout bounds the finding of an address's account and the
// posting of its link, after the page has answered.
const mailLinkTimeout = 30 * time.Second

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

// askLink takes one link from the allowances of the request's client and
// of the mailbox of the address email (EmailOptions.Limit), and says when
// to ask again if either has none. The client's comes first, so that a
// client past its own spends nothing of a mailbox's: one client cannot
// lock an address out by asking for it.
func (s *SignIn) askLink(r *http.Request, email string) (allowed bool, retryAfter time.Duration, err error) {
	for _, key := range []string{"mail-from " + clientNetwork(s.opts.ClientAddress(r)), "mail-to " + mailbox(email)} {
		d, err := s.opts.Email.Limit.Allow(r.Context(), upscale.DigestKey(key))
		if err != nil || !d.Allowed {
			return false, d.RetryAfter, err
		}
	}
	return true, 0, nil
}

// clientNetwork is the client address an allowance is kept for: an IPv6
// address's /64, which one host commonly has whole, else the address.
func clientNetwork(address string) string {
	ip, err := netip.ParseAddr(address)
	if err != nil || ip.Unmap().Is4() {
		return address
	}
	prefix, _ := ip.Prefix(64)
	return prefix.String()
}

// mailbox is the mailbox the address email (as Address returns it, in
// lower case) reaches, which its allowance is kept for: the local part
// without its +tag, and at Gmail, which ignores the dots and answers
// at two names, without its dots, at gmail.com.
func mailbox(email string) string {
	local, domain, _ := strings.Cut(email, "@")
	local, _, _ = strings.Cut(local, "+")
	if domain == "gmail.com" || domain == "googlemail.com" {
		local, domain = strings.ReplaceAll(local, ".", ""), "gmail.com"
	}
	return local + "@" + domain
}

// accountFor returns the account of the address email: found, or opened
// now when SignUps allows, brought by the account whose share code is
// ref, if any; false when there is none to sign in.
func (s *SignIn) accountFor(ctx context.Context, email, ref string) (string, bool, error) {
	e := s.opts.Email
	account, err := e.Directory.AccountOf(ctx, email)
	switch {
	case err == nil:
		return account, true, nil
	case !errors.Is(err, upscale.ErrNotFound):
		return "", false, fmt.Errorf("dashboard: find the address's account: %w", err)
	case !e.SignUps:
		return "", false, nil
	}
	if e.OpensPerDay > 0 {
		now := s.opts.Now().UTC()
		opened, err := e.Directory.Opened(ctx, time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC))
		if err != nil {
			return "", false, fmt.Errorf("dashboard: count the accounts opened today: %w", err)
		}
		if len(opened) >= e.OpensPerDay {
			return "", false, errOpensFull
		}
	}
	referrer := ""
	if ref != "" {
		if referrer, err = e.Directory.SharedBy(ctx, ref); errors.Is(err, upscale.ErrNotFound) {
			referrer = "" // a share link whose account is gone opens the account anyway
		} else if err != nil {
			return "", false, fmt.Errorf("dashboard: find the share link's account: %w", err)
		}
	}
	account, _, err = e.Directory.OpenAccount(ctx, email, e.Plan, referrer)
	if err != nil {
		return "", false, fmt.Errorf("dashboard: open the address's account: %w", err)
	}
	return account, true, nil
}

// errOpensFull refuses to open an account past EmailOptions.OpensPerDay.
var errOpensFull = errors.New("dashboard: no more accounts open today")

// MailStats counts the sign-in links a SignIn was to mail since it was
// made; each count only grows.
type MailStats struct {
	// Posted is the links given to the Outbox.
	Posted uint64
	// OverBudget is the links not mailed because the server's budget
	// (EmailOptions.MailsPerHour) was spent.
	OverBudget uint64
	// NoAccount is the links asked for addresses that have no account
	// while sign-ups are closed: none is mailed, and the page answers as
	// for any address.
	NoAccount uint64
}

// mailCounts are MailStats's counts, and the hour the budget was last
// logged as spent in.
type mailCounts struct {
	posted, overBudget, noAccount atomic.Uint64
	loggedHour                    atomic.Int64 // hours since the Unix epoch
}

// MailStats returns the counts so far, each read atomically, for a
// metrics registry's counters.
func (s *SignIn) MailStats() MailStats {
	return MailStats{Posted: s.mails.posted.Load(), OverBudget: s.mails.overBudget.Load(), NoAccount: s.mails.noAccount.Load()}
}

// spendMail takes one mail from the server's budget (EmailOptions.Budget),
// and reports whether there was one; a mail past it is counted, and the
// first of each hour logged to logger.
func (s *SignIn) spendMail(ctx context.Context, logger *slog.Logger) (bool, error) {
	d, err := s.opts.Email.Budget.Allow(ctx, upscale.DigestKey("mail-budget"))
	if err != nil {
		return false, fmt.Errorf("dashboard: the mail budget: %w", err)
	}
	if d.Allowed {
		return true, nil
	}
	n := s.mails.overBudget.Add(1)
	if hour := s.opts.Now().Unix() / 3600; s.mails.loggedHour.Swap(hour) != hour {
		logger.Warn("dashboard: the sign-in mail budget is spent; links asked for are not mailed until it refills",
			"over_budget_total", n, "retry_after", d.RetryAfter)
	}
	return false, nil
}

// mailLink posts to the address email the link it may have, while the
// server's budget allows: one that signs its account in, or, when SignUps
// allows, one that opens its account, brought by the share code ref if not
// empty; nothing to an address that may not sign in, or past the budget,
// which is no error.
func (s *SignIn) mailLink(ctx context.Context, logger *slog.Logger, brand Brand, email, ref string) error {
	e := s.opts.Email
	var claims linkClaims
	account, err := e.Directory.AccountOf(ctx, email)
	switch {
	case err == nil:
		claims.Subject, claims.To = account, email
	case !errors.Is(err, upscale.ErrNotFound):
		return fmt.Errorf("dashboard: find the address's account: %w", err)
	case !e.SignUps:
		s.mails.noAccount.Add(1)
		return nil
	default:
		claims.Email, claims.Ref = email, ref
	}
	if ok, err := s.spendMail(ctx, logger); !ok {
		return err
	}
	link, err := s.newLink(claims)
	if err != nil {
		return err
	}
	m, err := linkMail(linkMailData{Brand: brand, Link: link, Opens: claims.Email != "", Minutes: int(s.opts.LinkTTL.Minutes()), FreeImages: e.Plan.MonthlyImages}, email)
	if err != nil {
		return err
	}
	// Kept as long as the link works, by the wall clock the outbox and
	// the mail server keep.
	if err := e.Outbox.Post(ctx, m, time.Now().Add(s.opts.LinkTTL)); err != nil {
		return err
	}
	s.mails.posted.Add(1)
	return nil
}

// mailTemplates are a link's mail, HTML and plain text, which say the
// same.
var mailTemplates = struct {
	html *template.Template
	text *texttemplate.Template
}{
	html: template.Must(template.New("mail").Parse(`<!doctype html>
<html lang="en"><body>
<p>{{if .Opens}}Open your {{.Brand.Name}} account{{else}}Sign in to your {{.Brand.Name}} account{{end}} with this link. It works once, for {{.Minutes}} minutes.</p>
<p><a href="{{.Link}}">{{if .Opens}}Open my account{{else}}Sign in{{end}}</a></p>
{{if and .Opens .FreeImages}}<p>Your account comes with {{.FreeImages}} free images every month, and an API key is one click away.</p>
{{end}}<p>If you did not ask for it, ignore this mail: nothing happens without the link.</p>
{{with .Brand.Support}}<p>Questions? Write to <a href="mailto:{{.}}">{{.}}</a>.</p>
{{end}}</body></html>`)),
	text: texttemplate.Must(texttemplate.New("mail").Parse(`{{if .Opens}}Open your {{.Brand.Name}} account{{else}}Sign in to your {{.Brand.Name}} account{{end}} with this link. It works once, for {{.Minutes}} minutes.

{{.Link}}
{{if and .Opens .FreeImages}}
Your account comes with {{.FreeImages}} free images every month, and an API key is one click away.
{{end}}
If you did not ask for it, ignore this mail: nothing happens without the link.
{{with .Brand.Support}}
Questions? Write to {{.}}.
{{end}}`)),
}

// linkMailData is what a link's mail says.
type linkMailData struct {
	Brand Brand
	Link  string
	// Opens is whether the link opens an account, on a plan of FreeImages
	// a month; else it signs one in.
	Opens      bool
	Minutes    int
	FreeImages int64
}

// linkMail is the mail that carries data's link to email.
func linkMail(data linkMailData, email string) (accounts.Mail, error) {
	var html, text bytes.Buffer
	if err := mailTemplates.html.Execute(&html, data); err != nil {
		return accounts.Mail{}, fmt.Errorf("dashboard: the link's mail: %w", err)
	}
	if err := mailTemplates.text.Execute(&text, data); err != nil {
		return accounts.Mail{}, fmt.Errorf("dashboard: the link's mail: %w", err)
	}
	subject := "Sign in to " + data.Brand.Name
	if data.Opens {
		subject = "Open your " + data.Brand.Name + " account"
	}
	return accounts.Mail{To: email, Subject: subject, Text: text.String(), HTML: html.String()}, nil
}
