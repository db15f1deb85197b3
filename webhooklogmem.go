package upscale

import (
	"cmp"
	"context"
	"time"

	"github.com/upscalekit/upscale/internal/recent"
)

// MemoryWebhookLogOptions configures a MemoryWebhookLog.
type MemoryWebhookLogOptions struct {
	// Retention is how long a delivery is kept after its last attempt.
	// Zero means DefaultCallRetention.
	Retention time.Duration
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
}

// MemoryWebhookLog is a WebhookLog in memory, for one process: it forgets
// every delivery on restart, and those past Retention as it is used. It is
// safe for concurrent use.
type MemoryWebhookLog struct {
	deliveries *recent.Records[WebhookDelivery]
}

var _ WebhookLog = (*MemoryWebhookLog)(nil)

// NewMemoryWebhookLog returns an empty MemoryWebhookLog.
func NewMemoryWebhookLog(opts MemoryWebhookLogOptions) *MemoryWebhookLog {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &MemoryWebhookLog{deliveries: recent.New(cmp.Or(opts.Retention, DefaultCallRetention), opts.Now,
		func(d WebhookDelivery) time.Time { return d.LastAt })}
}

// RecordAttempt implements WebhookLog.
func (l *MemoryWebhookLog) RecordAttempt(_ context.Context, d WebhookDelivery) error {
	l.deliveries.Put(d.AccountID, d.ID, func(kept WebhookDelivery) WebhookDelivery {
		d.Attempts = kept.Attempts + 1
		return d
	})
	return nil
}

// Deliveries implements WebhookLog.
func (l *MemoryWebhookLog) Deliveries(_ context.Context, accountID string, limit int) ([]WebhookDelivery, error) {
	all := func(WebhookDelivery) bool { return true }
	latestFirst := func(a, b WebhookDelivery) int { return cmp.Or(b.LastAt.Compare(a.LastAt), cmp.Compare(a.ID, b.ID)) }
	return l.deliveries.List(accountID, all, latestFirst, DeliveryLimit(limit)), nil
}
