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

// testWebhookDeliverers checks how a WebhookQueue's deliverers are held:
// one account's receiver that never answers holds at most its share of
// them, so that another account's webhook is delivered meanwhile, and an
// attempt that stop cut short is made again by the next Deliver.
func testWebhookDeliverers(t *testing.T, s webhookQueueSuite) {
	ctx := context.Background()
	t.Run("AccountShare", func(t *testing.T) {
		// One account's receiver never answers, and it has many
		// webhooks: it holds at most its share of the deliverers, and
		// another account's webhook is delivered meanwhile.
		q, _ := s.queue(t)
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
			s.enqueue(t, q, s.webhook(fmt.Sprintf("msg_acme_%d", i)))
		}
		eventually(t, "acme's receiver holds its share", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return stuck == share
		})
		other := s.webhook("msg_globex")
		other.AccountID = "globex"
		s.enqueue(t, q, other)
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
		q, _ := s.queue(t)
		started := make(chan struct{})
		stop, err := q.Deliver(ctx, 1, func(ctx context.Context, w upscale.Webhook) error {
			close(started)
			<-ctx.Done()
			return ctx.Err()
		})
		if err != nil {
			t.Fatal(err)
		}
		s.enqueue(t, q, s.webhook("msg_cut"))
		<-started
		// A drain shorter than the attempt, which waits for its context:
		// stop must cut it short.
		drain, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if err := stop(drain); err != nil {
			t.Fatalf("stop: %v", err)
		}
		delivered := make(chan string, 1)
		s.deliver(t, q, func(ctx context.Context, w upscale.Webhook) error {
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
