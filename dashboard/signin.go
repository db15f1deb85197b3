package dashboard

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/upscalekit/upscale"
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
	Links LinkStore
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
	// ClientAddress names the client of a request, for Attempts. Nil
	// means the host of its RemoteAddr; behind a proxy, give the address
	// the proxy saw, or every client shares the proxy's allowance.
	ClientAddress func(r *http.Request) string
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
}

// LinkStore remembers which sign-in links were used. sqlstore.Store is
// one (for replicas); upscaletest.TestLinkStore is the contract.
type LinkStore interface {
	// UseLink records that the link id was used, and reports whether it
	// is the first use. It may forget id once expires has passed, when
	// the link no longer works anyway.
	UseLink(ctx context.Context, id string, expires time.Time) (first bool, err error)
}

// SignIn signs an account's holder in to the dashboard with one-time
// links, made by the host (the standalone's "dashboard link" command),
// and keeps them signed in with a session cookie: signed, HttpOnly,
// SameSite=Lax, Secure behind https, ended by IdleTimeout, SessionTTL or
// signing out. Set it as Config.SignIn.
//
// A link opens a page with a button, and only that POST uses the link: a
// mail scanner that fetches the link does not spend it. Every link that
// does not work, used, expired or forged, gets the same answer.
type SignIn struct {
	opts   SignInOptions
	path   string // the cookie's: BaseURL's path
	secure bool
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
		opts.Links = NewMemoryLinks(opts.Now)
	}
	if opts.Attempts == nil {
		opts.Attempts = upscale.NewMemoryRateLimiter(upscale.MemoryRateLimiterOptions{PerSecond: 1.0 / 12, Burst: 5, Now: opts.Now})
	}
	if opts.ClientAddress == nil {
		opts.ClientAddress = func(r *http.Request) string {
			host, _, err := net.SplitHostPort(r.RemoteAddr)
			if err != nil {
				return r.RemoteAddr
			}
			return host
		}
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
// start, ExpiresAt its absolute end, Seen the last request that used it.
type sessionClaims struct {
	jwt.RegisteredClaims
	Seen *jwt.NumericDate `json:"seen"`
}

// Link returns a link that signs accountID in once, within LinkTTL.
func (s *SignIn) Link(accountID string) (string, error) {
	now := s.opts.Now()
	token, err := s.sign(jwt.RegisteredClaims{
		Subject: accountID, ID: strings.ToLower(rand.Text()), Audience: jwt.ClaimStrings{linkAudience},
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(s.opts.LinkTTL)),
	})
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

// link returns the account and ID of a link's token that works.
func (s *SignIn) link(token string) (jwt.RegisteredClaims, bool) {
	var claims jwt.RegisteredClaims
	if err := s.parse(token, linkAudience, &claims); err != nil || claims.Subject == "" || claims.ID == "" {
		return claims, false
	}
	return claims, true
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
	first, err := s.opts.Links.UseLink(r.Context(), claims.ID, claims.ExpiresAt.Time)
	if err != nil || !first {
		return "", false, err
	}
	now := s.opts.Now()
	session := sessionClaims{RegisteredClaims: jwt.RegisteredClaims{
		Subject: claims.Subject, Audience: jwt.ClaimStrings{sessionAudience},
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(s.opts.SessionTTL)),
	}}
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

// session returns the request's session, when it has one that has neither
// idled out nor ended.
func (s *SignIn) session(r *http.Request) (sessionClaims, bool) {
	var claims sessionClaims
	cookie, err := r.Cookie(sessionCookie)
	if err != nil || s.parse(cookie.Value, sessionAudience, &claims) != nil || claims.Subject == "" || claims.Seen == nil {
		return claims, false
	}
	return claims, s.opts.Now().Sub(claims.Seen.Time) < s.opts.IdleTimeout
}

// Account returns the account signed in for r, "" when none: what
// Config.Account is when Config.SignIn is set.
func (s *SignIn) Account(r *http.Request) string {
	session, ok := s.session(r)
	if !ok {
		return ""
	}
	return session.Subject
}

// touch renews the session's idle time, at most once a minute.
func (s *SignIn) touch(w http.ResponseWriter, r *http.Request) {
	session, ok := s.session(r)
	if now := s.opts.Now(); ok && now.Sub(session.Seen.Time) >= time.Minute {
		s.setSession(w, session, now)
	}
}

// signOut ends the request's session.
func (s *SignIn) signOut(w http.ResponseWriter) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Path: s.path, HttpOnly: true, Secure: s.secure, SameSite: http.SameSiteLaxMode, MaxAge: -1})
}

// MemoryLinks is a LinkStore in process memory, for one process. It is
// safe for concurrent use.
type MemoryLinks struct {
	mu   sync.Mutex
	used map[string]time.Time // link ID → its expiry
	now  func() time.Time
}

// NewMemoryLinks returns an empty MemoryLinks on the clock now, the
// SignIn's (nil means time.Now).
func NewMemoryLinks(now func() time.Time) *MemoryLinks {
	if now == nil {
		now = time.Now
	}
	return &MemoryLinks{used: map[string]time.Time{}, now: now}
}

// UseLink implements LinkStore. It forgets expired links as it goes.
func (m *MemoryLinks) UseLink(_ context.Context, id string, expires time.Time) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	for used, at := range m.used {
		if !now.Before(at) {
			delete(m.used, used)
		}
	}
	if _, ok := m.used[id]; ok {
		return false, nil
	}
	m.used[id] = expires
	return true, nil
}
