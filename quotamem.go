package upscale

import (
	"context"
	"crypto/rand"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/upscalekit/upscale/internal/periodic"
)

// MemoryLedger is a QuotaLedger held in process memory, for one process and
// for tests: it forgets every balance on restart. It remembers a committed
// reservation for CommitMemory, so that a repeated Commit
// is answered as the contract says, and the count of charges per account,
// day and pool, for UsageByDay. It is safe for concurrent use.
type MemoryLedger struct {
	opts LedgerOptions

	mu        sync.Mutex
	accounts  map[string]*memoryAccount
	holds     map[string]memoryHold
	committed map[string]time.Time // reservation ID → when it was committed
	charged   map[chargeDay]int64  // charges per account, day and pool, for UsageByDay
	first     map[string]time.Time // each account's first charge, for FirstCharges
	billing   memoryBilling
	swept     periodic.Gate
}

// chargeDay counts an account's charges of one pool on one day.
type chargeDay struct {
	accountID string
	day       int64 // dayNumber
	pool      Pool
}

type memoryAccount struct {
	Account
	freeMonth string // the month freeUsed counts
	freeUsed  int64
}

type memoryHold struct {
	accountID string
	pool      Pool
	month     string
	expires   time.Time
}

var (
	_ ReservationHolder  = (*MemoryLedger)(nil)
	_ ReservationExpirer = (*MemoryLedger)(nil)
	_ UsageReporter      = (*MemoryLedger)(nil)
	_ FirstCharger       = (*MemoryLedger)(nil)
)

// NewMemoryLedger returns an empty MemoryLedger.
func NewMemoryLedger(opts LedgerOptions) *MemoryLedger {
	return &MemoryLedger{
		opts:      opts.WithDefaults(),
		accounts:  make(map[string]*memoryAccount),
		holds:     make(map[string]memoryHold),
		committed: make(map[string]time.Time),
		charged:   make(map[chargeDay]int64),
		first:     make(map[string]time.Time),
		billing:   memoryBilling{grants: map[string]*Purchase{}, reversals: map[string]Reversed{}, terms: map[string]PlanTerms{}},
	}
}

