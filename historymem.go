package upscale

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/upscalekit/upscale/internal/periodic"
)

// MemoryCallHistoryOptions configures a MemoryCallHistory.
type MemoryCallHistoryOptions struct {
	// Retention is how long a call is kept after it ended. Zero means
	// DefaultCallRetention.
	Retention time.Duration
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
}

// MemoryCallHistory is a CallHistory in memory, for one process: it
// forgets every call on restart, and the calls past Retention as it is
// used. It is safe for concurrent use.
type MemoryCallHistory struct {
	opts MemoryCallHistoryOptions

	mu    sync.Mutex
	calls map[string]map[string]Call // by account, then ID
	swept periodic.Gate
}

var _ CallHistory = (*MemoryCallHistory)(nil)

// NewMemoryCallHistory returns an empty MemoryCallHistory.
func NewMemoryCallHistory(opts MemoryCallHistoryOptions) *MemoryCallHistory {
	opts.Retention = cmp.Or(opts.Retention, DefaultCallRetention)
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &MemoryCallHistory{opts: opts, calls: map[string]map[string]Call{}}
}

// RecordCall implements CallHistory.
func (m *MemoryCallHistory) RecordCall(_ context.Context, c Call) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sweep()
	if m.calls[c.AccountID] == nil {
		m.calls[c.AccountID] = map[string]Call{}
	}
	m.calls[c.AccountID][c.ID] = c
	return nil
}

// Calls implements CallHistory.
func (m *MemoryCallHistory) Calls(_ context.Context, accountID string, q CallQuery) ([]Call, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sweep()
	since := q.Since
	if oldest := m.opts.Now().Add(-m.opts.Retention); since.Before(oldest) {
		since = oldest
	}
	calls := []Call{}
	for _, c := range m.calls[accountID] {
		if !c.At.Before(since) && (q.KeyID == "" || c.KeyID == q.KeyID) {
			calls = append(calls, c)
		}
	}
	slices.SortFunc(calls, latestEndFirst)
	return calls[:min(len(calls), cmp.Or(q.Limit, 100))], nil
}

// latestEndFirst orders calls by their end, the latest first, then by ID.
func latestEndFirst(a, b Call) int {
	return cmp.Or(b.At.Compare(a.At), cmp.Compare(a.ID, b.ID))
}

// sweep forgets the calls past Retention, once a minute at most. The
// caller holds m.mu.
func (m *MemoryCallHistory) sweep() {
	now := m.opts.Now()
	if !m.swept.Due(now) {
		return
	}
	for account, calls := range m.calls {
		for id, c := range calls {
			if now.Sub(c.At) > m.opts.Retention {
				delete(calls, id)
			}
		}
		if len(calls) == 0 {
			delete(m.calls, account)
		}
	}
}
