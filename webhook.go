package upscale

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"
)

// WebhookSecrets keeps each account's webhook signing secrets, in the
// Standard Webhooks form: "whsec_" and the base64 of 32 random bytes.
// MemoryWebhookSecrets is the default, for one process; sqlstore.Store
// keeps them in its database. upscaletest.TestWebhookSecrets holds every
// implementation to this contract. Every method returns an error wrapping
// ErrUnavailable when the store's server cannot be reached.
type WebhookSecrets interface {
	// WebhookSecrets returns the secrets that sign accountID's webhooks,
	// newest first: the current one, then the one it replaced while that
	// one is within WebhookSecretOverlap of the rotation. It returns none,
	// and no error, for an account without a secret.
	WebhookSecrets(ctx context.Context, accountID string) ([]string, error)
	// RotateWebhookSecret makes a new secret (NewWebhookSecret) the
	// current one of accountID and returns it; the one it replaces signs
	// beside it for WebhookSecretOverlap, so that a receiver can move to
	// the new one without losing a delivery. It returns an error wrapping
	// ErrNotFound when the store keeps accounts and accountID is not one.
	RotateWebhookSecret(ctx context.Context, accountID string) (string, error)
}

// WebhookSecretOverlap is how long a rotated-out secret keeps signing
// beside the new one.
const WebhookSecretOverlap = 24 * time.Hour

// webhookSecretPrefix starts every secret, as Standard Webhooks names
// them.
const webhookSecretPrefix = "whsec_"

// NewWebhookSecret returns a new random signing secret.
func NewWebhookSecret() string {
	key := make([]byte, 32)
	rand.Read(key) // never fails (crypto/rand)
	return webhookSecretPrefix + base64.StdEncoding.EncodeToString(key)
}

// Webhook is one event of a job to be delivered to the job's webhookUrl.
type Webhook struct {
	// ID is the event's webhook-id, the same on every attempt: a receiver
	// that sees it twice has had the event already.
	ID string
	// AccountID is whose secrets sign it.
	AccountID string
	URL       string
	// Payload is the body: the event's JSON.
	Payload []byte
	// Expires is when the delivery is given up: no attempt starts after
	// it.
	Expires time.Time
}

// WebhookQueue keeps the webhooks of ended jobs until they are delivered
// or expire, and hands them to deliverers, each to one at a time.
// MemoryWebhookQueue is the default, for one process;
// upscaletest.TestWebhookQueue holds every implementation to this
// contract. Every method returns an error wrapping ErrUnavailable when the
// queue's server cannot be reached.
type WebhookQueue interface {
	// Enqueue adds webhook for delivery. When the queue keeps a webhook
	// with its ID already, delivered or not, it adds nothing: an event is
	// delivered once however often the run that raised it is repeated.
	Enqueue(ctx context.Context, webhook Webhook) error
	// Deliver starts delivering the queue's webhooks with deliver, at
	// most concurrency at once, and returns the function that stops it,
	// as JobQueue.Work does. A webhook whose deliver returns nil, or an
	// error wrapping ErrWebhookGone, is never delivered again; one whose
	// deliver fails otherwise is tried again after WebhookBackoff of the
	// attempts so far (or the queue's own backoff, where it is given one),
	// until Expires. A webhook is delivered at least once: a deliverer
	// that dies after the receiver's answer delivers it again, with the
	// same ID.
	//
	// One account's webhooks take at most WebhookAccountShare(concurrency)
	// of a process's deliverers at once, and wait while other accounts'
	// are delivered, so that a receiver that never answers, or a burst of
	// one account's jobs, delays no one else's.
	Deliver(ctx context.Context, concurrency int, deliver func(ctx context.Context, webhook Webhook) error) (stop func(drain context.Context) error, err error)
}

// WebhookAccountShare is how many of concurrency deliverers one
// account's webhooks may take at once: a quarter, at least one.
func WebhookAccountShare(concurrency int) int {
	return max(concurrency/4, 1)
}

// WebhookBackoff is how long a delivery waits after its attempt-th failed
// attempt, from that attempt's end: 5 s, then six times as long each
// time, 6 h at most. With attempts that fail at once, the retries of a
// webhook that lasts WebhookTTL start about 5 s, 35 s, 3.6 min, 21.6
// min, 2.2 h, 8.2 h, 14.2 h and 20.2 h after the first attempt.
func WebhookBackoff(attempt int) time.Duration {
	wait := 5 * time.Second
	for range min(max(attempt-1, 0), 5) {
		wait *= 6
	}
	return min(wait, 6*time.Hour)
}

// WebhookTTL is how long a webhook is tried for, from its first attempt:
// over a day, so a receiver down for a day still gets it.
const WebhookTTL = 26 * time.Hour

// SignWebhook returns the webhook-signature header of a delivery attempt
// (Standard Webhooks): "v1," and the base64 HMAC-SHA256, under each
// secret, of the webhook-id, the webhook-timestamp (Unix seconds) and the
// body, joined by dots; one signature per secret, separated by spaces. A
// secret that is not "whsec_" and base64 is skipped.
func SignWebhook(secrets []string, id string, timestamp time.Time, payload []byte) string {
	signed := []byte(id + "." + strconv.FormatInt(timestamp.Unix(), 10) + ".")
	signed = append(signed, payload...)
	var signatures []string
	for _, secret := range secrets {
		key, err := webhookKey(secret)
		if err != nil {
			continue
		}
		mac := hmac.New(sha256.New, key)
		mac.Write(signed)
		signatures = append(signatures, "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	}
	return strings.Join(signatures, " ")
}

// webhookKey is the HMAC key a secret stands for.
func webhookKey(secret string) ([]byte, error) {
	encoded, ok := strings.CutPrefix(secret, webhookSecretPrefix)
	if !ok {
		return nil, errors.New("a webhook secret starts with " + webhookSecretPrefix)
	}
	return base64.StdEncoding.DecodeString(encoded)
}
