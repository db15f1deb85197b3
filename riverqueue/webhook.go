package riverqueue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/upscalekit/upscale"
)

// webhookArgs is a webhook as River keeps it: a job of kind
// "upscale_webhook" in the queue "upscale_webhooks", unique by ID.
type webhookArgs struct {
	ID        string    `json:"id" river:"unique"`
	AccountID string    `json:"accountId"`
	URL       string    `json:"url"`
	Payload   []byte    `json:"payload"`
	Expires   time.Time `json:"expires"`
}

func (webhookArgs) Kind() string { return "upscale_webhook" }

// Enqueue implements upscale.WebhookQueue. An account's webhook is
// fetched before those of accounts with more undelivered at the time (its
// River priority), so that a burst of one account's, or a receiver that
// keeps failing, is worked through behind the others'.
func (q *Queue[TTx]) Enqueue(ctx context.Context, w upscale.Webhook) error {
	waiting, err := q.countAccount(ctx, webhookArgs{}.Kind(), w.AccountID)
	if err != nil {
		return classify(ctx, fmt.Errorf("riverqueue: count the account's webhooks: %w", err))
	}
	args := webhookArgs{ID: w.ID, AccountID: w.AccountID, URL: w.URL, Payload: w.Payload, Expires: w.Expires}
	_, err = q.client.Insert(ctx, args, &river.InsertOpts{
		Queue: webhookQueueName, MaxAttempts: maxDeliveries, Priority: 1 + min(waiting/webhookShareOfQueue, upscale.JobPriorities-1),
		UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: rivertype.JobStates()},
	})
	if err != nil {
		return classify(ctx, fmt.Errorf("riverqueue: insert webhook %s: %w", w.ID, err))
	}
	return nil
}

// webhookShareOfQueue is how many undelivered webhooks of an account keep
// its next one at the first priority; each as many more lower it by one.
const webhookShareOfQueue = 4

// maxDeliveries is how often River attempts a webhook before giving up on
// it: in effect never, since the webhook expires first (WebhookTTL, the
// backoff's 6 h apart at most).
const maxDeliveries = 10_000

// Deliver implements upscale.WebhookQueue: a River client of its own,
// with concurrency workers on the queue "upscale_webhooks".
func (q *Queue[TTx]) Deliver(ctx context.Context, concurrency int, deliver func(context.Context, upscale.Webhook) error) (func(drain context.Context) error, error) {
	return q.work(ctx, handlers{deliver: deliver}, webhookQueueName, concurrency)
}

// webhookWorker delivers webhooks for River: an attempt that fails is an
// error, which River retries after the backoff, until the webhook expires;
// one the receiver answered 410 is not tried again. An account's webhooks
// take at most share of this process's deliverers at once: one beyond it
// is snoozed for a while, uncounted, and the deliverer takes another.
type webhookWorker struct {
	river.WorkerDefaults[webhookArgs]
	now     func() time.Time
	backoff func(attempt int) time.Duration
	deliver func(context.Context, upscale.Webhook) error
	share   int

	mu       sync.Mutex
	inFlight map[string]int // by account
}

// webhookTurn is how long a webhook beyond its account's share waits
// before a deliverer takes it again: about one slow attempt.
const webhookTurn = 2 * time.Second

func (w *webhookWorker) Work(ctx context.Context, rj *river.Job[webhookArgs]) error {
	a := rj.Args
	if !w.now().Before(a.Expires) {
		return river.JobCancel(errWebhookExpired)
	}
	if !w.take(a.AccountID) {
		return river.JobSnooze(webhookTurn)
	}
	defer w.leave(a.AccountID)
	err := w.deliver(ctx, upscale.Webhook{ID: a.ID, AccountID: a.AccountID, URL: a.URL, Payload: a.Payload, Expires: a.Expires})
	if errors.Is(err, upscale.ErrWebhookGone) {
		return river.JobCancel(err)
	}
	return err
}

// take counts one of accountID's deliveries under way, unless it has its
// share under way already.
func (w *webhookWorker) take(accountID string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.inFlight[accountID] >= w.share {
		return false
	}
	w.inFlight[accountID]++
	return true
}

func (w *webhookWorker) leave(accountID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.inFlight[accountID]--; w.inFlight[accountID] == 0 {
		delete(w.inFlight, accountID)
	}
}

func (w *webhookWorker) NextRetry(rj *river.Job[webhookArgs]) time.Time {
	return time.Now().Add(w.backoff(rj.Attempt))
}

// errWebhookExpired cancels a webhook whose delivery was given up.
var errWebhookExpired = errors.New("riverqueue: the webhook expired before it was delivered")