// PutAccount creates an account or replaces its plan and balances. The free
// images already used this month stay used.
func (l *MemoryLedger) PutAccount(_ context.Context, a Account) error {
	if a.Credits < 0 || a.ShareBonus < 0 {
		return fmt.Errorf("account %q: balances cannot be negative", a.ID)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if acc, ok := l.accounts[a.ID]; ok {
		acc.Account = a
		return nil
	}
	l.accounts[a.ID] = &memoryAccount{Account: a}
	return nil
}

// account returns the account with its free pool rolled over to the month of
// now. The caller holds l.mu.
func (l *MemoryLedger) account(id string, now time.Time) (*memoryAccount, error) {
	acc, ok := l.accounts[id]
	if !ok {
		return nil, fmt.Errorf("account %q: %w", id, ErrNotFound)
	}
	if m := Month(now); acc.freeMonth != m {
		acc.freeMonth, acc.freeUsed = m, 0
	}
	return acc, nil
}

func (acc *memoryAccount) balance() Balance {
	return Balance{
		Plan:       acc.Plan,
		Free:       max(acc.Plan.MonthlyImages-acc.freeUsed, 0),
		ShareBonus: acc.ShareBonus,
		Credits:    acc.Credits,
	}
}

// add moves n units into (n > 0) or out of (n < 0) one pool.
func (acc *memoryAccount) add(pool Pool, month string, n int64) {
	switch pool {
	case PoolFree:
		if month == acc.freeMonth { // last month's free units are gone anyway
			acc.freeUsed -= n
		}
	case PoolShareBonus:
		acc.ShareBonus += n
	case PoolCredit:
		acc.Credits += n
	}
}

// lock takes l.mu and brings the ledger up to the clock: reservations past
// their TTL are given back first. It returns the time it used; the caller
// unlocks l.mu.
func (l *MemoryLedger) lock() time.Time {
	now := l.opts.Now()
	l.mu.Lock()
	l.expireHolds(now)
	if l.swept.Due(now) {
		for id, at := range l.committed {
			if now.Sub(at) > CommitMemory {
				delete(l.committed, id)
			}
		}
	}
	return now
}

// expireHolds gives back the units of reservations past their TTL. The
// caller holds l.mu.
func (l *MemoryLedger) expireHolds(now time.Time) {
	for id, h := range l.holds {
		if now.After(h.expires) {
			l.endReservation(id, h, true, now)
		}
	}
}

// endReservation ends reservation id, h: its unit kept spent (a commit)
// or given back (giveBack: a release or an expiry). The caller holds l.mu.
func (l *MemoryLedger) endReservation(id string, h memoryHold, giveBack bool, now time.Time) {
	delete(l.holds, id)
	if !giveBack {
		l.committed[id] = now
		l.charged[chargeDay{h.accountID, dayNumber(now), h.pool}]++
		if _, ok := l.first[h.accountID]; !ok {
			l.first[h.accountID] = now
		}
		return
	}
	if acc, err := l.account(h.accountID, now); err == nil {
		acc.add(h.pool, h.month, 1)
	}
}

// Reserve implements QuotaLedger.
func (l *MemoryLedger) Reserve(_ context.Context, accountID string, needsPaid bool) (Reservation, error) {
	now := l.lock()
	defer l.mu.Unlock()
	acc, err := l.account(accountID, now)
	if err != nil {
		return Reservation{}, err
	}
	pool, err := ChoosePool(acc.balance(), needsPaid)
	if err != nil {
		return Reservation{}, err
	}
	id := rand.Text()
	acc.add(pool, acc.freeMonth, -1)
	l.holds[id] = memoryHold{accountID: accountID, pool: pool, month: acc.freeMonth, expires: now.Add(l.opts.ReservationTTL)}
	return Reservation{ID: id, AccountID: accountID, Pool: pool, Plan: acc.Plan}, nil
}

// Commit implements QuotaLedger.
func (l *MemoryLedger) Commit(_ context.Context, reservationID string) error {
	return l.finish(reservationID, false)
}

// Release implements QuotaLedger.
func (l *MemoryLedger) Release(_ context.Context, reservationID string) error {
	return l.finish(reservationID, true)
}

func (l *MemoryLedger) finish(reservationID string, giveBack bool) error {
	now := l.lock()
	defer l.mu.Unlock()
	h, ok := l.holds[reservationID]
	if _, done := l.committed[reservationID]; !ok && done && !giveBack {
		return nil
	}
	if !ok {
		return fmt.Errorf("reservation %q: %w", reservationID, ErrNotFound)
	}
	l.endReservation(reservationID, h, giveBack, now)
	return nil
}

// Hold implements ReservationHolder.
func (l *MemoryLedger) Hold(_ context.Context, reservationID string, until time.Time) error {
	l.lock()
	defer l.mu.Unlock()
	h, ok := l.holds[reservationID]
	if !ok {
		return fmt.Errorf("reservation %q: %w", reservationID, ErrNotFound)
	}
	h.expires = until
	l.holds[reservationID] = h
	return nil
}

// UsageByDay implements UsageReporter.
func (l *MemoryLedger) UsageByDay(_ context.Context, accountID string, from, to time.Time) ([]DayUsage, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	first, last := dayNumber(from), dayNumber(to)
	byDay := map[int64]map[Pool]int64{}
	for c, n := range l.charged {
		if c.accountID != accountID || c.day < first || c.day > last {
			continue
		}
		if byDay[c.day] == nil {
			byDay[c.day] = map[Pool]int64{}
		}
		byDay[c.day][c.pool] += n
	}
	days := []DayUsage{}
	for _, day := range slices.Sorted(maps.Keys(byDay)) {
		days = append(days, DayUsage{Day: time.Unix(day*86400, 0).UTC(), ByPool: byDay[day]})
	}
	return days, nil
}

// FirstCharges implements FirstCharger.
func (l *MemoryLedger) FirstCharges(_ context.Context, since time.Time) (map[string]time.Time, error) {
	l.lock()
	defer l.mu.Unlock()
	firsts := map[string]time.Time{}
	for account, at := range l.first {
		if !at.Before(since) {
			firsts[account] = at
		}
	}
	return firsts, nil
}

// ReservationTTL implements ReservationExpirer.
func (l *MemoryLedger) ReservationTTL() time.Duration { return l.opts.ReservationTTL }

// Balance implements QuotaLedger.
func (l *MemoryLedger) Balance(_ context.Context, accountID string) (Balance, error) {
	now := l.lock()
	defer l.mu.Unlock()
	acc, err := l.account(accountID, now)
	if err != nil {
		return Balance{}, err
	}
	return acc.balance(), nil
}
