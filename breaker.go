package upscale

import (
	"context"
	"errors"
	"sync"
	"time"
)

// backendRetryInterval is how long a store that reported ErrUnavailable is
// left alone before one request may try it again.
const backendRetryInterval = time.Second

// A breaker stands in front of one store. Once a call reports
// ErrUnavailable, new requests are refused with 503 backend_unavailable for
// backendRetryInterval; then one request goes through as a probe, and its
// outcome closes the breaker or opens it again. So a database that is down
// sees about one attempt a second from each replica instead of a dial per
// request, callers learn in microseconds when to come back, and recovery is
// noticed within a second of the store's return.
//
// A breaker was chosen over pool limits, which cap connections but not
// redials, and over backoff inside each request, which holds every caller
// for the length of the outage.
type breaker struct {
	now func() time.Time

	mu        sync.Mutex
	openUntil time.Time // zero while the store answers
}

// refusing returns the refusal for a new request while the breaker is open
// and its probe is not due, without taking the probe's turn.
func (b *breaker) refusing() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if now := b.now(); now.Before(b.openUntil) {
		return unavailable(b.openUntil.Sub(now))
	}
	return nil
}

// call runs fn unless the breaker refuses, and records its outcome. The
// first caller after the interval is the probe: others are refused until it
// has answered or another interval has passed.
func (b *breaker) call(fn func() error) error {
	b.mu.Lock()
	if !b.openUntil.IsZero() {
		now := b.now()
		if now.Before(b.openUntil) {
			b.mu.Unlock()
			return unavailable(b.openUntil.Sub(now))
		}
		b.openUntil = now.Add(backendRetryInterval)
	}
	b.mu.Unlock()
	return b.record(fn())
}

// record notes the outcome of a call the breaker did not gate (a commit or
// release, which must be tried whatever the breaker says) and returns err,
// with a Retry-After when the store was unavailable.
func (b *breaker) record(err error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case errors.Is(err, ErrUnavailable):
		b.openUntil = b.now().Add(backendRetryInterval)
		return &retryAfterError{err: err, after: backendRetryInterval}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err // the request's clock ran out; the store told us nothing
	}
	b.openUntil = time.Time{} // the store answered, even if with an error
	return err
}

func unavailable(after time.Duration) error {
	return &retryAfterError{
		err:   Explain(ErrUnavailable, msgUnavailable),
		after: after,
	}
}
