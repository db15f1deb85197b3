package s3store

import (
	"sync"
	"testing"
	"time"

	"github.com/upscalekit/upscale/internal/periodic"
)

// TestCloseWhileCleaningUp: clean-ups of failed Puts that start while
// Close waits for them are either waited for or not started, never added
// to a WaitGroup being waited for (run with -race, which caught it).
func TestCloseWhileCleaningUp(t *testing.T) {
	for range 50 {
		s := &Store{closed: make(chan struct{}), now: time.Now, sweeper: periodic.Start(time.Hour, func() {})}
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() { s.cleanUp("k", time.Now().Add(time.Hour)) })
		}
		wg.Go(func() { s.Close() })
		wg.Wait()
		s.cleanUp("k", time.Now().Add(time.Hour)) // after Close: nothing starts
		done := make(chan struct{})
		go func() { s.cleaning.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("a clean-up outlived Close")
		}
	}
}
