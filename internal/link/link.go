// Package link makes and checks the expiring, signed links of the
// BlobStores that serve their own results (upscale.MemoryBlobStore and
// dirstore.Store), and serves what they point at.
//
// A link is BaseURL/<key>?token=<JWT>, where the token is an HS256 JWT whose
// subject is the key and whose exp is the expiry, so a link can be neither
// extended nor pointed at another item.
package link

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// MinSecretBytes is the shortest HMAC key New accepts.
const MinSecretBytes = 32

// Signer makes the links under one base URL and serves them.
type Signer struct {
	base   *url.URL
	secret []byte
	now    func() time.Time
}

// New returns a Signer for links under baseURL, an absolute http or https
// URL without query or fragment. secret is the HMAC key: replicas that serve
// each other's links share it; nil means a random key, valid for this
// process only. now is the clock; nil means time.Now.
func New(baseURL string, secret []byte, now func() time.Time) (*Signer, error) {
	base, err := url.Parse(baseURL)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("link base URL %q is not an absolute http(s) URL", baseURL)
	}
	if base.RawQuery != "" || base.Fragment != "" {
		return nil, fmt.Errorf("link base URL %q must not have a query or fragment", baseURL)
	}
	if secret == nil {
		secret = NewSecret()
	} else if len(secret) < MinSecretBytes {
		return nil, fmt.Errorf("link secret must be at least %d bytes, not %d", MinSecretBytes, len(secret))
	}
	if now == nil {
		now = time.Now
	}
	return &Signer{base: base, secret: bytes.Clone(secret), now: now}, nil
}

// NewSecret returns a random HMAC key of 52 printable characters.
func NewSecret() []byte { return []byte(rand.Text() + rand.Text()) }

// Path is the URL path every link starts with, ending in a slash: where
// the host routes requests to Handler.
func (s *Signer) Path() string {
	return strings.TrimSuffix(s.base.EscapedPath(), "/") + "/"
}

// URL returns the link that serves key until expires.
func (s *Signer) URL(key string, expires time.Time) (string, error) {
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

var errBadLink = errors.New("forged or expired link")

// verify returns the key a request's link names, with its expiry, when the
// token is genuine and unexpired.
func (s *Signer) verify(r *http.Request) (string, time.Time, error) {
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
		return "", time.Time{}, errBadLink
	}
	return key, claims.ExpiresAt.Time, nil
}

// Opener opens the item stored under key for reading and returns its
// content type, or an error wrapping fs.ErrNotExist when there is none.
// The handler closes content when the response is written; results can be
// hundreds of megabytes, so a store on disk should hand out the file
// itself, not a copy of its bytes.
type Opener func(ctx context.Context, key string) (content io.ReadSeekCloser, contentType string, err error)

// Handler serves the items of open behind the links this Signer makes. It
// answers 404 for a forged, expired or unknown link, so callers learn
// nothing about which. It takes the key from the last element of the
// request path, so the host may mount it under any prefix.
func (s *Signer) Handler(open Opener) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		key, expires, err := s.verify(r)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		content, contentType, err := open(r.Context(), key)
		if errors.Is(err, fs.ErrNotExist) {
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
