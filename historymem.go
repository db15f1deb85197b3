package upscale

import (
	"cmp"
	"context"
	"time"

	"github.com/upscalekit/upscale/internal/recent"
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
	calls *recent.Records[Call]
}

var _ CallHistory = (*MemoryCallHistory)(nil)

// NewMemoryCallHistory returns an empty MemoryCallHistory.
func NewMemoryCallHistory(opts MemoryCallHistoryOptions) *MemoryCallHistory {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &MemoryCallHistory{calls: recent.New(cmp.Or(opts.Retention, DefaultCallRetention), opts.Now,
		func(c Call) time.Time { return c.At })}
}

// RecordCall implements CallHistory.
func (m *MemoryCallHistory) RecordCall(_ context.Context, c Call) error {
	m.calls.Put(c.AccountID, c.ID, func(Call) Call { return c })
	return nil
}

// Calls implements CallHistory.
func (m *MemoryCallHistory) Calls(_ context.Context, accountID string, q CallQuery) ([]Call, error) {
	asked := func(c Call) bool { return !c.At.Before(q.Since) && (q.KeyID == "" || c.KeyID == q.KeyID) }
	latestEndFirst := func(a, b Call) int { return cmp.Or(b.At.Compare(a.At), cmp.Compare(a.ID, b.ID)) }
	return m.calls.List(accountID, asked, latestEndFirst, CallLimit(q.Limit)), nil
}
