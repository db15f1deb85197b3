package upscaletest

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
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
	ctx := context.Background()
	start := time.Now().UTC().Truncate(time.Second)
	webhook := func(id string) upscale.Webhook {
		return upscale.Webhook{
			ID: id, AccountID: "acme", URL: "https://hooks.example/" + id,
			Payload: []byte(`{"type":"upscale.job.succeeded","id":"` + id + `"}`), Expires: start.Add(time.Hour),
		}
	}
	const backoff = 100 * time.Millisecond
	fixed := func(int) time.Duration { return backoff }
	// attempts records each attempt's time by webhook ID.
	type attempts struct {
		sync.Mutex
		at map[string][]time.Time
	}
	record := func(a *attempts, w upscale.Webhook) int {
		a.Lock()
		defer a.Unlock()
		a.at[w.ID] = append(a.at[w.ID], time.Now())
		return len(a.at[w.ID])
	}
	count := func(a *attempts, id string) int {
		a.Lock()
		defer a.Unlock()
		return len(a.at[id])
	}
	work := func(t *testing.T, q upscale.WebhookQueue, deliver func(context.Context, upscale.Webhook) error) {
		t.Helper()
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
	enqueue := func(t *testing.T, q upscale.WebhookQueue, ws ...upscale.Webhook) {
		t.Helper()
		for _, w := range ws {
			if err := q.Enqueue(ctx, w); err != nil {
				t.Fatalf("Enqueue(%s): %v", w.ID, err)
			}
		}
	}
	// eventually waits until cond holds, for 30 s at most.
	eventually := func(t *testing.T, what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("after 30 s, still not: %s", what)
			}
		}
	}

	t.Run("DeliversOncePerID", func(t *testing.T) {
		q := newQueue(t, NewClock(start), fixed)
		got := &attempts{at: map[string][]time.Time{}}
		var mu sync.Mutex
		payloads := map[string]string{}
		work(t, q, func(ctx context.Context, w upscale.Webhook) error {
			record(got, w)
			mu.Lock()
			payloads[w.ID] = string(w.Payload)
			mu.Unlock()
			return nil
		})
		ids := []string{"msg_a", "msg_b", "msg_c"}
		for _, id := range ids {
			enqueue(t, q, webhook(id), webhook(id))
		}
		eventually(t, "all delivered", func() bool { return count(got, "msg_a")+count(got, "msg_b")+count(got, "msg_c") == 3 })
		enqueue(t, q, webhook("msg_a")) // delivered already
		time.Sleep(3 * backoff)
		for _, id := range ids {
			mu.Lock()
			payload := payloads[id]
			mu.Unlock()
			if n := count(got, id); n != 1 || payload != string(webhook(id).Payload) {
				t.Errorf("%s: %d attempts with %s, want 1 with its payload", id, n, payload)
			}
		}
	})

	t.Run("RetriesAfterBackoff", func(t *testing.T) {
		q := newQueue(t, NewClock(start), fixed)
		got := &attempts{at: map[string][]time.Time{}}
		work(t, q, func(ctx context.Context, w upscale.Webhook) error {
			if record(got, w) < 3 {
				return errors.New("the receiver answered 500")
			}
			return nil
		})
		enqueue(t, q, webhook("msg_flaky"))
		eventually(t, "delivered on the third attempt", func() bool { return count(got, "msg_flaky") == 3 })
		time.Sleep(3 * backoff)
		got.Lock()
		defer got.Unlock()
		at := got.at["msg_flaky"]
		if len(at) != 3 {
			t.Fatalf("%d attempts, want 3: none after the one that succeeded", len(at))
		}
		for i := 1; i < len(at); i++ {
			if gap := at[i].Sub(at[i-1]); gap < backoff {
				t.Errorf("attempt %d came %v after the one before, want the backoff %v or more", i+1, gap, backoff)
			}
		}
	})

	t.Run("GivesUpAtExpiry", func(t *testing.T) {
		clock := NewClock(start)
		q := newQueue(t, clock, fixed)
		got := &attempts{at: map[string][]time.Time{}}
		work(t, q, func(ctx context.Context, w upscale.Webhook) error {
			record(got, w)
			return fmt.Errorf("the receiver is down")
		})
		stale := webhook("msg_stale")
		stale.Expires = start.Add(-time.Second)
		enqueue(t, q, stale, webhook("msg_down"))
		eventually(t, "attempted twice", func() bool { return count(got, "msg_down") >= 2 })
		clock.Advance(2 * time.Hour)
		time.Sleep(3 * backoff) // an attempt under way as the clock moved may end
		settled := count(got, "msg_down")
		time.Sleep(5 * backoff)
		if n := count(got, "msg_down"); n != settled {
			t.Errorf("attempts went on after the webhook expired: %d, then %d", settled, n)
		}
		if n := count(got, "msg_stale"); n != 0 {
			t.Errorf("an expired webhook was attempted %d times", n)
		}
	})

	t.Run("GoneStops", func(t *testing.T) {
		q := newQueue(t, NewClock(start), fixed)
		got := &attempts{at: map[string][]time.Time{}}
		work(t, q, func(ctx context.Context, w upscale.Webhook) error {
			record(got, w)
			return fmt.Errorf("the receiver answered 410: %w", upscale.ErrWebhookGone)
		})
		enqueue(t, q, webhook("msg_gone"))
		eventually(t, "attempted", func() bool { return count(got, "msg_gone") == 1 })
		time.Sleep(5 * backoff)
		if n := count(got, "msg_gone"); n != 1 {
			t.Errorf("%d attempts after the receiver answered 410, want 1", n)
		}
	})

	t.Run("AccountShare", func(t *testing.T) {
		// One account's receiver never answers, and it has many
		// webhooks: it holds at most its share of the deliverers, and
		// another account's webhook is delivered meanwhile.
		q := newQueue(t, NewClock(start), fixed)
		const concurrency = 4
		share := upscale.WebhookAccountShare(concurrency)
		hung := make(chan struct{})
		var mu sync.Mutex
		stuck, most := 0, 0
		delivered := make(chan string, 1)
		stop, err := q.Deliver(ctx, concurrency, func(ctx context.Context, w upscale.Webhook) error {
			if w.AccountID == "globex" {
				delivered <- w.ID
				return nil
			}
			mu.Lock()
			stuck++
			most = max(most, stuck)
			mu.Unlock()
			select {
			case <-hung:
			case <-ctx.Done():
			}
			mu.Lock()
			stuck--
			mu.Unlock()
			return errors.New("the receiver never answered")
		})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			close(hung)
			drain, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			stop(drain)
		}()
		for i := range 3 * concurrency {
			enqueue(t, q, webhook(fmt.Sprintf("msg_acme_%d", i)))
		}
		eventually(t, "acme's receiver holds its share", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return stuck == share
		})
		other := webhook("msg_globex")
		other.AccountID = "globex"
		enqueue(t, q, other)
		select {
		case id := <-delivered:
			if id != other.ID {
				t.Errorf("delivered %s, want %s", id, other.ID)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("another account's webhook waited behind a receiver that never answers")
		}
		mu.Lock()
		defer mu.Unlock()
		if most > share {
			t.Errorf("one account's webhooks held %d deliverers at once, want at most %d", most, share)
		}
	})

	t.Run("StopGivesBack", func(t *testing.T) {
		q := newQueue(t, NewClock(start), fixed)
		started := make(chan struct{})
		stop, err := q.Deliver(ctx, 1, func(ctx context.Context, w upscale.Webhook) error {
			close(started)
			<-ctx.Done()
			return ctx.Err()
		})
		if err != nil {
			t.Fatal(err)
		}
		enqueue(t, q, webhook("msg_cut"))
		<-started
		drain, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if err := stop(drain); err != nil {
			t.Fatalf("stop: %v", err)
		}
		delivered := make(chan string, 1)
		work(t, q, func(ctx context.Context, w upscale.Webhook) error {
			delivered <- w.ID
			return nil
		})
		select {
		case id := <-delivered:
			if id != "msg_cut" {
				t.Errorf("delivered %s, want msg_cut", id)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the attempt stop cut short was never made again")
		}
	})
}
