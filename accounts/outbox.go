package accounts

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/upscalekit/upscale"
)

// Outbox keeps the mail the dashboard sends, and sends it, so that no page
// waits on a mail server: Post returns once the mail is kept, and the
// outbox tries again while the Mailer is unavailable, until the mail
// expires (a link in it no longer works). MemoryOutbox is one.
type Outbox interface {
	Post(ctx context.Context, m Mail, expires time.Time) error
}

// MemoryOutbox is an Outbox in process memory over a Mailer, for one
// process: mail not yet sent when the process ends is lost (its links
// can be asked for again). It logs each mail's outcome, never its
// content.
type MemoryOutbox struct {
	mailer  Mailer
	logger  *slog.Logger
	backoff func(attempt int) time.Duration

	mu      sync.Mutex
	closed  bool // Close was called: Post takes nothing more
	sending sync.WaitGroup
	stop    chan struct{} // closed once the mail under way is to be dropped
}

var _ Outbox = (*MemoryOutbox)(nil)

// MemoryOutboxOptions configures a MemoryOutbox.
type MemoryOutboxOptions struct {
	// Mailer sends the mail; required.
	Mailer Mailer
	// Logger receives what could not be sent. Nil means slog.Default().
	Logger *slog.Logger
}

// NewMemoryOutbox returns an empty MemoryOutbox.
func NewMemoryOutbox(opts MemoryOutboxOptions) *MemoryOutbox {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &MemoryOutbox{mailer: opts.Mailer, logger: opts.Logger, backoff: MailBackoff, stop: make(chan struct{})}
}

// Post implements Outbox.
func (o *MemoryOutbox) Post(_ context.Context, m Mail, expires time.Time) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return errors.New("accounts: the outbox is closed")
	}
	o.sending.Go(func() { o.send(m, expires) })
	return nil
}

// send tries m until it is sent, refused for good, or expired.
func (o *MemoryOutbox) send(m Mail, expires time.Time) {
	ctx, cancel := context.WithDeadline(context.Background(), expires)
	defer cancel()
	go func() {
		select {
		case <-o.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for attempt := 1; ; attempt++ {
		err := o.mailer.Send(ctx, m)
		switch {
		case err == nil:
			o.logger.Info("accounts: mail sent", "subject", m.Subject, "attempts", attempt)
			return
		case !errors.Is(err, upscale.ErrUnavailable):
			o.logger.Error("accounts: mail refused; not sent", "subject", m.Subject, "err", err)
			return
		}
		o.logger.Warn("accounts: mail server unavailable; trying again", "subject", m.Subject, "attempt", attempt, "err", err)
		select {
		case <-time.After(o.backoff(attempt)):
		case <-ctx.Done():
			o.logger.Error("accounts: mail not sent before it expired", "subject", m.Subject, "attempts", attempt)
			return
		}
	}
}

// MailBackoff is the wait after a mail's attempt: 2 s, twice as long each
// time, a minute at the most; a link's mail has 15 minutes. Outboxes on a
// queue (riverqueue) wait the same.
func MailBackoff(attempt int) time.Duration {
	return min(2*time.Second<<min(max(attempt-1, 0), 5), time.Minute)
}

// Close takes no more mail; the mail under way is given until ctx is done
// to be sent, then dropped. It returns once no sending is left.
func (o *MemoryOutbox) Close(ctx context.Context) {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return
	}
	o.closed = true // no Post adds to sending while it is waited for
	o.mu.Unlock()
	done := make(chan struct{})
	go func() {
		o.sending.Wait()
		close(done)
	}()
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	close(o.stop)
	<-done
}
