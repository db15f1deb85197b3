package upscale

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/upscalekit/upscale/internal/periodic"
	"github.com/upscalekit/upscale/internal/workers"
)

// MemoryWebhookSecretsOptions configures a MemoryWebhookSecrets.
type MemoryWebhookSecretsOptions struct {
	// Now is the store's clock. Nil means time.Now.
	Now func() time.Time
}

// MemoryWebhookSecrets is a WebhookSecrets held in process memory, for one
// process and for tests; it keeps no accounts, so every account ID is one.
// It is safe for concurrent use.
type MemoryWebhookSecrets struct {
	now func() time.Time

	mu      sync.Mutex
	secrets map[string]rotatedSecret
}

// rotatedSecret is an account's current secret, and the one it replaced
// at rotated.
type rotatedSecret struct {
	current, previous string
	rotated           time.Time
}

var _ WebhookSecrets = (*MemoryWebhookSecrets)(nil)

// NewMemoryWebhookSecrets returns an empty MemoryWebhookSecrets.
func NewMemoryWebhookSecrets(opts MemoryWebhookSecretsOptions) *MemoryWebhookSecrets {
	return &MemoryWebhookSecrets{now: clock(opts.Now), secrets: map[string]rotatedSecret{}}
}

// WebhookSecrets implements WebhookSecrets.
func (s *MemoryWebhookSecrets) WebhookSecrets(ctx context.Context, accountID string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.secrets[accountID].signing(s.now()), nil
}

// signing is the secrets that sign at now, newest first.
func (r rotatedSecret) signing(now time.Time) []string {
	switch {
	case r.current == "":
		return nil
	case r.previous != "" && now.Before(r.rotated.Add(WebhookSecretOverlap)):
		return []string{r.current, r.previous}
	}
	return []string{r.current}
}

// RotateWebhookSecret implements WebhookSecrets.
func (s *MemoryWebhookSecrets) RotateWebhookSecret(ctx context.Context, accountID string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	secret := NewWebhookSecret()
	s.secrets[accountID] = rotatedSecret{current: secret, previous: s.secrets[accountID].current, rotated: s.now()}
	return secret, nil
}

// MemoryWebhookQueueOptions configures a MemoryWebhookQueue.
type MemoryWebhookQueueOptions struct {
	// Now is the clock webhooks expire by. Nil means time.Now.
	Now func() time.Time
	// Backoff is the wait after a failed attempt, by the number of
	// attempts so far. Nil means WebhookBackoff.
	Backoff func(attempt int) time.Duration
}

// MemoryWebhookQueue is a WebhookQueue held in process memory, for one
// process and for tests: its webhooks are lost when the process ends. It
// is safe for concurrent use.
type MemoryWebhookQueue struct {
	now     func() time.Time
	backoff func(attempt int) time.Duration

	mu       sync.Mutex
	webhooks map[string]*memoryWebhook // by ID, until they expire
	due      []*memoryWebhook          // to attempt now, oldest first
	inFlight map[string]int            // attempts under way, by account
	share    int                       // WebhookAccountShare of Deliver's concurrency
	wake     chan struct{}             // has a value while one may be due
	swept    periodic.Gate
}

type memoryWebhook struct {
	Webhook
	attempts int
	stop     context.CancelFunc // the attempt's under way, while one is
}

var _ WebhookQueue = (*MemoryWebhookQueue)(nil)

// NewMemoryWebhookQueue returns an empty MemoryWebhookQueue.
func NewMemoryWebhookQueue(opts MemoryWebhookQueueOptions) *MemoryWebhookQueue {
	backoff := opts.Backoff
	if backoff == nil {
		backoff = WebhookBackoff
	}
	return &MemoryWebhookQueue{now: clock(opts.Now), backoff: backoff, webhooks: map[string]*memoryWebhook{}, inFlight: map[string]int{}, wake: make(chan struct{}, 1)}
}

