package upscale

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// reserve holds one unit of accountID's quota for a request, from a pool
// that covers paid capability when needsPaid. An account with nothing left
// gets ErrQuotaExhausted, explained (quotaExhausted).
func (h *Handler) reserve(ctx context.Context, accountID string, needsPaid bool) (hold Reservation, err error) {
	err = h.ledger.call(func() (err error) {
		hold, err = h.cfg.Ledger.Reserve(ctx, accountID, needsPaid)
		return err
	})
	if errors.Is(err, ErrQuotaExhausted) {
		return hold, h.quotaExhausted(ctx, accountID, err)
	}
	return hold, err
}

// commit charges a reservation, retrying while the ledger is
// unavailable. Commit is idempotent, so a retry after an attempt whose
// answer was lost charges nothing more; ErrNotFound means the unit was
// given back (the reservation expired), never that it was charged.
func (h *Handler) commit(ctx context.Context, reservationID string) error {
	// Once the result is made, a caller who leaves does not cut the charge
	// short: an attempt cut off midway would leave its outcome unknown.
	return h.retryUnavailable(context.WithoutCancel(ctx), h.ledger, func(ctx context.Context) error {
		return h.cfg.Ledger.Commit(ctx, reservationID)
	})
}

// release gives a unit back even when the caller has gone away: the
// request's context may be cancelled, the money is still owed back.
func (h *Handler) release(ctx context.Context, hold Reservation) {
	err := h.retryUnavailable(context.WithoutCancel(ctx), h.ledger, func(ctx context.Context) error {
		return h.cfg.Ledger.Release(ctx, hold.ID)
	})

	if err != nil {
		h.cfg.Logger.Error("upscale: release reservation; the ledger gives the unit back when the reservation expires", "reservation", hold.ID, "account", hold.AccountID, "err", err)
	}
}

// retryUnavailable runs the last word on something already held (a unit's commit
// or release, an Idempotency-Key's answer), retrying with backoff for up
// to ChargeTimeout while the store behind store reports ErrUnavailable.
// It is called whatever that breaker says: the thing is already held.
func (h *Handler) retryUnavailable(ctx context.Context, store *breaker, op func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.ChargeTimeout)
	defer cancel()
	backoff := 50 * time.Millisecond
	for {
		err := store.record(op(ctx))
		if err != nil && ctx.Err() != nil && !errors.Is(err, ErrUnavailable) {
			// The store did not answer in time: what it did is as
			// unknown as in an outage (a hung connection, say).
			err = fmt.Errorf("%w: no answer within ChargeTimeout: %w", ErrUnavailable, err)
		}
		if !errors.Is(err, ErrUnavailable) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// errChargeUnknown marks a prepared request whose commit could not be
// confirmed either way; it is answered as the ledger's unavailability.
var errChargeUnknown = errors.New("charge of unknown outcome")

// errUnitGone marks a request whose reservation was given back before its
// commit (it expired while the request was stopped, or a takeover of its
// Idempotency-Key released it): nothing was charged, and its result is
// deleted.
var errUnitGone = errors.New("the reserved unit went back before the commit")
