package upscale

import (
	"testing"
	"time"
)

// timed records one image of the given units that took took, as the
// engine's goroutine does when the Upscaler returns.
func timed(a *admission, units float64, took time.Duration) {
	a.engine <- struct{}{}
	s := &slot{a: a, start: time.Now().Add(-took), units: units}
	s.done()
}

// TestEstimatorRule holds the admission estimate to the rule
// docs/operating.md's Overload section states: a request with fewer requests
// ahead than the engine has slots is admitted whatever the engine did; the
// expected image time is the time per unit of work times the mean work per
// image; an image counts for at most the deadline; and the estimate halves
// for each idleHalfLife the engine is idle.
func TestEstimatorRule(t *testing.T) {
	a := newAdmission(Capacity{EngineConcurrency: 2, QueueLength: 8, AccountShare: 10}, time.Second)
	timed(a, 1e6, time.Hour) // far past the deadline
	if got := a.imageTime(); got > time.Second+10*time.Millisecond {
		t.Errorf("one image took an hour: expected image time %v, want at most the 1 s deadline", got)
	}
	if err := a.refusal(1); err != nil {
		t.Errorf("one request ahead of two slots: %v, want admitted whatever the engine did", err)
	}
	if err := a.refusal(2); err == nil {
		t.Error("two requests ahead of two slots, at a second an image: admitted, want refused")
	}

	a = newAdmission(Capacity{EngineConcurrency: 1, QueueLength: 8, AccountShare: 10}, time.Minute)
	timed(a, 100, 100*time.Millisecond) // 1 ms a unit
	for range 20 {
		timed(a, 10, 10*time.Millisecond) // small images, the same rate
	}
	if got := a.imageTime(); got < 9*time.Millisecond || got > 15*time.Millisecond {
		t.Errorf("after many 10-unit images at 1 ms a unit: expected %v, want about 10 ms", got)
	}

	a.mu.Lock()
	before := a.perUnit
	a.idleSince = time.Now().Add(-2 * idleHalfLife)
	a.mu.Unlock()
	a.mu.Lock()
	after := a.perUnitLocked(time.Now())
	a.mu.Unlock()
	if after > before/4*1.01 || after < before/4*0.99 {
		t.Errorf("after two half-lives idle: time per unit %g, want a quarter of %g", after, before)
	}
}
