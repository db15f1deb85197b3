package upscaletest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
)

// testWebhookDelivery checks that a WebhookQueue delivers each webhook
// once per ID, with its payload, however often it is enqueued, and
// retries a failed attempt after its backoff until one succeeds.
//
// That a webhook gets no further attempt has no sign to wait for: the
// queue promises no order among webhooks, so another one attempted later
// proves nothing of it. So these checks sleep a few backoffs, the time in
// which a further attempt would come, and then count.
func testWebhookDelivery(t *testing.T, s webhookQueueSuite) {
	t.Run("DeliversOncePerID", func(t *testing.T) {
		q, _ := s.queue(t)
		var got webhookAttempts
		var mu sync.Mutex
		payloads := map[string]string{}
		s.deliver(t, q, func(ctx context.Context, w upscale.Webhook) error {
			got.record(w)
			mu.Lock()
			payloads[w.ID] = string(w.Payload)
			mu.Unlock()
			return nil
		})
		ids := []string{"msg_a", "msg_b", "msg_c"}
		for _, id := range ids {
			s.enqueue(t, q, s.webhook(id), s.webhook(id))
		}
		eventually(t, "all delivered", func() bool { return got.count("msg_a")+got.count("msg_b")+got.count("msg_c") == 3 })
		s.enqueue(t, q, s.webhook("msg_a")) // delivered already
		time.Sleep(3 * s.backoff)
		for _, id := range ids {
			mu.Lock()
			payload := payloads[id]
			mu.Unlock()
			if n := got.count(id); n != 1 || payload != string(s.webhook(id).Payload) {
				t.Errorf("%s: %d attempts with %s, want 1 with its payload", id, n, payload)
			}
		}
	})

	t.Run("RetriesAfterBackoff", func(t *testing.T) {
		q, _ := s.queue(t)
		var got webhookAttempts
		s.deliver(t, q, func(ctx context.Context, w upscale.Webhook) error {
			if got.record(w) < 3 {
				return errors.New("the receiver answered 500")
			}
			return nil
		})
		s.enqueue(t, q, s.webhook("msg_flaky"))
		eventually(t, "delivered on the third attempt", func() bool { return got.count("msg_flaky") == 3 })
		time.Sleep(3 * s.backoff)
		at := got.times("msg_flaky")
		if len(at) != 3 {
			t.Fatalf("%d attempts, want 3: none after the one that succeeded", len(at))
		}
		for i := 1; i < len(at); i++ {
			if gap := at[i].Sub(at[i-1]); gap < s.backoff {
				t.Errorf("attempt %d came %v after the one before, want the backoff %v or more", i+1, gap, s.backoff)
			}
		}
	})
}

// testWebhookGivingUp checks that a WebhookQueue stops attempting a
// webhook once it has expired, never attempts one enqueued expired, and
// stops at once when the receiver answers that it is gone. It waits a few
// backoffs to see that no attempt comes, as testWebhookDelivery does.
func testWebhookGivingUp(t *testing.T, s webhookQueueSuite) {
	t.Run("GivesUpAtExpiry", func(t *testing.T) {
		q, clock := s.queue(t)
		var got webhookAttempts
		s.deliver(t, q, func(ctx context.Context, w upscale.Webhook) error {
			got.record(w)
			return fmt.Errorf("the receiver is down")
		})
		stale := s.webhook("msg_stale")
		stale.Expires = s.start.Add(-time.Second)
		s.enqueue(t, q, stale, s.webhook("msg_down"))
		eventually(t, "attempted twice", func() bool { return got.count("msg_down") >= 2 })
		clock.Advance(2 * time.Hour)
		time.Sleep(3 * s.backoff) // an attempt under way as the clock moved may end
		settled := got.count("msg_down")
		time.Sleep(5 * s.backoff)
		if n := got.count("msg_down"); n != settled {
			t.Errorf("attempts went on after the webhook expired: %d, then %d", settled, n)
		}
		if n := got.count("msg_stale"); n != 0 {
			t.Errorf("an expired webhook was attempted %d times", n)
		}
	})

	t.Run("GoneStops", func(t *testing.T) {
		q, _ := s.queue(t)
		var got webhookAttempts
		s.deliver(t, q, func(ctx context.Context, w upscale.Webhook) error {
			got.record(w)
			return fmt.Errorf("the receiver answered 410: %w", upscale.ErrWebhookGone)
		})
		s.enqueue(t, q, s.webhook("msg_gone"))
		eventually(t, "attempted", func() bool { return got.count("msg_gone") == 1 })
		time.Sleep(5 * s.backoff)
		if n := got.count("msg_gone"); n != 1 {
			t.Errorf("%d attempts after the receiver answered 410, want 1", n)
		}
	})
}
