package stripebilling_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/upscalekit/upscale/billing/stripebilling"
	"github.com/upscalekit/upscale/upscaletest"
)

// TestRefusedEventsCounted: events whose signature does not verify, sent
// by anyone at any rate, are counted, and logged in one line a minute
// that says how many were refused since the line before.
func TestRefusedEventsCounted(t *testing.T) {
	var log bytes.Buffer // slog's handler writes one line at a time
	clock := upscaletest.NewClock(time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC))
	s := newSeller(t, nil, func(o *stripebilling.Options) {
		o.Logger, o.Now = slog.New(slog.NewTextHandler(&log, nil)), clock.Now
	})
	b, fake := s.Billing, s.fake
	forged := fake.Event("checkout.session.completed", map[string]any{"id": "cs_forged", "object": "checkout.session", "payment_status": "paid"})
	refuse := func(n int) {
		t.Helper()
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				if got := fake.DeliverSigned(b.Webhook(), forged, "whsec_someone_else", time.Now()); got != http.StatusBadRequest {
					t.Errorf("a forged event: %d, want 400", got)
				}
			})
		}
		wg.Wait()
	}
	refuse(1000)
	if got, want := b.Stats().RefusedEvents, uint64(1000); got != want {
		t.Errorf("RefusedEvents %d, want %d", got, want)
	}
	if lines := refusedLines(log.String()); len(lines) != 1 {
		t.Errorf("1000 forged events in a minute logged %d lines, want 1:\n%s", len(lines), log.String())
	}
	clock.Advance(time.Minute)
	refuse(1)
	if got, want := b.Stats().RefusedEvents, uint64(1001); got != want {
		t.Errorf("RefusedEvents %d, want %d", got, want)
	}
	lines := refusedLines(log.String())
	if len(lines) != 2 || lines[0]+lines[1] != 1001 {
		t.Errorf("a minute later, one more: lines counting %v, want 2 lines counting 1001 in all:\n%s", lines, log.String())
	}
}

// refusedLines returns the count of refused events each line of log
// gives, -1 for a line that gives none.
func refusedLines(log string) []int {
	var counts []int
	for line := range strings.Lines(log) {
		n := -1
		if m := regexp.MustCompile(`level=WARN .* refused=(\d+) `).FindStringSubmatch(line); m != nil {
			n, _ = strconv.Atoi(m[1])
		}
		counts = append(counts, n)
	}
	return counts
}
