package upscale

import (
	"context"
	"time"
)

// Pool names the quota that pays for one request; it is the response's via.
type Pool string

// The pools, in the order they are drawn from. PoolUnlimited pays every
// request of an unlimited plan that its plan covers; a request needing
// paid capability on an unlimited plan that is not paid is drawn from the
// others (credits) as on any other plan. See ChoosePool.
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
	// Commit makes the charge of a reservation permanent. It is
	// idempotent: committing a reservation that is committed already
	// returns nil and charges nothing more, for at least CommitMemory after
	// the first commit, so that a commit whose answer was lost, or that a
	// crashed request left unknown, can be settled by committing again.
	// It returns an error wrapping ErrNotFound when the reservation is
	// unknown, released, or expired (its unit was given back).
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

// CommitMemory is the least time a QuotaLedger remembers a committed
// reservation, answering a repeated Commit with nil (see Commit). An
// Idempotency-Key is kept no longer than that (Config.IdempotencyTTL), so
// that a takeover can always tell a charged request from one never
// charged.
const CommitMemory = 24 * time.Hour

// ReservationExpirer is a QuotaLedger that says how long its
// reservations hold their units. New refuses a Config under which a
// request could outlive its reservation: its charge could then not be
// committed, and its result would be lost or delivered uncharged.
// MemoryLedger and sqlstore.Store implement it.
type ReservationExpirer interface {
	QuotaLedger
	ReservationTTL() time.Duration
}

// ReservationHolder is a QuotaLedger that holds a reservation for as long
// as its holder says, past the ledger's TTL: the job form holds a job's
// unit from its submission to its end, however long it waits in the
// queue.
type ReservationHolder interface {
	QuotaLedger
	// Hold keeps reservationID's unit held until until, later or sooner
	// than it would have expired; past until the ledger gives it back as
	// it does an expired one. It returns an error wrapping ErrNotFound
	// when the reservation is unknown, settled, or expired.
	Hold(ctx context.Context, reservationID string, until time.Time) error
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
	o.Now = clock(o.Now)
	if o.ReservationTTL == 0 {
		o.ReservationTTL = DefaultReservationTTL
	}
	return o
}

// Month returns the calendar month (UTC) that t falls in, as "2006-01": the
// period of the free pool.
func Month(t time.Time) string { return t.UTC().Format("2006-01") }

// ScaleNeedsPaidPlan reports whether enlarging by scale needs a paid plan
// or credits: 8 and 16 do.
func ScaleNeedsPaidPlan(scale int) bool { return scale >= paidScale }

// needsPaid is the one paid rule: a request needs paid capability (a
// paid plan or credits, see Reservation.Covers) for a scale from 8 up, or
// for a source file larger than Config.FreeTierMaxFileBytes. sourceBytes
// is 0 until the source has been fetched.
func (h *Handler) needsPaid(scale int, sourceBytes int64) bool {
	return ScaleNeedsPaidPlan(scale) || sourceBytes > h.cfg.FreeTierMaxFileBytes
}

// MonthBounds returns the start of now's month and of the next, UTC: the
// free pool's window, and when it refills.
func MonthBounds(now time.Time) (start, next time.Time) {
	y, m, _ := now.UTC().Date()
	return time.Date(y, m, 1, 0, 0, 0, 0, time.UTC), time.Date(y, m+1, 1, 0, 0, 0, 0, time.UTC)
}
