package upscale

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"net/http"
	"strings"
)

// KeyStore resolves API keys to the accounts that own them. Hosts adapt
// their own user table to it; MemoryKeyStore is the in-memory default.
type KeyStore interface {
	// Authenticate returns the ID of the account that owns key. It returns
	// an error wrapping ErrUnauthorized when the key is unknown or revoked;
	// any other error is an outage of the store, not a verdict on the key.
	Authenticate(ctx context.Context, key string) (accountID string, err error)
}

// KeyAdmin is a KeyStore whose keys are managed through it. Every KeyStore
// of this module is one (MemoryKeyStore, CachedKeyStore over a KeyAdmin,
// sqlstore.Store), with one rule for duplicates, held by
// upscaletest.TestKeyStore.
type KeyAdmin interface {
	KeyStore
	// AddKey makes key authenticate as accountID. Adding a key that already
	// belongs to accountID changes nothing, so seeding from a file can be
	// repeated. It returns an error wrapping ErrKeyConflict when key
	// belongs to another account or was revoked (a revoked key never comes
	// back), one wrapping ErrNotFound when the store keeps accounts and
	// accountID is not one of them, and the error of ValidateKey for a key
	// of the wrong shape.
	AddKey(ctx context.Context, key, accountID string) error
	// RevokeKey makes key fail authentication from now on. It returns an
	// error wrapping ErrNotFound when key is unknown or already revoked.
	RevokeKey(ctx context.Context, key string) error
}

// KeyDigest is the SHA-256 of an API key: what a KeyStore keeps instead of
// the key itself.
type KeyDigest [sha256.Size]byte

// NewKey returns a new random API key: prefix (such as "upk_") followed by
// 26 lower-case base32 characters carrying 130 random bits.
func NewKey(prefix string) string { return prefix + strings.ToLower(rand.Text()) }

// DigestKey returns the digest under which a KeyStore keeps key.
func DigestKey(key string) KeyDigest { return sha256.Sum256([]byte(key)) }

// ValidateKey reports whether key has the shape of an API key this package
// accepts: 16 to 128 printable ASCII characters, no spaces.
func ValidateKey(key string) error {
	if len(key) < 16 || len(key) > 128 {
		return fmt.Errorf("an API key must be 16 to 128 characters long, not %d", len(key))
	}
	for i := 0; i < len(key); i++ {
		if key[i] <= ' ' || key[i] > '~' {
			return fmt.Errorf("an API key may hold only printable ASCII characters other than space (byte %d is not)", i)
		}
	}
	return nil
}

// bearerKey returns the key of an "Authorization: Bearer <key>" header. The
// scheme is case-insensitive (RFC 9110, 11.1). A request with no such
// header, several of them, or a key that fails ValidateKey has none.
func bearerKey(h http.Header) (string, bool) {
	values := h.Values("Authorization")
	if len(values) != 1 {
		return "", false
	}
	scheme, key, found := strings.Cut(values[0], " ")
	if !found || !strings.EqualFold(scheme, "Bearer") || ValidateKey(key) != nil {
		return "", false
	}
	return key, true
}

// signedInAccount is the context key of ForAccount.
type signedInAccount struct{}

// ForAccount returns ctx carrying accountID as the caller of the requests
// made with it, in place of an API key: how a page that has signed its
// user in (the dashboard's Try it) sends a request down the API's own
// path, through ServeHTTP: admission and the account's share of the
// places, the body's checks, the quota, the fetch policy, the engine and
// the link. The key's lookup and the RateLimiter, which limits keys, are
// skipped. Only code in the process sets it; no part of a request does.
func ForAccount(ctx context.Context, accountID string) context.Context {
	return context.WithValue(ctx, signedInAccount{}, accountID)
}
