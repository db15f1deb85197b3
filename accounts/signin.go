package accounts

import (
	"context"
	"sync"
	"time"
)

// LinkStore remembers which sign-in links were used. sqlstore.Store is
// one (for replicas); accountstest.TestLinkStore is the contract.
type LinkStore interface {
	// UseLink records that the link id was used, and reports whether it
	// is the first use. It may forget id once expires has passed, when
	// the link no longer works anyway.
	UseLink(ctx context.Context, id string, expires time.Time) (first bool, err error)
}

// SessionStore remembers when each account last signed out of the
// dashboard: dashboard.SignIn refuses every session of the account that
// began at or before then, so that signing out ends a copy of the cookie
// too, on every replica. It asks the store once per request that carries
// a session.
// sqlstore.Store is one (for replicas); accountstest.TestSessionStore is
// the contract.
//
// The times are the replicas' clocks, which must agree: a session begun
// less than their difference before a sign-out may outlive it.
//
// Either method returns an error wrapping upscale.ErrUnavailable when the
// store cannot be reached for now; the dashboard then answers 503, taking
// no session on trust.
type SessionStore interface {
	// SignOut records that accountID signed out at at. It keeps the
	// latest time it was given: an earlier one (from a replica whose clock
	// is behind) changes nothing.
	SignOut(ctx context.Context, accountID string, at time.Time) error
	// SignedOutAt returns the latest time SignOut recorded for accountID,
	// to the nanosecond, and the zero Time when it recorded none: an
	// account that never signed out, or that the store does not know, is
	// not an error.
	SignedOutAt(ctx context.Context, accountID string) (time.Time, error)
}

var (
	_ LinkStore    = (*MemoryLinks)(nil)
	_ SessionStore = (*MemorySessions)(nil)
)

// MemoryLinks is a LinkStore in process memory, for one process. It is
// safe for concurrent use.
type MemoryLinks struct {
	mu   sync.Mutex
	used map[string]time.Time // link ID → its expiry
	now  func() time.Time
}

// MemoryLinksOptions configures a MemoryLinks.
type MemoryLinksOptions struct {
	// Now is its clock, the SignIn's. Nil means time.Now.
	Now func() time.Time
}

// NewMemoryLinks returns an empty MemoryLinks.
func NewMemoryLinks(opts MemoryLinksOptions) *MemoryLinks {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &MemoryLinks{used: map[string]time.Time{}, now: opts.Now}
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

// MemorySessions is a SessionStore in process memory, for one process. It
// is safe for concurrent use.
type MemorySessions struct {
	mu  sync.Mutex
	out map[string]time.Time // account → when it last signed out
}

// NewMemorySessions returns a MemorySessions in which no account has
// signed out.
func NewMemorySessions() *MemorySessions {
	return &MemorySessions{out: map[string]time.Time{}}
}

// SignOut implements SessionStore.
func (m *MemorySessions) SignOut(_ context.Context, accountID string, at time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if at.After(m.out[accountID]) {
		m.out[accountID] = at
	}
	return nil
}

// SignedOutAt implements SessionStore.
func (m *MemorySessions) SignedOutAt(_ context.Context, accountID string) (time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.out[accountID], nil
}
