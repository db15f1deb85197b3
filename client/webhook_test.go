package client_test

import (
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/client"
)

// TestVerifyWebhook: a delivery signed by the server verifies, under the
// current secret or the one rotated out beside it; a changed body, ID or
// timestamp, another secret, or a stale timestamp does not.
func TestVerifyWebhook(t *testing.T) {
	current, previous, other := upscale.NewWebhookSecret(), upscale.NewWebhookSecret(), upscale.NewWebhookSecret()
	now := time.Now()
	body := []byte(`{"type":"upscale.job.succeeded","timestamp":"2026-03-10T12:00:00Z","data":{"id":"job_1","status":"succeeded","result":{"url":"https://r.example/a.png","via":"credit"}}}`)
	signed := func(id string, at time.Time, secrets ...string) http.Header {
		h := http.Header{}
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", strconv.FormatInt(at.Unix(), 10))
		h.Set("webhook-signature", upscale.SignWebhook(secrets, id, at, body))
		return h
	}
	event, err := client.VerifyWebhook(current, signed("msg_job_1", now, current, previous), body, now)
	if err != nil || event.Type != "upscale.job.succeeded" || event.Data.ID != "job_1" || !event.Data.Done() || event.Data.Result.Via != "credit" {
		t.Fatalf("VerifyWebhook = %+v, %v; want the event", event, err)
	}
	if _, err := client.VerifyWebhook(previous, signed("msg_job_1", now, current, previous), body, now); err != nil {
		t.Errorf("under the rotated-out secret: %v", err)
	}
	tampered := append([]byte(nil), body...)
	tampered[len(tampered)-3] = 'X'
	replayedAs := signed("msg_job_1", now, current)
	replayedAs.Set("webhook-id", "msg_job_2")
	for name, tc := range map[string]struct {
		secret string
		header http.Header
		body   []byte
	}{
		"Body":          {current, signed("msg_job_1", now, current), tampered},
		"ID":            {current, replayedAs, body},
		"OtherSecret":   {other, signed("msg_job_1", now, current), body},
		"Stale":         {current, signed("msg_job_1", now.Add(-client.WebhookTolerance-time.Minute), current), body},
		"FromTheFuture": {current, signed("msg_job_1", now.Add(client.WebhookTolerance+time.Minute), current), body},
		"Unsigned":      {current, http.Header{"Webhook-Id": {"msg_job_1"}, "Webhook-Timestamp": {strconv.FormatInt(now.Unix(), 10)}}, body},
	} {
		if _, err := client.VerifyWebhook(tc.secret, tc.header, tc.body, now); !errors.Is(err, client.ErrWebhookSignature) {
			t.Errorf("%s: %v, want ErrWebhookSignature", name, err)
		}
	}
}
