package dashboard

import (
	"cmp"
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"
)

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
	// FreeImages is what an account opened here gets a month, and
	// ShareBonus what a share link earns its sharer (zero without).
	FreeImages, ShareBonus int64
}

// signInFrame is the sign-in page as every answer of the sign-in pages
// starts it.
func (d *Dashboard) signInFrame(r *http.Request) signInPage {
	page := signInPage{frame: d.frame(r, "", ""), Links: true, Minutes: int(d.cfg.SignIn.opts.LinkTTL.Minutes())}
	if e := d.cfg.SignIn.opts.Email; e != nil {
		page.Email, page.SignUps = true, e.SignUps
		if e.SignUps {
			page.FreeImages = e.Plan.MonthlyImages
		}
	}
	if d.cfg.ShareBonus != nil {
		page.ShareBonus, _ = d.cfg.ShareBonus.Terms()
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
