package dashboard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/accounts"
)

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

// MailStats counts the sign-in links a SignIn was to mail since it was
// made; each count only grows.
type MailStats struct {
	// Posted is the links given to the Outbox.
	Posted uint64
	// OverBudget is the links not mailed because the server's budget
	// (EmailOptions.MailsPerHour) was spent.
	OverBudget uint64
}

// mailCounts are MailStats's counts, and the hour the budget was last
// logged as spent in.
type mailCounts struct {
	posted, overBudget atomic.Uint64
	loggedHour         atomic.Int64 // hours since the Unix epoch
}

// MailStats returns the counts so far, each read atomically, for a
// metrics registry's counters.
func (s *SignIn) MailStats() MailStats {
	return MailStats{Posted: s.mails.posted.Load(), OverBudget: s.mails.overBudget.Load()}
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
func (s *SignIn) mailLink(ctx context.Context, logger *slog.Logger, email, ref string) error {
	e := s.opts.Email
	var claims linkClaims
	account, err := e.Directory.AccountOf(ctx, email)
	switch {
	case err == nil:
		claims.Subject = account
	case !errors.Is(err, upscale.ErrNotFound):
		return fmt.Errorf("dashboard: find the address's account: %w", err)
	case !e.SignUps:
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
	m, err := linkMail(e.Product, email, link, claims.Email != "", s.opts.LinkTTL)
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

// mailTemplate is the HTML of a link's mail; its text says the same.
var mailTemplate = template.Must(template.New("mail").Parse(`<!doctype html>
<html lang="en"><body>
<p>{{if .Opens}}Open your {{.Product}} account{{else}}Sign in to your {{.Product}} account{{end}} with this link. It works once, for {{.Minutes}} minutes.</p>
<p><a href="{{.Link}}">{{if .Opens}}Open my account{{else}}Sign in{{end}}</a></p>
<p>If you did not ask for it, ignore this mail: nothing happens without the link.</p>
</body></html>`))

// linkMail is the mail that carries link to email: it opens an account, or
// signs one in.
func linkMail(product, email, link string, opens bool, ttl time.Duration) (accounts.Mail, error) {
	data := struct {
		Product, Link string
		Opens         bool
		Minutes       int
	}{product, link, opens, int(ttl.Minutes())}
	var html bytes.Buffer
	if err := mailTemplate.Execute(&html, data); err != nil {
		return accounts.Mail{}, fmt.Errorf("dashboard: the link's mail: %w", err)
	}
	subject, action := "Sign in to "+product, "Sign in to your "+product+" account"
	if opens {
		subject, action = "Open your "+product+" account", "Open your "+product+" account"
	}
	text := fmt.Sprintf("%s with this link. It works once, for %d minutes.\n\n%s\n\nIf you did not ask for it, ignore this mail: nothing happens without the link.\n",
		action, data.Minutes, link)
	return accounts.Mail{To: email, Subject: subject, Text: text, HTML: html.String()}, nil
}
