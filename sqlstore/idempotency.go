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

var _ upscale.IdempotencyStore = (*Store)(nil)

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
	res, err := s.db.ExecContext(ctx, `INSERT INTO idempotency_keys (account_id, idempotency_key, fingerprint, lease_ends, expires_at)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT (account_id, idempotency_key) DO NOTHING`,
		c.AccountID, c.Key, fingerprint, leaseEnds, expires)
	if err != nil {
		return nil, classify(ctx, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 1 {
		return nil, nil
	}
	res, err = s.db.ExecContext(ctx, `UPDATE idempotency_keys
		SET fingerprint = $3, status = NULL, body = NULL, link_expires = 0, lease_ends = $4, expires_at = $5
		WHERE account_id = $1 AND idempotency_key = $2 AND (expires_at <= $6 OR (status IS NULL AND lease_ends <= $6))`,
		c.AccountID, c.Key, fingerprint, leaseEnds, expires, now.UnixNano())
	if err != nil {
		return nil, classify(ctx, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 1 {
		return nil, nil
	}
	var kept struct {
		fingerprint string
		status      sql.NullInt64
		body        sql.NullString
		linkExpires int64
	}
	err = s.db.QueryRowContext(ctx, `SELECT fingerprint, status, body, link_expires FROM idempotency_keys WHERE account_id = $1 AND idempotency_key = $2`,
		c.AccountID, c.Key).Scan(&kept.fingerprint, &kept.status, &kept.body, &kept.linkExpires)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		// Released between the INSERT and now: the key is free again.
		return s.Claim(ctx, c)
	case err != nil:
		return nil, classify(ctx, err)
	case kept.fingerprint != fingerprint:
		return nil, fmt.Errorf("sqlstore: idempotency key %q: %w", c.Key, upscale.ErrIdempotencyKeyReused)
	case !kept.status.Valid:
		return nil, fmt.Errorf("sqlstore: idempotency key %q: %w", c.Key, upscale.ErrIdempotencyInFlight)
	}
	return &upscale.IdempotentAnswer{
		Status:      int(kept.status.Int64),
		Body:        []byte(kept.body.String),
		LinkExpires: time.Unix(0, kept.linkExpires),
	}, nil
}

// Keep implements upscale.IdempotencyStore.
func (s *Store) Keep(ctx context.Context, accountID, key string, answer upscale.IdempotentAnswer) error {
	var linkExpires int64
	if !answer.LinkExpires.IsZero() {
		linkExpires = answer.LinkExpires.UnixNano()
	}
	res, err := s.db.ExecContext(ctx, `UPDATE idempotency_keys SET status = $3, body = $4, link_expires = $5
		WHERE account_id = $1 AND idempotency_key = $2 AND status IS NULL`,
		accountID, key, answer.Status, string(answer.Body), linkExpires)
	if err != nil {
		return classify(ctx, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return notFound("idempotency key", key)
	}
	return nil
}

// Forget implements upscale.IdempotencyStore.
func (s *Store) Forget(ctx context.Context, accountID, key string) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM idempotency_keys WHERE account_id = $1 AND idempotency_key = $2 AND status IS NULL`, accountID, key)
	return classify(ctx, err)
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
