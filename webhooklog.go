package upscale

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
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
	// attempt first (ties by ID), at most DeliveryLimit(limit). An account
	// without any has an empty list, not an error.
	Deliveries(ctx context.Context, accountID string, limit int) ([]WebhookDelivery, error)
}

// DeliveryLimit is the most deliveries a WebhookLog answers for limit:
// limit, or 50 when it is not positive.
func DeliveryLimit(limit int) int { return defaultIfNotPositive(limit, 50) }

// deliveryOf is an attempt of w that the receiver answered with status
// (0 for none) and that failed with err.
func (h *Handler) deliveryOf(w Webhook, status int, err error) WebhookDelivery {
	var event struct{ Type string }
	json.Unmarshal(w.Payload, &event)
	d := WebhookDelivery{ID: w.ID, AccountID: w.AccountID, URL: w.URL, Event: event.Type, LastAt: h.cfg.Now(), LastStatus: status, Delivered: err == nil}
	if err != nil {
		d.LastError = attemptFailure(status, err)
	}
	return d
}

// attemptFailure says why an attempt that the receiver answered with
// status (0 for none) failed with err, in words safe to show its account:
// never a store's or a transport's own message.
func attemptFailure(status int, err error) string {
	var timeout interface{ Timeout() bool }
	switch {
	case status != 0:
		return fmt.Sprintf("the receiver answered %d %s", status, http.StatusText(status))
	case errors.Is(err, errWebhookUnsigned):
		return "it could not be signed just now; it is tried again"
	case errors.Is(err, ErrSourceForbidden):
		return "its address is not one this service calls"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &timeout) && timeout.Timeout():
		return fmt.Sprintf("no answer within %v", webhookTimeout)
	}
	return "the receiver could not be reached"
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
