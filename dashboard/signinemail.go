package dashboard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/netip"
	"time"

	"github.com/upscalekit/upscale"
)

// askLink takes one link from the allowances of the request's client and
// of the address email (EmailOptions.Limit), and says when to ask again if
// either has none. The client's comes first, so that a client past its
// own spends nothing of an address's: one client cannot lock an address
// out by asking for it.
func (s *SignIn) askLink(r *http.Request, email string) (allowed bool, retryAfter time.Duration, err error) {
	for _, key := range []string{"mail-from " + clientNetwork(s.opts.ClientAddress(r)), "mail-to " + email} {
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

// mailLink posts to the address email the link it may have: one that
// signs its account in, or, when SignUps allows, one that opens its
// account, brought by the share code ref if not empty; nothing to an
// address that may not sign in.
func (s *SignIn) mailLink(ctx context.Context, email, ref string) error {
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
	return e.Outbox.Post(ctx, m, time.Now().Add(s.opts.LinkTTL))
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
func linkMail(product, email, link string, opens bool, ttl time.Duration) (Mail, error) {
	data := struct {
		Product, Link string
		Opens         bool
		Minutes       int
	}{product, link, opens, int(ttl.Minutes())}
	var html bytes.Buffer
	if err := mailTemplate.Execute(&html, data); err != nil {
		return Mail{}, fmt.Errorf("dashboard: the link's mail: %w", err)
	}
	subject, action := "Sign in to "+product, "Sign in to your "+product+" account"
	if opens {
		subject, action = "Open your "+product+" account", "Open your "+product+" account"
	}
	text := fmt.Sprintf("%s with this link. It works once, for %d minutes.\n\n%s\n\nIf you did not ask for it, ignore this mail: nothing happens without the link.\n",
		action, data.Minutes, link)
	return Mail{To: email, Subject: subject, Text: text, HTML: html.String()}, nil
}
