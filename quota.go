package upscale

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"time"
)

// Pool names the quota that pays for one request; it is the response's via.
type Pool string

// The pools, in the order they are drawn from (PoolUnlimited only on an
// unlimited plan, and then alone).
const (
	PoolUnlimited  Pool = "unlimited"
	PoolFree       Pool = "free_pool"
	PoolShareBonus Pool = "share_bonus"
	PoolCredit     Pool = "credit"
)

// Plan is what an account subscribes to.
type Plan struct {
	Name string
	// Paid plans may use every pool for requests that need paid capability;
	// other accounts pay for those with credits only.
	Paid bool
	// Unlimited plans pay for every request from PoolUnlimited.
	Unlimited bool
	// MonthlyImages is the free pool's allowance, refilled at 00:00 UTC on
	// the first day of each month.
	MonthlyImages int64
	// MaxFileBytes is the largest source file the plan accepts.
	MaxFileBytes int64
}

// Account is a customer: its plan and its balances.
type Account struct {
	ID         string
	Plan       Plan
	Credits    int64
	ShareBonus int64
}

// Balance is what an account can still spend, net of units held by open
// reservations.
type Balance struct {
	Plan Plan
	// Free is what is left of this month's free pool.
	Free       int64
	ShareBonus int64
	Credits    int64
}

// Reservation is one unit held from one pool of an account, until it is
// committed or released.
type Reservation struct {
	ID        string
	AccountID string
	Pool      Pool
	// Plan is the account's plan when the unit was reserved; the handler
	// takes the file size limit from it.
	Plan Plan
}

// Covers reports whether r may pay for a request that needs paid capability.
func (r Reservation) Covers(needsPaid bool) bool {
	return !needsPaid || r.Plan.Paid || r.Pool == PoolCredit
}

// QuotaLedger holds the accounts' balances. Reservations make charging
// safe: a request reserves a unit before it does any work, commits it on
// success and releases it on every failure, so failed requests are never
// charged and concurrent requests never spend the same unit twice.
type QuotaLedger interface {
	// Reserve atomically picks the pool that pays for one request of
	// accountID (ChoosePool's rule) and holds one unit of it. needsPaid says
	// whether the request needs paid capability. Of N concurrent calls on an
	// account with k units, exactly min(N, k) succeed, also across processes
	// sharing the ledger's storage.
	//
	// It returns an error wrapping ErrPaidPlanRequired or ErrQuotaExhausted
	// as ChoosePool does, and ErrNotFound for an unknown account. A
	// reservation neither committed nor released within the ledger's
	// reservation TTL is released by the ledger itself.
	Reserve(ctx context.Context, accountID string, needsPaid bool) (Reservation, error)
	// Commit makes the charge of a reservation permanent. It returns an
	// error wrapping ErrNotFound when the reservation is unknown, already
	// settled, or expired (its unit was given back).
	Commit(ctx context.Context, reservationID string) error
	// Release gives a reservation's unit back to its pool. It returns an
	// error wrapping ErrNotFound when the reservation is unknown, already
	// settled, or expired.
	Release(ctx context.Context, reservationID string) error
	// Balance returns what accountID can still spend. It returns an error
	// wrapping ErrNotFound for an unknown account.
	Balance(ctx context.Context, accountID string) (Balance, error)
}

// ChoosePool returns the pool that pays for one request, given what the
// account has left. An unlimited plan pays from PoolUnlimited; otherwise the
// first non-empty pool of free_pool, share_bonus, credit that may pay. A
// request needing paid capability may be paid by any pool on a paid plan and
// by credits alone otherwise.
//
// It returns ErrPaidPlanRequired when the request needs paid capability and
// the account has neither a paid plan nor credits, and ErrQuotaExhausted when
// every pool that may pay is empty. Every QuotaLedger applies this rule, so
// all backends draw the same pools in the same order.
func ChoosePool(b Balance, needsPaid bool) (Pool, error) {
	if b.Plan.Unlimited && (!needsPaid || b.Plan.Paid) {
		return PoolUnlimited, nil
	}
	left := []struct {
		pool  Pool
		units int64
	}{{PoolFree, b.Free}, {PoolShareBonus, b.ShareBonus}, {PoolCredit, b.Credits}}
	for _, p := range left {
		if p.units > 0 && (Reservation{Pool: p.pool, Plan: b.Plan}).Covers(needsPaid) {
			return p.pool, nil
		}
	}
	if needsPaid && !b.Plan.Paid && b.Credits <= 0 {
		return "", ErrPaidPlanRequired
	}
	return "", ErrQuotaExhausted
}

// DefaultReservationTTL is how long a reservation holds its unit before a
// ledger gives it back, when LedgerOptions.ReservationTTL is zero. It is far
// longer than any request, and short enough that a replica killed
// mid-request returns its units within minutes.
const DefaultReservationTTL = 15 * time.Minute

// LedgerOptions configures a QuotaLedger implementation.
type LedgerOptions struct {
	// Now is the ledger's clock. Zero means time.Now.
	Now func() time.Time
	// ReservationTTL is how long an unsettled reservation holds its unit.
	// Zero means DefaultReservationTTL.
	ReservationTTL time.Duration
}

// WithDefaults returns o with its zero fields set to their documented
// defaults.
func (o LedgerOptions) WithDefaults() LedgerOptions {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.ReservationTTL == 0 {
		o.ReservationTTL = DefaultReservationTTL
	}
	return o
}

// Month returns the calendar month (UTC) that t falls in, as "2006-01": the
// period of the free pool.
func Month(t time.Time) string { return t.UTC().Format("2006-01") }

// MemoryLedger is a QuotaLedger held in process memory, for one process and
// for tests: it forgets every balance on restart. It is safe for concurrent
// use.
type MemoryLedger struct {
	opts LedgerOptions

	mu       sync.Mutex
	accounts map[string]*memoryAccount
	holds    map[string]memoryHold
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

var _ QuotaLedger = (*MemoryLedger)(nil)

// NewMemoryLedger returns an empty MemoryLedger.
func NewMemoryLedger(opts LedgerOptions) *MemoryLedger {
	return &MemoryLedger{
		opts:     opts.WithDefaults(),
		accounts: make(map[string]*memoryAccount),
		holds:    make(map[string]memoryHold),
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
	return now
}

// expireHolds gives back the units of reservations past their TTL. The
// caller holds l.mu.
func (l *MemoryLedger) expireHolds(now time.Time) {
	for id, h := range l.holds {
		if now.After(h.expires) {
			l.settle(id, h, true, now)
		}
	}
}

func (l *MemoryLedger) settle(id string, h memoryHold, giveBack bool, now time.Time) {
	delete(l.holds, id)
	if !giveBack {
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
	if !ok {
		return fmt.Errorf("reservation %q: %w", reservationID, ErrNotFound)
	}
	l.settle(reservationID, h, giveBack, now)
	return nil
}

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
