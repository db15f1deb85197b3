// Package upscaletest holds the conformance suites that every implementation
// of the upscale interfaces runs, ours and a host's alike, so that all of them
// keep one contract. Each suite is one function taking a maker of fresh
// instances; a backend's test calls it in a few lines:
//
//	func TestLedger(t *testing.T) {
//		upscaletest.TestQuotaLedger(t, func(t *testing.T, opts upscale.LedgerOptions) upscaletest.LedgerHarness {
//			return upscale.NewMemoryLedger(opts)
//		})
//	}
//
// # Time
//
// Suites that depend on time pass the implementation a Clock they advance
// themselves, so no suite sleeps to see a reservation or a link expire.
package upscaletest

import (
	"image"
	"image/png"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"
)

// Clock is a manual clock for tests: it stands still until Advance moves it.
// It is safe for concurrent use.
type Clock struct {
	mu    sync.Mutex
	now   time.Time
	sleep bool
}

// NewClock returns a Clock reading t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d, after sleeping for d if
// SleepOnAdvance was called.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sleep {
		time.Sleep(d)
	}
	c.now = c.now.Add(d)
}

// SleepOnAdvance makes Advance also wait for the time it adds, for an
// implementation whose expiry is enforced by a server on its own clock
// (an S3 presigned link, say). Suites that allow this advance such a clock
// by seconds, not hours.
func (c *Clock) SleepOnAdvance() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleep = true
}

// ResultPNG downloads a result from its link and decodes it, failing t
// unless the link answers 200 with a PNG: what a test of a handler checks
// of a success's url.
func ResultPNG(t testing.TB, link string) image.Image {
	t.Helper()
	resp, err := http.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, want 200", link, resp.Status)
	}
	img, err := png.Decode(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: not a PNG: %v", link, err)
	}
	return img
}

// Opened fails t at once when opening c failed (err is not nil), and
// otherwise closes c when t ends, failing t if Close does: the step each
// backend's test takes after its constructor, so that no test leaks a store
// or hides a Close that fails.
//
//	store, err := s3store.New(ctx, opts)
//	upscaletest.Opened(t, store, err)
func Opened(t testing.TB, c io.Closer, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
}
