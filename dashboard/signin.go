package dashboard

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/accounts"
)

// SignInOptions configures a SignIn. Secret and BaseURL are required;
// every other zero field means the default beside it.
type SignInOptions struct {
	// Secret signs the links and the sessions: at least 32 bytes, the
	// same on every replica.
	Secret []byte
	// BaseURL is where the dashboard is mounted, such as
	// "https://example.com/dashboard/": links start with it, the session
	// cookie is sent only below its path, and only over https when it is
	// https.
	BaseURL string
	// Links remembers the links used, so that each signs in once. Nil
	// means a MemoryLinks: one process.
	Links accounts.LinkStore
	// Sessions remembers when each account signed out, so that signing
	// out ends its sessions on every replica, a copy of the cookie too.
	// Nil means a MemorySessions: one process.
	Sessions accounts.SessionStore
	// LinkTTL is how long a link works. Zero means 15 minutes.
	LinkTTL time.Duration
	// IdleTimeout ends a session no request has used for that long. Zero
	// means an hour.
	IdleTimeout time.Duration
	// SessionTTL ends a session however much it is used. Zero means 12
	// hours.
	SessionTTL time.Duration
	// Attempts limits the sign-ins tried from one client address, keyed
	// by the digest of "signin " and the address. Nil means at most 5 at
	// once, and one more every 12 seconds (MemoryRateLimiter: one
	// process).
	Attempts upscale.RateLimiter
	// ClientAddress names the client of a request, for every allowance
	// kept per client (Attempts, EmailOptions.Limit) and in the log. Nil
	// means the address of its peer; behind a reverse proxy, give
	// ProxiedClientAddress of the proxy's addresses, or every client
	// shares the proxy's allowance.
	ClientAddress func(r *http.Request) string
	// Email, when set, lets people ask for a sign-in link by email, and
	// open an account themselves.
	Email *EmailOptions
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
}

// SignIn signs an account's holder in to the dashboard with one-time
// links, made by the host (the standalone's "dashboard link" command),
// and keeps them signed in with a session cookie: signed, HttpOnly,
// SameSite=Lax, Secure behind https, ended by IdleTimeout, SessionTTL or
// signing out, which ends every session the account began until then
// (Sessions). Set it as Config.SignIn.
//
// A link opens a page with a button, and only that POST uses the link: a
// mail scanner that fetches the link does not spend it. Every link that
// does not work, used, expired or forged, gets the same answer.
type SignIn struct {
	opts   SignInOptions
	path   string // the cookie's: BaseURL's path
	secure bool
	mails  mailCounts
}

// NewSignIn returns a SignIn for opts.
func NewSignIn(opts SignInOptions) (*SignIn, error) {
	if len(opts.Secret) < 32 {
		return nil, errors.New("dashboard: SignInOptions.Secret must be at least 32 bytes")
	}
	base, err := url.Parse(opts.BaseURL)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("dashboard: SignInOptions.BaseURL %q is not an absolute http(s) URL", opts.BaseURL)
	}
	if !strings.HasSuffix(base.Path, "/") {
		base.Path += "/"
	}
	opts.BaseURL = base.String()
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Links == nil {
		opts.Links = accounts.NewMemoryLinks(accounts.MemoryLinksOptions{Now: opts.Now})
	}
	if opts.Sessions == nil {
		opts.Sessions = accounts.NewMemorySessions()
	}
	if opts.Attempts == nil {
		opts.Attempts = upscale.NewMemoryRateLimiter(upscale.MemoryRateLimiterOptions{PerSecond: 1.0 / 12, Burst: 5, Now: opts.Now})
	}
	if opts.ClientAddress == nil {
		opts.ClientAddress = ProxiedClientAddress(nil)
	}
	if e := opts.Email; e != nil {
		if e.Directory == nil || e.Outbox == nil {
			return nil, errors.New("dashboard: SignInOptions.Email needs a Directory and an Outbox")
		}
		if e.SignUps && e.Plan.Name == "" {
			return nil, errors.New("dashboard: SignInOptions.Email.SignUps needs the Plan accounts open on")
		}
		if e.MailsPerHour < 0 || (e.MailsPerHour != 0 && e.Budget != nil) {
			return nil, errors.New("dashboard: SignInOptions.Email takes a positive MailsPerHour or a Budget, which keeps its own rate, not both")
		}
		email := *e
		if email.Limit == nil {
			email.Limit = upscale.NewMemoryRateLimiter(upscale.MemoryRateLimiterOptions{PerSecond: 1.0 / (12 * 60), Burst: 5, Now: opts.Now})
		}
		if email.Budget == nil {
			perHour := cmp.Or(email.MailsPerHour, 1000)
			email.Budget = upscale.NewMemoryRateLimiter(upscale.MemoryRateLimiterOptions{PerSecond: float64(perHour) / 3600, Burst: perHour, Now: opts.Now})
		}
		opts.Email = &email
	}
	opts.LinkTTL = cmp.Or(opts.LinkTTL, 15*time.Minute)
	opts.IdleTimeout = cmp.Or(opts.IdleTimeout, time.Hour)
	opts.SessionTTL = cmp.Or(opts.SessionTTL, 12*time.Hour)
	return &SignIn{opts: opts, path: base.Path, secure: base.Scheme == "https"}, nil
}

