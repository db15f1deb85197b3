// Package membudget counts the memory requests hold at once, and makes
// them wait, first come first served, for what others hold.
package membudget

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// Budget is the memory a Handler lets requests hold at once: source
// bytes while downloading and held, and the engine's estimated working
// memory. Grants are first come, first served (a large request is not
// starved by small ones), and a request waits for its share only as long
// as its deadline allows.
type Budget struct {
	total int64
	sem   *semaphore.Weighted
	inUse atomic.Int64

	tooLarge func(need, total int64) error

	mu       sync.Mutex
	released chan struct{} // closed at the next give, for GrowBehind
}

// New returns a Budget of total bytes. tooLarge makes the error for a
// grant that could never fit, from the bytes it needs and total.
func New(total int64, tooLarge func(need, total int64) error) *Budget {
	return &Budget{total: total, tooLarge: tooLarge, sem: semaphore.NewWeighted(total), released: make(chan struct{})}
}

// Total is the budget's size in bytes.
func (b *Budget) Total() int64 { return b.total }

// InUse is the bytes its grants hold now.
func (b *Budget) InUse() int64 { return b.inUse.Load() }

// A Grant is the budget one request holds. The request and, while it
// runs, the Upscaler's goroutine each hold a reference; the bytes go back
// when the last lets go, so an engine that outlives its request's deadline
// keeps its memory counted.
type Grant struct {
	b *Budget

	mu    sync.Mutex
	bytes int64
	refs  int
}

// NewGrant returns an empty grant with one reference, the request's.
func (b *Budget) NewGrant() *Grant { return &Grant{b: b, refs: 1} }

// Grow adds n bytes to the grant, waiting for them while ctx allows. A
// request that could never fit gets the Budget's tooLarge error; one
// whose deadline passes while it waits for memory others hold gets
// retryAfter's, and one whose caller went away ctx's.
func (g *Grant) Grow(ctx context.Context, n int64, retryAfter func() error) error {
	if n <= 0 {
		return nil
	}
	if err := g.fits(n); err != nil {
		return err
	}
	// Free memory is taken whatever ctx says: a deadline that passes with
	// memory free is not an overload, and the next step reports it as the
	// deadline it is.
	if !g.b.sem.TryAcquire(n) {
		if err := g.b.sem.Acquire(ctx, n); err != nil {
			return waitEnded(err, retryAfter)
		}
	}
	g.add(n)
	return nil
}

// GrowBehind is Grow for a job run, which must not hold requests behind
// it: it takes memory only when it is free and no request waits for it,
// and waits for memory given back otherwise, outside the budget's queue.
func (g *Grant) GrowBehind(ctx context.Context, n int64, retryAfter func() error) error {
	if n <= 0 {
		return nil
	}
	if err := g.fits(n); err != nil {
		return err
	}
	for {
		released := g.b.releases()
		if g.b.sem.TryAcquire(n) {
			g.add(n)
			return nil
		}
		select {
		case <-released:
		case <-time.After(50 * time.Millisecond): // a waiter that gave up gives nothing back, yet frees the queue
		case <-ctx.Done():
			return waitEnded(ctx.Err(), retryAfter)
		}
	}
}

// fits refuses n more bytes that the grant could never hold.
func (g *Grant) fits(n int64) error {
	g.mu.Lock()
	held := g.bytes
	g.mu.Unlock()
	if held+n > g.b.total {
		return g.b.tooLarge(held+n, g.b.total)
	}
	return nil
}

// add counts n bytes taken from the budget.
func (g *Grant) add(n int64) {
	g.b.inUse.Add(n)
	g.mu.Lock()
	g.bytes += n
	g.mu.Unlock()
}

// waitEnded is what a wait for memory that ended with err returns: err
// for a caller gone, retryAfter's refusal for a deadline.
func waitEnded(err error, retryAfter func() error) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	return retryAfter()
}

// releases returns a channel closed when memory is next given back.
func (b *Budget) releases() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.released
}

// ShrinkTo gives back what the grant holds beyond n bytes.
func (g *Grant) ShrinkTo(n int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if extra := g.bytes - max(n, 0); extra > 0 {
		g.bytes -= extra
		g.b.give(extra)
	}
}

// Share adds a reference, for the Upscaler's goroutine.
func (g *Grant) Share() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refs++
}

// Done drops a reference; the last one gives every byte back.
func (g *Grant) Done() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.refs--; g.refs == 0 && g.bytes > 0 {
		g.b.give(g.bytes)
		g.bytes = 0
	}
}

func (b *Budget) give(n int64) {
	b.inUse.Add(-n)
	b.sem.Release(n)
	b.mu.Lock()
	close(b.released)
	b.released = make(chan struct{})
	b.mu.Unlock()
}
