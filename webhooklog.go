package upscale

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"strings"
	"time"
)

// WebhookDelivery is what became of one webhook so far: how many attempts
// were made, and how the last went.
type WebhookDelivery struct {
	// ID is the webhook's webhook-id; Event its type
	// ("upscale.job.succeeded", "upscale.test", ...).
	ID, AccountID, URL, Event string
	Attempts                  int
	LastAt                    time.Time
	// LastStatus is the receiver's answer to the last attempt, 0 when it
	// gave none; LastError says why that attempt failed, "" when it
	// delivered the webhook.
	LastStatus int
	LastError  string
	Delivered  bool
}

// WebhookLog keeps the delivery attempts of each account's webhooks, for
// its own pages (the dashboard's Webhooks), for as long as the store says.
// MemoryWebhookLog and sqlstore.Store are WebhookLogs;
// upscaletest.TestWebhookLog is the contract.
type WebhookLog interface {
	// RecordAttempt records an attempt of the webhook d.ID: its
	// Attempts grow by one (d.Attempts is ignored), and the rest is d's.
	RecordAttempt(ctx context.Context, d WebhookDelivery) error
	// Deliveries returns accountID's latest deliveries, the latest
	// attempt first (ties by ID), at most limit (zero: 50). An account
	// without any has an empty list, not an error.
	Deliveries(ctx context.Context, accountID string, limit int) ([]WebhookDelivery, error)
}

// deliveryOf is an attempt of w that the receiver answered with status
// (0 for none) and that failed with err.
func (h *Handler) deliveryOf(w Webhook, status int, err error) WebhookDelivery {
	var event struct{ Type string }
	json.Unmarshal(w.Payload, &event)
	d := WebhookDelivery{ID: w.ID, AccountID: w.AccountID, URL: w.URL, Event: event.Type, LastAt: h.cfg.Now(), LastStatus: status, Delivered: err == nil}
	if err != nil {
		d.LastError = strings.TrimPrefix(err.Error(), "webhook "+w.ID+": ")
	}
	return d
}

// logAttempt records the attempt d in Config.WebhookLog, if there is one.
// A log that fails is logged and changes nothing: the delivery is the
// queue's.
func (h *Handler) logAttempt(ctx context.Context, d WebhookDelivery) {
	if h.cfg.WebhookLog == nil {
		return
	}
	if err := h.cfg.WebhookLog.RecordAttempt(context.WithoutCancel(ctx), d); err != nil {
		h.cfg.Logger.Warn("upscale: record a webhook attempt; it is missing from the account's log", "webhook", d.ID, "err", err)
	}
}

// testEvent is the body of a test webhook: its data says what it is.
type testEvent struct {
	Type      string    `json:"type"`
	Timestamp time.Time `json:"timestamp"`
	Data      struct {
		Message string `json:"message"`
	} `json:"data"`
}

// SendTestWebhook posts accountID a signed "upscale.test" event at
// rawURL, now, once, as a job's webhook would be (its address checked
// against the fetch policy, signed with the account's secrets, the first
// made if it has none), and returns how it went, as the account's
// WebhookLog records it. It returns an error wrapping
// ErrInvalidWebhookURL for an address the policy refuses; a receiver
// that refuses or fails is no error, but a delivery not Delivered.
func (h *Handler) SendTestWebhook(ctx context.Context, accountID, rawURL string) (WebhookDelivery, error) {
	quoted, _ := json.Marshal(strings.TrimSpace(rawURL)) // read as a request's webhookUrl is
	u, err := parseWebhookURL(quoted)
	if err != nil {
		return WebhookDelivery{}, err
	}
	target, err := h.checkWebhook(ctx, accountID, u)
	if err != nil {
		return WebhookDelivery{}, err
	}
	event := testEvent{Type: "upscale.test", Timestamp: h.cfg.Now()}
	event.Data.Message = "A test event sent from the account's dashboard: nothing to do."
	w := Webhook{ID: "msg_test_" + strings.ToLower(rand.Text()), AccountID: accountID, URL: target, Payload: jsonBody(event)}
	status, err := h.attemptWebhook(ctx, w)
	d := h.deliveryOf(w, status, err)
	h.logAttempt(ctx, d)
	d.Attempts = 1
	return d, nil
}
