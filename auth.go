package upscale

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"net/http"
	"strings"
	"sync"
)

// KeyStore resolves API keys to the accounts that own them. Hosts adapt
// their own user table to it; MemoryKeyStore is the in-memory default.
type KeyStore interface {
	// Authenticate returns the ID of the account that owns key. It returns
	// an error wrapping ErrUnauthorized when the key is unknown or revoked;
	// any other error is an outage of the store, not a verdict on the key.
	Authenticate(ctx context.Context, key string) (accountID string, err error)
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

// MemoryKeyStore is a KeyStore held in process memory. It keeps only the
// SHA-256 digest of each key. Lookups go by digest, so the time a lookup
// takes depends on the digest of the presented key, never on how much of
// a real key it matches: timing reveals nothing that helps guess a key.
// It is safe for concurrent use.
type MemoryKeyStore struct {
	mu   sync.RWMutex
	keys map[KeyDigest]memoryKey
}

type memoryKey struct {
	accountID string
	revoked   bool
}

var _ KeyStore = (*MemoryKeyStore)(nil)

// NewMemoryKeyStore returns an empty MemoryKeyStore.
func NewMemoryKeyStore() *MemoryKeyStore {
	return &MemoryKeyStore{keys: make(map[KeyDigest]memoryKey)}
}

// Add makes key authenticate as accountID. It refuses a key that fails
// ValidateKey or that is already known, revoked or not.
func (s *MemoryKeyStore) Add(_ context.Context, key, accountID string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	d := DigestKey(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.keys[d]; dup {
		return fmt.Errorf("key already exists")
	}
	s.keys[d] = memoryKey{accountID: accountID}
	return nil
}

// Revoke makes key fail authentication from now on. It returns an error
// wrapping ErrNotFound when the key is unknown.
func (s *MemoryKeyStore) Revoke(_ context.Context, key string) error {
	d := DigestKey(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.keys[d]
	if !ok {
		return fmt.Errorf("revoke key: %w", ErrNotFound)
	}
	k.revoked = true
	s.keys[d] = k
	return nil
}

// Authenticate implements KeyStore.
func (s *MemoryKeyStore) Authenticate(_ context.Context, key string) (string, error) {
	s.mu.RLock()
	k, ok := s.keys[DigestKey(key)]
	s.mu.RUnlock()
	if !ok || k.revoked {
		return "", ErrUnauthorized
	}
	return k.accountID, nil
}