// The audiences keep a link from serving as a session and the reverse.
const (
	linkAudience    = "upscale-dashboard-link"
	sessionAudience = "upscale-dashboard-session"
	sessionCookie   = "upscale_session"
)

// sessionClaims are a session's: Subject is the account, IssuedAt its
// start to the second, ExpiresAt its absolute end, Seen the last request
// that used it.
type sessionClaims struct {
	jwt.RegisteredClaims
	// Began is the session's start in Unix nanoseconds, which the
	// account's last sign-out is compared with: in whole seconds, a
	// session begun in the second before a sign-out and one begun in the
	// second after would look alike.
	Began int64            `json:"began"`
	Seen  *jwt.NumericDate `json:"seen"`
	// Email is the address whose link began the session, for the
	// header; "" for a link made for the account (Link).
	Email string `json:"email,omitempty"`
}

// linkClaims are a link's: Subject is the account it signs in, or, for a
// link that opens an account, Email is the address it opens it for, and
// Ref the share code of the account whose share link brought it, if any.
// To is the address a sign-in link was mailed to.
type linkClaims struct {
	jwt.RegisteredClaims
	Email string `json:"email,omitempty"`
	Ref   string `json:"ref,omitempty"`
	To    string `json:"to,omitempty"`
}

// Link returns a link that signs accountID in once, within LinkTTL.
func (s *SignIn) Link(accountID string) (string, error) {
	return s.newLink(linkClaims{RegisteredClaims: jwt.RegisteredClaims{Subject: accountID}})
}

// newLink signs claims as a link that works once, within LinkTTL.
func (s *SignIn) newLink(claims linkClaims) (string, error) {
	now := s.opts.Now()
	claims.ID, claims.Audience = strings.ToLower(rand.Text()), jwt.ClaimStrings{linkAudience}
	claims.IssuedAt, claims.ExpiresAt = jwt.NewNumericDate(now), jwt.NewNumericDate(now.Add(s.opts.LinkTTL))
	token, err := s.sign(claims)
	if err != nil {
		return "", err
	}
	return s.opts.BaseURL + "signin?" + url.Values{"token": {token}}.Encode(), nil
}

func (s *SignIn) sign(claims jwt.Claims) (string, error) {
	token, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(s.opts.Secret)
	if err != nil {
		return "", fmt.Errorf("dashboard: sign: %w", err)
	}
	return token, nil
}

// parse verifies token for audience into claims.
func (s *SignIn) parse(token, audience string, claims jwt.Claims) error {
	_, err := jwt.ParseWithClaims(token, claims,
		func(*jwt.Token) (any, error) { return s.opts.Secret, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(), jwt.WithAudience(audience), jwt.WithTimeFunc(s.opts.Now))
	return err
}

// link returns the claims of a link's token that works: an account's, or
// an address's while the SignIn opens accounts by email.
func (s *SignIn) link(token string) (linkClaims, bool) {
	var claims linkClaims
	if err := s.parse(token, linkAudience, &claims); err != nil || claims.ID == "" || (claims.Subject == "") == (claims.Email == "") {
		return claims, false
	}
	return claims, claims.Email == "" || s.opts.Email != nil
}

// attempt takes one sign-in attempt from the request's client's
// allowance, and says when to try again if there is none.
func (s *SignIn) attempt(r *http.Request) (allowed bool, retryAfter time.Duration, err error) {
	d, err := s.opts.Attempts.Allow(r.Context(), upscale.DigestKey("signin "+s.opts.ClientAddress(r)))
	return d.Allowed, d.RetryAfter, err
}

// useLink spends token and starts its account's session: false when the
// link does not work or was used.
func (s *SignIn) useLink(w http.ResponseWriter, r *http.Request, token string) (string, bool, error) {
	claims, ok := s.link(token)
	if !ok {
		return "", false, nil
	}
	if claims.Email != "" {
		// Opened before the link is spent: a link spent but for an
		// account that could not be opened would be lost. Opening twice
		// opens once.
		account, ok, err := s.accountFor(r.Context(), claims.Email, claims.Ref)
		if err != nil || !ok {
			return "", false, err
		}
		claims.Subject = account
	}
	first, err := s.opts.Links.UseLink(r.Context(), claims.ID, claims.ExpiresAt.Time)
	if err != nil || !first {
		return "", false, err
	}
	now := s.opts.Now()
	session := sessionClaims{RegisteredClaims: jwt.RegisteredClaims{
		Subject: claims.Subject, Audience: jwt.ClaimStrings{sessionAudience},
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(s.opts.SessionTTL)),
	}, Began: now.UnixNano(), Email: cmp.Or(claims.Email, claims.To)}
	return claims.Subject, true, s.setSession(w, session, now)
}

