package upscale

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// LinkSigner makes and checks the expiring links of BlobStores that serve
// their own items. A link is BaseURL/<key>?token=<JWT>, where the token is
// an HS256 JWT whose subject is the key and whose exp is the expiry, so a
// link can be neither extended nor pointed at another item.
type LinkSigner struct {
	base   *url.URL
	secret []byte
	now    func() time.Time
}

// NewLinkSigner returns a LinkSigner for links under baseURL, an absolute
// http or https URL. secret is the HMAC key: replicas that serve each
// other's links share it; nil means a random key, valid for this process
// only. now is the clock; nil means time.Now.
func NewLinkSigner(baseURL string, secret []byte, now func() time.Time) (*LinkSigner, error) {
	base, err := url.Parse(baseURL)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("link base URL %q is not an absolute http(s) URL", baseURL)
	}
	if base.RawQuery != "" || base.Fragment != "" {
		return nil, fmt.Errorf("link base URL %q must not have a query or fragment", baseURL)
	}
	if secret == nil {
		secret = []byte(rand.Text() + rand.Text())
	} else if len(secret) < 32 {
		return nil, fmt.Errorf("link secret must be at least 32 bytes, not %d", len(secret))
	}
	if now == nil {
		now = time.Now
	}
	return &LinkSigner{base: base, secret: bytes.Clone(secret), now: now}, nil
}

// URL returns the link that serves key until expires.
func (s *LinkSigner) URL(key string, expires time.Time) (string, error) {
	token, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
		Subject:   key,
		ExpiresAt: jwt.NewNumericDate(expires),
	}).SignedString(s.secret)
	if err != nil {
		return "", fmt.Errorf("sign link: %w", err)
	}
	u := s.base.JoinPath(key)
	u.RawQuery = url.Values{"token": {token}}.Encode()
	return u.String(), nil
}

// verify returns the key a request's link names, with its expiry, when the
// token is genuine and unexpired. Otherwise it returns ErrNotFound, so a
// forged or stale link is indistinguishable from a missing item.
func (s *LinkSigner) verify(r *http.Request) (string, time.Time, error) {
	key := path.Base(r.URL.Path)
	var claims jwt.RegisteredClaims
	_, err := jwt.ParseWithClaims(r.URL.Query().Get("token"), &claims,
		func(*jwt.Token) (any, error) { return s.secret, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithSubject(key),
		jwt.WithTimeFunc(s.now),
	)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("link %q: %w", key, ErrNotFound)
	}
	return key, claims.ExpiresAt.Time, nil
}

// BlobOpener opens the item stored under key for reading and returns its
// content type, or an error wrapping ErrNotFound. The handler closes content
// when the response is written; results can be hundreds of megabytes, so a
// store on disk should hand out the file itself, not a copy of its bytes.
type BlobOpener func(ctx context.Context, key string) (content io.ReadSeekCloser, contentType string, err error)

// Handler returns an http.Handler that serves the items of open behind the
// links this signer makes. It answers 404 for a forged, expired or unknown
// link, so callers learn nothing about which. It takes the key from the last
// element of the request path, so the host may mount it under any prefix.
func (s *LinkSigner) Handler(open BlobOpener) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		key, expires, err := s.verify(r)
		var content io.ReadSeekCloser
		var contentType string
		if err == nil {
			content, contentType, err = open(r.Context(), key)
		}
		if errors.Is(err, ErrNotFound) {
			http.NotFound(w, r)
			return
		}
		if err != nil {
			http.Error(w, "could not read the stored image; try again", http.StatusServiceUnavailable)
			return
		}
		defer content.Close()
		h := w.Header()
		h.Set("Content-Type", contentType)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "private, max-age="+strconv.Itoa(int(expires.Sub(s.now()).Seconds())))
		http.ServeContent(w, r, "", time.Time{}, content)
	})
}
