package membudget

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestJobMemoryBehindRequests: a job run takes memory only when no
// request waits for it, so its wait never holds a request behind it in
// the budget's queue: a request waiting for 50 of 100 bytes gets them
// before a job run that asked for 30 after it, although 40 were free.
func TestJobMemoryBehindRequests(t *testing.T) {
	b := New(100, func(need, total int64) error { return fmt.Errorf("%d of %d", need, total) })
	ctx := context.Background()
	holder := b.NewGrant()
	if err := holder.Grow(ctx, 60, nil); err != nil {
		t.Fatal(err)
	}
	request, job := b.NewGrant(), b.NewGrant()
	requestDone, jobDone := make(chan error, 1), make(chan error, 1)
	go func() { requestDone <- request.Grow(ctx, 50, nil) }()
	for b.sem.TryAcquire(0) { // until the request waits in the queue
		time.Sleep(time.Millisecond)
	}
	go func() { jobDone <- job.GrowBehind(ctx, 30, nil) }()
	select {
	case <-jobDone:
		t.Fatal("the job run took memory ahead of the request waiting for it")
	case <-time.After(100 * time.Millisecond):
	}
	holder.Done()
	if err := <-requestDone; err != nil {
		t.Fatal(err)
	}
	if err := <-jobDone; err != nil {
		t.Fatal(err)
	}
	if got := b.InUse(); got != 80 {
		t.Errorf("%d bytes in use, want the request's 50 and the job's 30", got)
	}
}

// TestNeverFits: a grant that could never fit is refused at once with the
// Budget's error, holding nothing; one that fits after others let go
// waits for them.
func TestNeverFits(t *testing.T) {
	tooLarge := fmt.Errorf("too large")
	b := New(100, func(need, total int64) error { return fmt.Errorf("%w: %d of %d", tooLarge, need, total) })
	g := b.NewGrant()
	if err := g.Grow(context.Background(), 60, nil); err != nil {
		t.Fatal(err)
	}
	if err := g.Grow(context.Background(), 41, nil); err == nil || err.Error() != "too large: 101 of 100" {
		t.Errorf("Grow past the total = %v, want the Budget's refusal naming 101 of 100", err)
	}
	if got := b.InUse(); got != 60 {
		t.Errorf("%d bytes in use after the refusal, want 60", got)
	}
	g.ShrinkTo(10)
	g.Share()
	g.Done()
	if got := b.InUse(); got != 10 {
		t.Errorf("%d bytes in use with a reference left, want 10", got)
	}
	g.Done()
	if got := b.InUse(); got != 0 {
		t.Errorf("%d bytes in use after the last reference, want none", got)
	}
}