// lock takes q.mu and forgets the webhooks past their expiry, once a
// minute. It returns the time it used; the caller unlocks q.mu.
func (q *MemoryWebhookQueue) lock() time.Time {
	now := q.now()
	q.mu.Lock()
	if q.swept.Due(now) {
		for id, w := range q.webhooks {
			if w.stop == nil && !now.Before(w.Expires) {
				delete(q.webhooks, id)
			}
		}
	}
	return now
}

// Enqueue implements WebhookQueue.
func (q *MemoryWebhookQueue) Enqueue(ctx context.Context, webhook Webhook) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	q.lock()
	defer q.mu.Unlock()
	if _, ok := q.webhooks[webhook.ID]; ok {
		return nil
	}
	w := &memoryWebhook{Webhook: webhook}
	q.webhooks[webhook.ID] = w
	q.push(w)
	return nil
}

// push puts w among those due and wakes a deliverer. The caller holds
// q.mu.
func (q *MemoryWebhookQueue) push(w *memoryWebhook) {
	q.due = append(q.due, w)
	q.signal()
}

// signal wakes a deliverer. The caller holds q.mu.
func (q *MemoryWebhookQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Deliver implements WebhookQueue.
func (q *MemoryWebhookQueue) Deliver(ctx context.Context, concurrency int, deliver func(context.Context, Webhook) error) (func(drain context.Context) error, error) {
	if concurrency < 1 {
		return nil, fmt.Errorf("deliver %d webhooks at once: want at least 1", concurrency)
	}
	q.mu.Lock()
	q.share = WebhookAccountShare(concurrency)
	q.mu.Unlock()
	work := func(attemptCtx context.Context, w *memoryWebhook) {
		q.finish(w, deliver(attemptCtx, w.Webhook), attemptCtx)
	}
	cutShort := func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		for _, w := range q.webhooks {
			if w.stop != nil {
				w.stop()
			}
		}
	}
	return workers.Start(concurrency, q.take, work, cutShort), nil
}

// take waits for the oldest due webhook that has not expired, of an
// account below its share of the deliverers, and marks it under way, with
// the context its attempt gets; false once stopping is closed.
func (q *MemoryWebhookQueue) take(stopping <-chan struct{}) (w *memoryWebhook, attemptCtx context.Context, ok bool) {
	ok = workers.WaitToTake(stopping, q.wake, func() bool {
		now := q.lock()
		defer q.mu.Unlock()
		q.due = slices.DeleteFunc(q.due, func(w *memoryWebhook) bool { return !now.Before(w.Expires) })
		i := slices.IndexFunc(q.due, func(w *memoryWebhook) bool { return q.inFlight[w.AccountID] < q.share })
		if i < 0 {
			return false
		}
		w = q.due[i]
		q.due = slices.Delete(q.due, i, i+1)
		q.inFlight[w.AccountID]++
		attemptCtx, w.stop = context.WithCancel(context.Background())
		w.attempts++
		q.signal() // another deliverer may take the next
		return true
	})
	return w, attemptCtx, ok
}

// finish ends an attempt: delivered, or due again after the backoff (at
// once if its deliverer's stop cut it short, which is not its receiver's
// failure).
func (q *MemoryWebhookQueue) finish(w *memoryWebhook, err error, attemptCtx context.Context) {
	q.mu.Lock()
	defer q.mu.Unlock()
	stopped := attemptCtx.Err() != nil
	w.stop()
	w.stop = nil
	if q.inFlight[w.AccountID]--; q.inFlight[w.AccountID] == 0 {
		delete(q.inFlight, w.AccountID)
	}
	q.signal() // the account's next may be taken now
	switch {
	case err == nil, errors.Is(err, ErrWebhookGone): // kept until it expires, so that its ID is not enqueued again
	case stopped:
		w.attempts--
		q.push(w)
	default:
		time.AfterFunc(q.backoff(w.attempts), func() {
			q.mu.Lock()
			defer q.mu.Unlock()
			q.push(w)
		})
	}
}
