// Package recent keeps records by account and ID in memory for a while,
// the latest first: the in-memory call history and webhook log.
package recent

import (
	"slices"
	"sync"
	"time"

	"github.com/upscalekit/upscale/internal/periodic"
)

// Records keeps records of T by account and ID, at most PerAccount of an
// account's (the oldest go first), and forgets those whose time is past
// the retention, at most once a minute, as it is used. It is safe for
// concurrent use.
type Records[T any] struct {
	retention  time.Duration
	perAccount int
	now        func() time.Time
	at         func(T) time.Time

	mu        sync.Mutex
	byAccount map[string]map[string]T
	swept     periodic.Gate
}

// PerAccount is the most records Records keep of one account.
const PerAccount = 1000

// New returns empty Records that keep a record for retention after its
// time, at, by the clock now.
func New[T any](retention time.Duration, now func() time.Time, at func(T) time.Time) *Records[T] {
	return &Records[T]{retention: retention, perAccount: PerAccount, now: now, at: at, byAccount: map[string]map[string]T{}}
}

// Put keeps the record update makes of the one kept under account and
// id, the zero T when none is.
func (r *Records[T]) Put(account, id string, update func(kept T) T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweep()
	if r.byAccount[account] == nil {
		r.byAccount[account] = map[string]T{}
	}
	records := r.byAccount[account]
	records[id] = update(records[id])
	if len(records) > r.perAccount {
		oldest := ""
		for id, record := range records {
			if oldest == "" || r.at(record).Before(r.at(records[oldest])) {
				oldest = id
			}
		}
		delete(records, oldest)
	}
}

// List returns account's records within the retention for which keep
// holds, ordered by compare, at most limit (all for limit <= 0).
func (r *Records[T]) List(account string, keep func(T) bool, compare func(a, b T) int, limit int) []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweep()
	oldest := r.now().Add(-r.retention)
	list := []T{}
	for _, record := range r.byAccount[account] {
		if !r.at(record).Before(oldest) && keep(record) {
			list = append(list, record)
		}
	}
	slices.SortFunc(list, compare)
	if limit > 0 && limit < len(list) {
		list = list[:limit]
	}
	return list
}

// sweep forgets the records past the retention, once a minute at most.
// The caller holds r.mu.
func (r *Records[T]) sweep() {
	now := r.now()
	if !r.swept.Due(now) {
		return
	}
	for account, records := range r.byAccount {
		for id, record := range records {
			if now.Sub(r.at(record)) > r.retention {
				delete(records, id)
			}
		}
		if len(records) == 0 {
			delete(r.byAccount, account)
		}
	}
}
