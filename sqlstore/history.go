package sqlstore

import (
	"context"
	"time"

	"github.com/upscalekit/upscale"
)

// RecordCall implements upscale.CallHistory, and sweeps the calls past
// Options.CallRetention, at most once a minute per Store.
func (s *Store) RecordCall(ctx context.Context, c upscale.Call) error {
	if err := s.sweepCalls(ctx, s.opts.Now()); err != nil {
		return err
	}
	var expires int64
	if !c.ResultExpires.IsZero() {
		expires = c.ResultExpires.UnixNano()
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO calls (account_id, id, key_id, job, ended_at, scale, image_type, denoise,
			status, code, pool, engine, took, source_bytes, result_bytes, result_url, result_expires)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)
		ON CONFLICT (account_id, id) DO UPDATE SET key_id = excluded.key_id, job = excluded.job, ended_at = excluded.ended_at,
			scale = excluded.scale, image_type = excluded.image_type, denoise = excluded.denoise, status = excluded.status,
			code = excluded.code, pool = excluded.pool, engine = excluded.engine, took = excluded.took,
			source_bytes = excluded.source_bytes, result_bytes = excluded.result_bytes, result_url = excluded.result_url,
			result_expires = excluded.result_expires`,
		c.AccountID, c.ID, c.KeyID, boolInt(c.Job), c.At.UnixNano(), c.Params.Scale, string(c.Params.ImageType), string(c.Params.Denoise),
		c.Status, c.Code, string(c.Pool), c.Engine, int64(c.Took), c.SourceBytes, c.ResultBytes, c.ResultURL, expires)
	return classify(ctx, err)
}

// Calls implements upscale.CallHistory.
func (s *Store) Calls(ctx context.Context, accountID string, q upscale.CallQuery) ([]upscale.Call, error) {
	since := q.Since
	if oldest := s.opts.Now().Add(-s.callRetention); since.Before(oldest) {
		since = oldest // swept or not, a call past the retention is gone
	}
	rows, err := s.db.QueryContext(ctx, `SELECT id, key_id, job, ended_at, scale, image_type, denoise, status, code, pool, engine,
			took, source_bytes, result_bytes, result_url, result_expires
		FROM calls WHERE account_id = $1 AND ended_at >= $2 AND ($3 = '' OR key_id = $3)
		ORDER BY ended_at DESC, id LIMIT $4`, accountID, since.UnixNano(), q.KeyID, upscale.CallLimit(q.Limit))
	if err != nil {
		return nil, classify(ctx, err)
	}
	defer rows.Close()
	calls := []upscale.Call{}
	for rows.Next() {
		c := upscale.Call{AccountID: accountID}
		var job int
		var at, took, expires int64
		var imageType, denoise, pool string
		if err := rows.Scan(&c.ID, &c.KeyID, &job, &at, &c.Params.Scale, &imageType, &denoise, &c.Status, &c.Code, &pool, &c.Engine,
			&took, &c.SourceBytes, &c.ResultBytes, &c.ResultURL, &expires); err != nil {
			return nil, classify(ctx, err)
		}
		c.Job, c.At, c.Took, c.Pool = job == 1, time.Unix(0, at), time.Duration(took), upscale.Pool(pool)
		c.Params.ImageType, c.Params.Denoise = upscale.ImageType(imageType), upscale.Denoise(denoise)
		if expires != 0 {
			c.ResultExpires = time.Unix(0, expires)
		}
		calls = append(calls, c)
	}
	return calls, classify(ctx, rows.Err())
}

// sweepCalls deletes the calls past the retention, at most once a minute
// per Store.
func (s *Store) sweepCalls(ctx context.Context, now time.Time) error {
	last := s.callsSwept.Load()
	if now.UnixNano()-last < int64(time.Minute) || !s.callsSwept.CompareAndSwap(last, now.UnixNano()) {
		return nil
	}
	_, err := s.db.ExecContext(ctx, `DELETE FROM calls WHERE ended_at < $1`, now.Add(-s.callRetention).UnixNano())
	return classify(ctx, err)
}
