package upscale

import (
	"context"
	"time"
)

// RateLimiter limits how often each API key may call, on top of its
// account's quota (Config.RateLimiter). MemoryRateLimiter is the
// in-process one. Replicas that must share one limit implement it on their
// shared store, for instance as a token bucket or GCRA in Redis keyed by
// the key's digest; with MemoryRateLimiter, each replica allows the rate
// on its own, so N replicas behind a balancer allow up to N times it.
type RateLimiter interface {
	// Allow takes one request from key's allowance, if there is one now,
	// and says where the key stands. Its error (an outage of a shared
	// store, wrapping ErrUnavailable) refuses the request with 503.
	Allow(ctx context.Context, key KeyDigest) (RateDecision, error)
}

// RateDecision is a RateLimiter's answer, and the "burst" policy the
// RateLimit headers describe.
type RateDecision struct {
	Allowed bool
	// Burst is how many requests may come at once (RateLimit-Policy q),
	// and Window how long an empty allowance takes to fill (w).
	Burst  int64
	Window time.Duration
	// Remaining is what is left after this request (r), and Reset how
	// long until the allowance is full again (t).
	Remaining int64
	Reset     time.Duration
	// RetryAfter is, when refused, how long until one request is allowed.
	RetryAfter time.Duration
}