// setSession writes the session's cookie, seen at now.
func (s *SignIn) setSession(w http.ResponseWriter, session sessionClaims, now time.Time) error {
	session.Seen = jwt.NewNumericDate(now)
	token, err := s.sign(session)
	if err != nil {
		return err
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: token, Path: s.path, HttpOnly: true, Secure: s.secure, SameSite: http.SameSiteLaxMode,
		MaxAge: int(min(s.opts.IdleTimeout, session.ExpiresAt.Sub(now)).Seconds()),
	})
	return nil
}

// cookie returns the request's session cookie's claims, when it is one
// of ours and has not ended (SessionTTL), idle or not.
func (s *SignIn) cookie(r *http.Request) (sessionClaims, bool) {
	var claims sessionClaims
	cookie, err := r.Cookie(sessionCookie)
	if err != nil || s.parse(cookie.Value, sessionAudience, &claims) != nil || claims.Subject == "" || claims.Began == 0 || claims.Seen == nil {
		return sessionClaims{}, false
	}
	return claims, true
}

// signedOut reports whether session's account signed out at or after the
// session began.
func (s *SignIn) signedOut(ctx context.Context, session sessionClaims) (bool, error) {
	at, err := s.opts.Sessions.SignedOutAt(ctx, session.Subject)
	if err != nil {
		return false, fmt.Errorf("dashboard: when %s signed out: %w", session.Subject, err)
	}
	return !time.Unix(0, session.Began).After(at), nil
}

// session returns the request's session, when it has one that has neither
// idled out, ended, nor been signed out of; err when Sessions cannot say,
// and then no session.
func (s *SignIn) session(r *http.Request) (sessionClaims, bool, error) {
	session, ok := s.cookie(r)
	if !ok || s.opts.Now().Sub(session.Seen.Time) >= s.opts.IdleTimeout {
		return sessionClaims{}, false, nil
	}
	out, err := s.signedOut(r.Context(), session)
	if err != nil || out {
		return sessionClaims{}, false, err
	}
	return session, true, nil
}

// Account returns the account signed in for r, "" when none, and when
// Sessions cannot say whether it signed out.
func (s *SignIn) Account(r *http.Request) string {
	session, _, _ := s.session(r)
	return session.Subject
}

// touch renews session's idle time, at most once a minute.
func (s *SignIn) touch(w http.ResponseWriter, session sessionClaims) {
	if now := s.opts.Now(); now.Sub(session.Seen.Time) >= time.Minute {
		s.setSession(w, session, now)
	}
}

// signOut ends the request's session, and with it every session its
// account began until now, wherever the cookie was copied; it returns the
// account, "" when there was no session to end. A session idle for too
// long is signed out of too: its copy may have been kept busy. When the
// sign-out cannot be recorded the cookie stays, for another try.
func (s *SignIn) signOut(w http.ResponseWriter, r *http.Request) (string, error) {
	var account string
	if session, ok := s.cookie(r); ok {
		out, err := s.signedOut(r.Context(), session)
		if err == nil && !out {
			account = session.Subject
			err = s.opts.Sessions.SignOut(r.Context(), account, s.opts.Now())
		}
		if err != nil {
			return session.Subject, fmt.Errorf("dashboard: sign %s out: %w", session.Subject, err)
		}
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Path: s.path, HttpOnly: true, Secure: s.secure, SameSite: http.SameSiteLaxMode, MaxAge: -1})
	return account, nil
}
