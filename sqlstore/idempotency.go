package sqlstore

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/upscalekit/upscale"
)

// Claim implements upscale.IdempotencyStore. The claim is one conditional
// INSERT, so of concurrent claims across replicas exactly one wins; a
// key whose answer or lease has run out is taken over by a conditional
// UPDATE, which again only one claim can win.
func (s *Store) Claim(ctx context.Context, c upscale.IdempotencyClaim) (*upscale.IdempotentAnswer, error) {
	now := s.opts.Now()
	if err := s.sweepIdempotencyKeys(ctx, now); err != nil {
		return nil, err
	}
	fingerprint := hex.EncodeToString(c.Fingerprint[:])
	leaseEnds, expires := now.Add(c.Lease).UnixNano(), now.Add(c.TTL).UnixNano()
	res, err := s.db.ExecContext(ctx, `INSERT INTO idempotency_keys (account_id, idempotency_key, fingerprint, claim_token, lease_ends, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (account_id, idempotency_key) DO NOTHING`,
		c.AccountID, c.Key, fingerprint, c.Token, leaseEnds, expires)
	if err != nil {
		return nil, classify(ctx, err)
	}
	if affected(res) {
		return nil, nil
	}
	// An expired key, or a claim that died before it could be charged
	// (nothing prepared), starts afresh.
	res, err = s.db.ExecContext(ctx, `UPDATE idempotency_keys
		SET fingerprint = $3, claim_token = $4, status = NULL, body = NULL, link_expires = 0, reservation_id = '', lease_ends = $5, expires_at = $6
		WHERE account_id = $1 AND idempotency_key = $2 AND (expires_at <= $7 OR (status IS NULL AND lease_ends <= $7))`,
		c.AccountID, c.Key, fingerprint, c.Token, leaseEnds, expires, now.UnixNano())
	if err != nil {
		return nil, classify(ctx, err)
	}
	if affected(res) {
		return nil, nil
	}
	// A claim that died after preparing its answer is taken over with
	// that answer, for the caller to finish.
	res, err = s.db.ExecContext(ctx, `UPDATE idempotency_keys SET claim_token = $4, lease_ends = $5
		WHERE account_id = $1 AND idempotency_key = $2 AND fingerprint = $3 AND reservation_id <> '' AND lease_ends <= $6`,
		c.AccountID, c.Key, fingerprint, c.Token, leaseEnds, now.UnixNano())
	if err != nil {
		return nil, classify(ctx, err)
	}
	tookOver := affected(res)
	var kept struct {
		fingerprint, token, reservation string
		status                          sql.NullInt64
		body                            sql.NullString
		linkExpires, leaseEnds          int64
	}
	err = s.db.QueryRowContext(ctx, `SELECT fingerprint, claim_token, reservation_id, status, body, link_expires, lease_ends
		FROM idempotency_keys WHERE account_id = $1 AND idempotency_key = $2`, c.AccountID, c.Key).
		Scan(&kept.fingerprint, &kept.token, &kept.reservation, &kept.status, &kept.body, &kept.linkExpires, &kept.leaseEnds)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		// Forgotten between the INSERT and now: the key is free again.
		return s.Claim(ctx, c)
	case err != nil:
		return nil, classify(ctx, err)
	case kept.fingerprint != fingerprint:
		return nil, fmt.Errorf("sqlstore: idempotency key %q: %w", c.Key, upscale.ErrIdempotencyKeyReused)
	case (!kept.status.Valid || kept.reservation != "") && !(tookOver && kept.token == c.Token):
		return nil, &upscale.InFlightError{Key: c.Key, LeaseEnds: time.Unix(0, kept.leaseEnds)}
	}
	return &upscale.IdempotentAnswer{
		Status:      int(kept.status.Int64),
		Body:        []byte(kept.body.String),
		LinkExpires: time.Unix(0, kept.linkExpires),
		Reservation: kept.reservation,
	}, nil
}

// Prepare implements upscale.IdempotencyStore.
func (s *Store) Prepare(ctx context.Context, c upscale.IdempotencyClaim, answer upscale.IdempotentAnswer) error {
	return s.setAnswer(ctx, c, answer)
}

// Keep implements upscale.IdempotencyStore.
func (s *Store) Keep(ctx context.Context, c upscale.IdempotencyClaim, answer upscale.IdempotentAnswer) error {
	answer.Reservation = ""
	return s.setAnswer(ctx, c, answer)
}

// setAnswer records the answer of c's request, while c holds the key and
// no answer is kept.
func (s *Store) setAnswer(ctx context.Context, c upscale.IdempotencyClaim, answer upscale.IdempotentAnswer) error {
	var linkExpires int64
	if !answer.LinkExpires.IsZero() {
		linkExpires = answer.LinkExpires.UnixNano()
	}
	res, err := s.db.ExecContext(ctx, `UPDATE idempotency_keys SET status = $4, body = $5, link_expires = $6, reservation_id = $7
		WHERE account_id = $1 AND idempotency_key = $2 AND claim_token = $3 AND (status IS NULL OR reservation_id <> '')`,
		c.AccountID, c.Key, c.Token, answer.Status, string(answer.Body), linkExpires, answer.Reservation)
	if err != nil {
		return classify(ctx, err)
	}
	if !affected(res) {
		return notFound("idempotency key", c.Key)
	}
	return nil
}

// Forget implements upscale.IdempotencyStore.
func (s *Store) Forget(ctx context.Context, c upscale.IdempotencyClaim) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM idempotency_keys
		WHERE account_id = $1 AND idempotency_key = $2 AND claim_token = $3 AND (status IS NULL OR reservation_id <> '')`,
		c.AccountID, c.Key, c.Token)
	return classify(ctx, err)
}

// affected reports whether res changed exactly one row.
func affected(res sql.Result) bool {
	n, err := res.RowsAffected()
	return err == nil && n == 1
}

// sweepIdempotencyKeys deletes expired keys, at most once a minute per
// Store, so the table holds about a day of keys without a job.
func (s *Store) sweepIdempotencyKeys(ctx context.Context, now time.Time) error {
	last := s.idempotencySwept.Load()
	if now.UnixNano()-last < int64(time.Minute) || !s.idempotencySwept.CompareAndSwap(last, now.UnixNano()) {
		return nil
	}
	_, err := s.db.ExecContext(ctx, `DELETE FROM idempotency_keys WHERE expires_at <= $1`, now.UnixNano())
	return classify(ctx, err)
}
