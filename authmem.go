package upscale

import (
	"context"
	"fmt"
	"sync"
)

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

var _ KeyAdmin = (*MemoryKeyStore)(nil)

// NewMemoryKeyStore returns an empty MemoryKeyStore.
func NewMemoryKeyStore() *MemoryKeyStore {
	return &MemoryKeyStore{keys: make(map[KeyDigest]memoryKey)}
}

// AddKey implements KeyAdmin. It keeps no accounts, so any accountID will
// do.
func (s *MemoryKeyStore) AddKey(_ context.Context, key, accountID string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	d := DigestKey(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if k, known := s.keys[d]; known {
		if k.revoked || k.accountID != accountID {
			return fmt.Errorf("add key: %w", ErrKeyConflict)
		}
		return nil
	}
	s.keys[d] = memoryKey{accountID: accountID}
	return nil
}

// RevokeKey implements KeyAdmin.
func (s *MemoryKeyStore) RevokeKey(_ context.Context, key string) error {
	d := DigestKey(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.keys[d]
	if !ok || k.revoked {
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
