package sqlstore

import (
	"context"
	"time"

	"github.com/upscalekit/upscale"
)

// RecordAttempt implements upscale.WebhookLog, and sweeps the deliveries
// past Options.CallRetention, at most once a minute per Store.
func (s *Store) RecordAttempt(ctx context.Context, d upscale.WebhookDelivery) error {
	if err := s.sweepDeliveries(ctx, s.opts.Now()); err != nil {
		return err
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO webhook_deliveries (account_id, id, url, event, attempts, last_at, last_status, last_error, delivered)
		VALUES ($1, $2, $3, $4, 1, $5, $6, $7, $8)
		ON CONFLICT (account_id, id) DO UPDATE SET url = excluded.url, event = excluded.event,
			attempts = webhook_deliveries.attempts + 1, last_at = excluded.last_at, last_status = excluded.last_status,
			last_error = excluded.last_error, delivered = excluded.delivered`,
		d.AccountID, d.ID, d.URL, d.Event, d.LastAt.UnixNano(), d.LastStatus, d.LastError, boolInt(d.Delivered))
	return classify(ctx, err)
}

// Deliveries implements upscale.WebhookLog.
func (s *Store) Deliveries(ctx context.Context, accountID string, limit int) ([]upscale.WebhookDelivery, error) {
	oldest := s.opts.Now().Add(-s.callRetention)
	rows, err := s.db.QueryContext(ctx, `SELECT id, url, event, attempts, last_at, last_status, last_error, delivered
		FROM webhook_deliveries WHERE account_id = $1 AND last_at >= $2 ORDER BY last_at DESC, id LIMIT $3`,
		accountID, oldest.UnixNano(), upscale.DeliveryLimit(limit))
	if err != nil {
		return nil, classify(ctx, err)
	}
	defer rows.Close()
	list := []upscale.WebhookDelivery{}
	for rows.Next() {
		d := upscale.WebhookDelivery{AccountID: accountID}
		var at int64
		var delivered int
		if err := rows.Scan(&d.ID, &d.URL, &d.Event, &d.Attempts, &at, &d.LastStatus, &d.LastError, &delivered); err != nil {
			return nil, classify(ctx, err)
		}
		d.LastAt, d.Delivered = time.Unix(0, at), delivered == 1
		list = append(list, d)
	}
	return list, classify(ctx, rows.Err())
}

// sweepDeliveries deletes the deliveries past the retention, at most once
// a minute per Store.
func (s *Store) sweepDeliveries(ctx context.Context, now time.Time) error {
	last := s.deliveriesSwept.Load()
	if now.UnixNano()-last < int64(time.Minute) || !s.deliveriesSwept.CompareAndSwap(last, now.UnixNano()) {
		return nil
	}
	_, err := s.db.ExecContext(ctx, `DELETE FROM webhook_deliveries WHERE last_at < $1`, now.Add(-s.callRetention).UnixNano())
	return classify(ctx, err)
}
