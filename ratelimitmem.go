package upscale

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/upscalekit/upscale/internal/periodic"
	"golang.org/x/time/rate"
)

// MemoryRateLimiter gives each key a token bucket (golang.org/x/time/rate)
// in process memory. Buckets of keys idle long enough to be full again are
// dropped as others are used, at most once a minute, so it needs no
// goroutine. It is safe for concurrent use.
type MemoryRateLimiter struct {
	perSecond rate.Limit
	burst     int
	now       func() time.Time

	mu      sync.Mutex
	buckets map[KeyDigest]*rate.Limiter
	swept   periodic.Gate
}

var _ RateLimiter = (*MemoryRateLimiter)(nil)

// MemoryRateLimiterOptions configures a MemoryRateLimiter.
type MemoryRateLimiterOptions struct {
	// PerSecond is how many requests a second each key may send on
	// average.
	PerSecond float64
	// Burst is how many requests each key may send at once. Zero (or less)
	// means 1.
	Burst int
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
}

// NewMemoryRateLimiter returns a MemoryRateLimiter allowing each key what
// opts says.
func NewMemoryRateLimiter(opts MemoryRateLimiterOptions) *MemoryRateLimiter {
	return &MemoryRateLimiter{perSecond: rate.Limit(opts.PerSecond), burst: max(opts.Burst, 1), now: clock(opts.Now), buckets: make(map[KeyDigest]*rate.Limiter)}
}

// Allow implements RateLimiter.
func (l *MemoryRateLimiter) Allow(_ context.Context, key KeyDigest) (RateDecision, error) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	bucket, ok := l.buckets[key]
	if !ok {
		bucket = rate.NewLimiter(l.perSecond, l.burst)
		l.buckets[key] = bucket
	}
	d := RateDecision{Burst: int64(l.burst), Window: l.fillTime(float64(l.burst)), Allowed: bucket.AllowN(now, 1)}
	tokens := bucket.TokensAt(now)
	d.Remaining = int64(math.Max(math.Floor(tokens), 0))
	d.Reset = l.fillTime(float64(l.burst) - tokens)
	if !d.Allowed {
		d.RetryAfter = l.fillTime(1 - tokens)
	}
	return d, nil
}

// fillTime is how long the bucket takes to gain tokens.
func (l *MemoryRateLimiter) fillTime(tokens float64) time.Duration {
	if tokens <= 0 {
		return 0
	}
	return time.Duration(tokens / float64(l.perSecond) * float64(time.Second))
}

// sweep drops the buckets that are full again, at most once a minute.
func (l *MemoryRateLimiter) sweep(now time.Time) {
	if !l.swept.Due(now) {
		return
	}
	for key, bucket := range l.buckets {
		if bucket.TokensAt(now) >= float64(l.burst) {
			delete(l.buckets, key)
		}
	}
}
