package client

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Job is a job of the API's job form (Prefer: respond-async), as its
// resource and its webhook give it.
type Job struct {
	ID string `json:"id"`
	// Status is queued, running, succeeded, failed or canceled; the last
	// three are final.
	Status     string    `json:"status"`
	CreatedAt  time.Time `json:"createdAt"`
	StartedAt  time.Time `json:"startedAt"`
	FinishedAt time.Time `json:"finishedAt"`
	ExpiresAt  time.Time `json:"expiresAt"`
	WebhookURL string    `json:"webhookUrl"`
	// Position is, while the job is queued, how many queued jobs start
	// before it (0: it is next); EstimatedStart is when it may start,
	// zero when the server has no estimate.
	Position       *int      `json:"position"`
	EstimatedStart time.Time `json:"estimatedStart"`
	// Engine is how a succeeded job's image was enlarged, as the
	// Upscale-Engine header says.
	Engine string `json:"engine"`
	// Result is a succeeded job's answer; Problem a failed one's.
	Result  *Response `json:"result"`
	Problem *Error    `json:"problem"`
}

// Done reports whether the job has ended.
func (j *Job) Done() bool {
	return j.Status == "succeeded" || j.Status == "failed" || j.Status == "canceled"
}

// WebhookEvent is the body of a job's webhook.
type WebhookEvent struct {
	// Type is upscale.job.succeeded, upscale.job.failed or
	// upscale.job.canceled.
	Type      string    `json:"type"`
	Timestamp time.Time `json:"timestamp"`
	Data      Job       `json:"data"`
}

// WebhookTolerance is how far a webhook's timestamp may be from the
// receiver's clock: an older delivery is refused as a possible replay.
const WebhookTolerance = 5 * time.Minute

// ErrWebhookSignature is the error of a delivery whose signature or
// timestamp does not verify.
var ErrWebhookSignature = errors.New("webhook signature does not verify")

// VerifyWebhook checks a webhook delivery, its headers and its body as
// received, against the account's signing secret ("whsec_..."), as
// Standard Webhooks defines it: one of the webhook-signature's "v1,"
// signatures must be the HMAC-SHA256 of the webhook-id, the
// webhook-timestamp and the body, and the timestamp within
// WebhookTolerance of now. It returns the event, or an error wrapping
// ErrWebhookSignature. A receiver that has seen the event's webhook-id
// before has had it already: every attempt of one event carries the same.
func VerifyWebhook(secret string, header http.Header, body []byte, now time.Time) (*WebhookEvent, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || !strings.HasPrefix(secret, "whsec_") {
		return nil, errors.New("client: a webhook secret is whsec_ and base64")
	}
	id, timestamp := header.Get("webhook-id"), header.Get("webhook-timestamp")
	seconds, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil || id == "" {
		return nil, fmt.Errorf("%w: no webhook-id or webhook-timestamp", ErrWebhookSignature)
	}
	if sent := time.Unix(seconds, 0); sent.Before(now.Add(-WebhookTolerance)) || sent.After(now.Add(WebhookTolerance)) {
		return nil, fmt.Errorf("%w: its timestamp %s is more than %v from now", ErrWebhookSignature, sent.UTC().Format(time.RFC3339), WebhookTolerance)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + timestamp + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, signature := range strings.Fields(header.Get("webhook-signature")) {
		encoded, ok := strings.CutPrefix(signature, "v1,")
		got, err := base64.StdEncoding.DecodeString(encoded)
		if ok && err == nil && hmac.Equal(got, want) {
			var event WebhookEvent
			if err := json.Unmarshal(body, &event); err != nil {
				return nil, fmt.Errorf("client: a signed webhook's body: %w", err)
			}
			return &event, nil
		}
	}
	return nil, fmt.Errorf("%w: no signature matches", ErrWebhookSignature)
}
