package upscale_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
)

// TestKeyRateLimit: with a limit of 2 at once and 1 a second, a key's
// third request in the same instant is refused with 429 rate_limited, a
// Retry-After of a second and the "burst" item at 0, and not charged;
// another key is not affected; a second later the key may call again.
func TestKeyRateLimit(t *testing.T) {
	e := newEnv(t, func(c *upscale.Config) {
		c.RateLimiter = upscale.NewMemoryRateLimiter(upscale.MemoryRateLimiterOptions{PerSecond: 1, Burst: 2, Now: c.Now})
	})
	for n := 1; n <= 2; n++ {
		w := e.post(keyFree, body(e.url("/small.png")))
		checkOK(t, w, upscale.PoolFree)
		policy, limit := quota(t, w)
		if p, l := policy["burst"], limit["burst"]; p["q"] != 2 || p["w"] != 2 || l["r"] != int64(2-n) {
			t.Errorf("request %d: burst policy %v, limit %v; want q=2, w=2, r=%d", n, p, l, 2-n)
		}
	}
	w := e.post(keyFree, body(e.url("/small.png")))
	checkProblem(t, w, http.StatusTooManyRequests, "rate_limited")
	if got := w.Header().Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After %q, want 1", got)
	}
	if _, limit := quota(t, w); limit["burst"]["r"] != 0 || limit["free_pool"]["r"] != 1 {
		t.Errorf("RateLimit %v, want burst r=0 and the free pool untouched at 1", limit)
	}
	checkOK(t, e.post(keyPro, body(e.url("/small.png"))), upscale.PoolFree)
	e.clock.Advance(time.Second)
	checkOK(t, e.post(keyFree, body(e.url("/small.png"))), upscale.PoolFree)
}

// TestRateLimiterWithZeroBurst: a host's RateLimiter that refuses with
// Burst 0 gets 429 rate_limited, not a division by zero (500).
func TestRateLimiterWithZeroBurst(t *testing.T) {
	e := newEnv(t, func(c *upscale.Config) { c.RateLimiter = zeroBurstLimiter{} })
	checkProblem(t, e.post(keyFree, body(e.url("/small.png"))), http.StatusTooManyRequests, "rate_limited")
}
