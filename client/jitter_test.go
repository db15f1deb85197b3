package client

import "testing"

// TestJitterBounded: every attempt's wait is positive and within the
// largest backoff, however many attempts a client is allowed: the
// doubling must not overflow into a negative bound (rand.N panics on one).
func TestJitterBounded(t *testing.T) {
	for attempt := 1; attempt <= 100; attempt++ {
		for range 20 {
			if wait := jitter(attempt); wait <= 0 || wait > maxBackoff+1e6 {
				t.Fatalf("attempt %d: wait %v, want within (0, %v]", attempt, wait, maxBackoff)
			}
		}
	}
}
