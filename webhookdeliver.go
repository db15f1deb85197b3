package upscale

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// webhookConcurrency is how many webhooks a Handler's deliverers send at
// once: each is a short POST, so a few keep up with many engines.
const webhookConcurrency = 8

// webhookTimeout bounds one delivery attempt, from the dial to the
// receiver's status line.
const webhookTimeout = 10 * time.Second

// webhookEvent is the body of a job's webhook: its type names how the job
// ended ("upscale.job.succeeded", "upscale.job.failed",
// "upscale.job.canceled"), and data is the job as GET answers it.
type webhookEvent struct {
	Type      string    `json:"type"`
	Timestamp time.Time `json:"timestamp"`
	Data      Job       `json:"data"`
}

// checkWebhook judges a submission's webhookUrl, if it has one, against
// the fetch policy now, and makes sure the account has a secret to sign
// with: an account's first webhookUrl makes its first secret
// (RotateWebhookSecret), which the account reads by making a new one on
// the dashboard, as a receiver verifies with either while they overlap.
// It returns the URL as the job keeps it.
func (h *Handler) checkWebhook(ctx context.Context, accountID string, webhook *url.URL) (string, error) {
	if webhook == nil {
		return "", nil
	}
	if err := h.fetcher.checkWebhookURL(ctx, webhook); err != nil {
		return "", err
	}
	secrets, err := h.cfg.WebhookSecrets.WebhookSecrets(ctx, accountID)
	if err == nil && len(secrets) == 0 {
		_, err = h.cfg.WebhookSecrets.RotateWebhookSecret(ctx, accountID)
	}
	if err != nil {
		return "", fmt.Errorf("the account's webhook secret: %w", err)
	}
	return webhook.String(), nil
}

// notify queues the webhook of a job that ended, if it has a webhookUrl.
// Its ID is the job's, so the queue keeps one however often the job's run
// is repeated.
func (h *Handler) notify(ctx context.Context, ended Job) error {
	if ended.Webhook == "" {
		return nil
	}
	event := webhookEvent{Type: "upscale.job." + string(ended.Status), Timestamp: ended.Finished, Data: ended}
	return h.cfg.Webhooks.Enqueue(context.WithoutCancel(ctx), Webhook{
		ID: "msg_" + ended.ID, AccountID: ended.AccountID, URL: ended.Webhook,
		Payload: jsonBody(event), Expires: h.cfg.Now().Add(WebhookTTL),
	})
}

// errWebhookUnsigned is an attempt that failed before it was sent: the
// account's secrets could not be read.
var errWebhookUnsigned = errors.New("the webhook could not be signed")

// deliverWebhook makes one attempt to deliver w (attemptWebhook), and
// records it in the account's WebhookLog.
func (h *Handler) deliverWebhook(ctx context.Context, w Webhook) error {
	status, err := h.attemptWebhook(ctx, w)
	h.logAttempt(ctx, h.deliveryOf(w, status, err))
	return err
}

// attemptWebhook makes one attempt to deliver w, signed with its
// account's secrets (Standard Webhooks), under the fetch policy and
// without following redirects: it succeeds on a 2xx answer only. It
// returns the receiver's status, 0 when it gave none.
func (h *Handler) attemptWebhook(ctx context.Context, w Webhook) (int, error) {
	secrets, err := h.cfg.WebhookSecrets.WebhookSecrets(ctx, w.AccountID)
	if err == nil && len(secrets) == 0 {
		err = fmt.Errorf("the account %s has no webhook secret left", w.AccountID)
	}
	if err != nil {
		return 0, fmt.Errorf("sign webhook %s: %w: %w", w.ID, errWebhookUnsigned, err)
	}
	ctx, cancel := context.WithTimeout(ctx, webhookTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(w.Payload))
	if err != nil {
		return 0, fmt.Errorf("webhook %s: %w", w.ID, err)
	}
	now := h.cfg.Now()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "upscale-webhooks")
	req.Header.Set("Webhook-Id", w.ID)
	req.Header.Set("Webhook-Timestamp", strconv.FormatInt(now.Unix(), 10))
	req.Header.Set("Webhook-Signature", SignWebhook(secrets, w.ID, now, w.Payload))
	resp, err := h.fetcher.webhooks.Do(req)
	if err != nil {
		h.cfg.Logger.Warn("upscale: webhook not delivered; it is tried again", "webhook", w.ID, "err", err)
		return 0, fmt.Errorf("webhook %s: %w", w.ID, err)
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // so the connection is reused
	resp.Body.Close()
	if resp.StatusCode == http.StatusGone {
		h.cfg.Logger.Info("upscale: webhook receiver answered 410 Gone; it is not tried again", "webhook", w.ID)
		return resp.StatusCode, fmt.Errorf("webhook %s: %w", w.ID, ErrWebhookGone)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		h.cfg.Logger.Warn("upscale: webhook refused; it is tried again", "webhook", w.ID, "status", resp.StatusCode)
		return resp.StatusCode, fmt.Errorf("webhook %s: the receiver answered %s", w.ID, resp.Status)
	}
	return resp.StatusCode, nil
}
