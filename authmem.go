package upscale

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// MemoryKeyStore is a KeyStore held in process memory. It keeps only the
// SHA-256 digest of each key, and what KeyInfo shows of it. Lookups go by
// digest, so the time a lookup takes depends on the digest of the
// presented key, never on how much of a real key it matches: timing
// reveals nothing that helps guess a key. It is safe for concurrent use.
type MemoryKeyStore struct {
	mu   sync.RWMutex
	keys map[KeyDigest]*memoryKey
	now  func() time.Time
}

type memoryKey struct {
	accountID string
	info      KeyInfo
}

var (
	_ KeyLister = (*MemoryKeyStore)(nil)
	_ KeyAdmin  = (*MemoryKeyStore)(nil)
)

// NewMemoryKeyStore returns an empty MemoryKeyStore.
func NewMemoryKeyStore() *MemoryKeyStore {
	return &MemoryKeyStore{keys: make(map[KeyDigest]*memoryKey), now: time.Now}
}

// AddKey implements KeyAdmin. It keeps no accounts, so any accountID will
// do.
func (s *MemoryKeyStore) AddKey(ctx context.Context, key, accountID string) error {
	_, err := s.AddNamedKey(ctx, key, accountID, "")
	return err
}

// AddNamedKey implements KeyLister. A key added again to its own account
// keeps its name.
func (s *MemoryKeyStore) AddNamedKey(_ context.Context, key, accountID, name string) (KeyInfo, error) {
	if err := ValidateKey(key); err != nil {
		return KeyInfo{}, err
	}
	if err := ValidateKeyName(name); err != nil {
		return KeyInfo{}, err
	}
	d := DigestKey(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if k, known := s.keys[d]; known {
		if !k.info.Revoked.IsZero() || k.accountID != accountID {
			return KeyInfo{}, fmt.Errorf("add key: %w", ErrKeyConflict)
		}
		return k.info, nil
	}
	k := &memoryKey{accountID: accountID, info: KeyInfo{ID: KeyID(key), Hint: KeyHint(key), Name: name, Created: s.now()}}
	s.keys[d] = k
	return k.info, nil
}

// RevokeKey implements KeyAdmin.
func (s *MemoryKeyStore) RevokeKey(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.revoke(s.keys[DigestKey(key)])
}

// RevokeKeyID implements KeyLister.
func (s *MemoryKeyStore) RevokeKeyID(_ context.Context, accountID, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range s.keys {
		if k.info.ID == id && k.accountID == accountID {
			return s.revoke(k)
		}
	}
	return fmt.Errorf("revoke key: %w", ErrNotFound)
}

// revoke revokes k, if there is one; s.mu is held.
func (s *MemoryKeyStore) revoke(k *memoryKey) error {
	if k == nil || !k.info.Revoked.IsZero() {
		return fmt.Errorf("revoke key: %w", ErrNotFound)
	}
	k.info.Revoked = s.now()
	return nil
}

// ListKeys implements KeyLister.
func (s *MemoryKeyStore) ListKeys(_ context.Context, accountID string) ([]KeyInfo, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	keys := []KeyInfo{}
	for _, k := range s.keys {
		if k.accountID == accountID {
			keys = append(keys, k.info)
		}
	}
	sortKeys(keys)
	return keys, nil
}

// Authenticate implements KeyStore, and records the key's use.
func (s *MemoryKeyStore) Authenticate(_ context.Context, key string) (string, error) {
	d := DigestKey(key)
	s.mu.RLock()
	k, ok := s.keys[d]
	if !ok || !k.info.Revoked.IsZero() {
		s.mu.RUnlock()
		return "", ErrUnauthorized
	}
	accountID, lastUsed := k.accountID, k.info.LastUsed
	s.mu.RUnlock()
	if now := s.now(); now.Sub(lastUsed) >= KeyUseResolution {
		s.mu.Lock()
		k.info.LastUsed = now
		s.mu.Unlock()
	}
	return accountID, nil
}
