package upscale

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/upscalekit/upscale/internal/periodic"
)

// MemoryIdempotencyStore is an IdempotencyStore held in process memory:
// the default for one process. It forgets its keys on restart, and
// replicas do not see each other's (use sqlstore for those). Expired keys
// are dropped as new ones are claimed, at most once a minute, so it needs
// no goroutine. It is safe for concurrent use.
type MemoryIdempotencyStore struct {
	now func() time.Time

	mu    sync.Mutex
	keys  map[memoryIdempotencyKey]*memoryIdempotent
	swept periodic.Gate
}

type memoryIdempotencyKey struct{ account, key string }

type memoryIdempotent struct {
	fingerprint [32]byte
	token       string
	answer      *IdempotentAnswer // nil while the request runs; prepared while its Reservation is set
	leaseEnds   time.Time
	expires     time.Time
}

// kept reports whether k's answer is final.
func (k *memoryIdempotent) kept() bool { return k.answer != nil && k.answer.Reservation == "" }

var _ IdempotencyStore = (*MemoryIdempotencyStore)(nil)

// MemoryIdempotencyStoreOptions configures a MemoryIdempotencyStore.
type MemoryIdempotencyStoreOptions struct {
	// Now is the clock that ends leases and TTLs. Nil means time.Now.
	Now func() time.Time
}

// NewMemoryIdempotencyStore returns an empty MemoryIdempotencyStore.
func NewMemoryIdempotencyStore(opts MemoryIdempotencyStoreOptions) *MemoryIdempotencyStore {
	return &MemoryIdempotencyStore{now: clock(opts.Now), keys: make(map[memoryIdempotencyKey]*memoryIdempotent)}
}

// Claim implements IdempotencyStore.
func (s *MemoryIdempotencyStore) Claim(_ context.Context, c IdempotencyClaim) (*IdempotentAnswer, error) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(now)
	id := memoryIdempotencyKey{c.AccountID, c.Key}
	k, ok := s.keys[id]
	if !ok || !now.Before(k.expires) || (k.answer == nil && !now.Before(k.leaseEnds)) {
		s.keys[id] = &memoryIdempotent{fingerprint: c.Fingerprint, token: c.Token, leaseEnds: now.Add(c.Lease), expires: now.Add(c.TTL)}
		return nil, nil
	}
	switch {
	case k.fingerprint != c.Fingerprint:
		return nil, fmt.Errorf("idempotency key %q: %w", c.Key, ErrIdempotencyKeyReused)
	case !k.kept() && now.Before(k.leaseEnds):
		return nil, &InFlightError{Key: c.Key, LeaseEnds: k.leaseEnds}
	case !k.kept(): // prepared, and its request is gone: take it over
		k.token, k.leaseEnds = c.Token, now.Add(c.Lease)
	}
	answer := *k.answer
	return &answer, nil
}

// Prepare implements IdempotencyStore.
func (s *MemoryIdempotencyStore) Prepare(_ context.Context, c IdempotencyClaim, answer IdempotentAnswer) error {
	return s.set(c, &answer)
}

// Keep implements IdempotencyStore.
func (s *MemoryIdempotencyStore) Keep(_ context.Context, c IdempotencyClaim, answer IdempotentAnswer) error {
	answer.Reservation = ""
	return s.set(c, &answer)
}

// set records the answer of c's request, while c holds the key and no
// answer is kept.
func (s *MemoryIdempotencyStore) set(c IdempotencyClaim, answer *IdempotentAnswer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.keys[memoryIdempotencyKey{c.AccountID, c.Key}]
	if !ok || k.token != c.Token || k.kept() {
		return fmt.Errorf("idempotency key %q: %w", c.Key, ErrNotFound)
	}
	k.answer = answer
	return nil
}

// Forget implements IdempotencyStore.
func (s *MemoryIdempotencyStore) Forget(_ context.Context, c IdempotencyClaim) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := memoryIdempotencyKey{c.AccountID, c.Key}
	if k, ok := s.keys[id]; ok && k.token == c.Token && !k.kept() {
		delete(s.keys, id)
	}
	return nil
}

// sweep drops expired keys, at most once a minute.
func (s *MemoryIdempotencyStore) sweep(now time.Time) {
	if !s.swept.Due(now) {
		return
	}
	for id, k := range s.keys {
		if !now.Before(k.expires) {
			delete(s.keys, id)
		}
	}
}
