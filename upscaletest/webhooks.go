package upscaletest

import (
	"context"
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
)

// TestWebhookSecrets checks that a WebhookSecrets makes secrets of the
// Standard Webhooks form, keeps them per account, and lets a rotated-out
// secret sign beside the new one for WebhookSecretOverlap, and no longer.
// newSecrets must return an empty store on clock in which the accounts
// "acme" and "globex" exist.
func TestWebhookSecrets(t *testing.T, newSecrets func(t *testing.T, clock *Clock) upscale.WebhookSecrets) {
	ctx := context.Background()
	clock := NewClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
	s := newSecrets(t, clock)
	signing := func(account string, want ...string) {
		t.Helper()
		got, err := s.WebhookSecrets(ctx, account)
		if err != nil {
			t.Fatalf("WebhookSecrets(%s): %v", account, err)
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("WebhookSecrets(%s) = %q, want %q", account, got, want)
		}
	}
	rotate := func(account string) string {
		t.Helper()
		secret, err := s.RotateWebhookSecret(ctx, account)
		if err != nil {
			t.Fatalf("RotateWebhookSecret(%s): %v", account, err)
		}
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
		if !strings.HasPrefix(secret, "whsec_") || err != nil || len(key) != 32 {
			t.Fatalf("secret %q: want whsec_ and the base64 of 32 bytes", secret)
		}
		return secret
	}
	signing("acme")
	first := rotate("acme")
	signing("acme", first)
	signing("globex")
	clock.Advance(time.Hour)
	second := rotate("acme")
	if second == first {
		t.Fatal("a rotation made the same secret again")
	}
	signing("acme", second, first)
	clock.Advance(upscale.WebhookSecretOverlap - time.Second)
	signing("acme", second, first)
	clock.Advance(time.Second)
	signing("acme", second)
	other := rotate("globex")
	signing("globex", other)
	signing("acme", second)
	if _, err := s.RotateWebhookSecret(ctx, "no-such-account"); err != nil && !errors.Is(err, upscale.ErrNotFound) {
		t.Errorf("RotateWebhookSecret of an unknown account: %v, want nil or ErrNotFound", err)
	}
}

// TestWebhookQueue checks that a WebhookQueue delivers each webhook until
// an attempt succeeds, once per ID however often it is enqueued, waits
// its backoff between attempts, gives up at Expires, and gives the
// attempts its stop cut short to the next Deliver. newQueue must return an
// empty queue that reads time from clock and waits backoff after a failed
// attempt.
func TestWebhookQueue(t *testing.T, newQueue func(t *testing.T, clock *Clock, backoff func(attempt int) time.Duration) upscale.WebhookQueue) {
	s := webhookQueueSuite{newQueue: newQueue, start: time.Now().UTC().Truncate(time.Second), backoff: 100 * time.Millisecond}
	testWebhookDelivery(t, s)
	testWebhookGivingUp(t, s)
	testWebhookDeliverers(t, s)
}

// webhookQueueSuite is what TestWebhookQueue's checks share: the queue
// under test, made anew for each, when their webhooks were made, and the
// backoff the queue waits after every failed attempt.
type webhookQueueSuite struct {
	newQueue func(t *testing.T, clock *Clock, backoff func(attempt int) time.Duration) upscale.WebhookQueue
	start    time.Time
	backoff  time.Duration
}

// queue returns a new queue waiting the suite's backoff, and the clock it
// reads, standing at the suite's start.
func (s webhookQueueSuite) queue(t *testing.T) (upscale.WebhookQueue, *Clock) {
	clock := NewClock(s.start)
	return s.newQueue(t, clock, func(int) time.Duration { return s.backoff }), clock
}

// webhook is acme's webhook id, expiring an hour after the suite's start.
func (s webhookQueueSuite) webhook(id string) upscale.Webhook {
	return upscale.Webhook{
		ID: id, AccountID: "acme", URL: "https://hooks.example/" + id,
		Payload: []byte(`{"type":"upscale.job.succeeded","id":"` + id + `"}`), Expires: s.start.Add(time.Hour),
	}
}

// enqueue enqueues ws on q.
func (s webhookQueueSuite) enqueue(t *testing.T, q upscale.WebhookQueue, ws ...upscale.Webhook) {
	t.Helper()
	for _, w := range ws {
		if err := q.Enqueue(context.Background(), w); err != nil {
			t.Fatalf("Enqueue(%s): %v", w.ID, err)
		}
	}
}

// deliver has deliver deliver q's webhooks, two at a time, until the test
// ends.
func (s webhookQueueSuite) deliver(t *testing.T, q upscale.WebhookQueue, deliver func(context.Context, upscale.Webhook) error) {
	t.Helper()
	ctx := context.Background()
	stop, err := q.Deliver(ctx, 2, deliver)
	if err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	t.Cleanup(func() {
		drain, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := stop(drain); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
}

// webhookAttempts records when each webhook was attempted, by ID, for
// deliverers that run at once. Its zero value records nothing yet.
type webhookAttempts struct {
	mu sync.Mutex
	at map[string][]time.Time
}

// record records an attempt of w now, and returns how many w has had.
func (a *webhookAttempts) record(w upscale.Webhook) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.at == nil {
		a.at = map[string][]time.Time{}
	}
	a.at[w.ID] = append(a.at[w.ID], time.Now())
	return len(a.at[w.ID])
}

// count is how many attempts the webhook id has had.
func (a *webhookAttempts) count(id string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.at[id])
}

// times are the times of the webhook id's attempts, in order.
func (a *webhookAttempts) times(id string) []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.at[id])
}

// eventually waits until cond holds, for 30 s at most, failing t with
// what it waited for if it never does.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s, still not: %s", what)
		}
	}
}
