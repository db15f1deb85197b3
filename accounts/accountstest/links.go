package accountstest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/upscalekit/upscale/accounts"
	"github.com/upscalekit/upscale/upscaletest"
)

// TestLinkStore checks that an accounts.LinkStore reports exactly one
// first use of each link, also when uses race, as replicas' would.
// newStore must return an empty store on clock.
func TestLinkStore(t *testing.T, newStore func(t *testing.T, clock *upscaletest.Clock) accounts.LinkStore) {
	ctx := context.Background()
	start := time.Date(2026, time.November, 20, 12, 0, 0, 0, time.UTC)
	use := func(t *testing.T, s accounts.LinkStore, id string, expires time.Time, want bool) {
		t.Helper()
		first, err := s.UseLink(ctx, id, expires)
		if err != nil || first != want {
			t.Errorf("UseLink(%s) = %v, %v; want %v", id, first, err, want)
		}
	}
	t.Run("Once", func(t *testing.T) {
		clock := upscaletest.NewClock(start)
		s := newStore(t, clock)
		expires := start.Add(15 * time.Minute)
		use(t, s, "link-1", expires, true)
		use(t, s, "link-1", expires, false)
		use(t, s, "link-2", expires, true)
		clock.Advance(14 * time.Minute)
		use(t, s, "link-1", expires, false)
	})
	t.Run("Race", func(t *testing.T) {
		s := newStore(t, upscaletest.NewClock(start))
		var firsts atomic.Int32
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				first, err := s.UseLink(ctx, "raced", start.Add(time.Hour))
				if err != nil {
					t.Error(err)
				}
				if first {
					firsts.Add(1)
				}
			})
		}
		wg.Wait()
		if n := firsts.Load(); n != 1 {
			t.Errorf("20 racing uses of one link: %d first uses, want 1", n)
		}
	})
}
