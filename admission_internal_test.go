package upscale

import (
	"context"
	"testing"
	"time"
)

// timed records one image of the given units that took took, as the
// engine's goroutine does when the Upscaler returns.
func timed(a *admission, units float64, took time.Duration) {
	s, err := a.engineSlot(context.Background(), units, requestLane, time.Time{})
	if err != nil {
		panic(err)
	}
	s.start = time.Now().Add(-took)
	s.done()
}

// TestEstimatorRule holds the admission estimate to the rule
// docs/operating.md's Overload section states: a request with fewer requests
// ahead than the engine has slots is admitted whatever the engine did; the
// expected image time is the time per unit of work times the mean work per
// image; an image counts for at most the deadline; and the estimate halves
// for each idleHalfLife the engine is idle.
func TestEstimatorRule(t *testing.T) {
	a := newAdmission(Capacity{EngineConcurrency: 2, JobSlots: 1, QueueLength: 8, AccountShare: 10}, time.Second)
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

	a = newAdmission(Capacity{EngineConcurrency: 1, JobSlots: 1, QueueLength: 8, AccountShare: 10}, time.Minute)
	timed(a, 100, 100*time.Millisecond) // 1 ms a unit
	for range 20 {
		timed(a, 10, 10*time.Millisecond) // small images, the same rate
	}
	// About 11 ms: the mean work is still coming down from the first
	// image's 100 units. timed reads the clock, so a stalled machine adds
	// to the last images' times: the bound leaves room for that, and
	// still tells 10-unit images from the first one's 100 ms.
	if got := a.imageTime(); got < 9*time.Millisecond || got > 30*time.Millisecond {
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

// TestExpectedStartCountsJobs: a request's expected wait counts the job
// runs in the engine: while the engine is untimed, until the end of their
// runs; once timed, by their work.
func TestExpectedStartCountsJobs(t *testing.T) {
	a := newAdmission(Capacity{EngineConcurrency: 1, JobSlots: 1, QueueLength: 4, AccountShare: 4}, time.Second)
	job, err := a.engineSlot(context.Background(), 1000, jobLane, time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.refusal(0); err == nil {
		t.Error("a request behind a job run of a minute, on an untimed engine: admitted, want refused")
	}
	job.finish(false) // given back untimed, as the tests' images are not real ones
	if err := a.refusal(0); err != nil {
		t.Errorf("a request on an idle engine: %v", err)
	}
	timed(a, 10, 10*time.Millisecond) // 1 ms a unit
	long, err := a.engineSlot(context.Background(), 1e5, jobLane, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.refusal(0); err == nil {
		t.Error("a request behind a job run of 100 s of work: admitted, want refused")
	}
	long.finish(false)
	short, err := a.engineSlot(context.Background(), 10, jobLane, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.refusal(0); err != nil {
		t.Errorf("a request behind a job run of 10 ms of work: %v, want admitted", err)
	}
	short.finish(false)
}

// TestOverdueJobStillHoldsItsSlot: a job run that has taken longer than
// its work should still holds its slot: a request behind it expects to
// wait until the run's end, not to find the slot free.
func TestOverdueJobStillHoldsItsSlot(t *testing.T) {
	a := newAdmission(Capacity{EngineConcurrency: 1, JobSlots: 1, QueueLength: 4, AccountShare: 4}, time.Second)
	timed(a, 500, 500*time.Millisecond) // 1 ms a unit
	job, err := a.engineSlot(context.Background(), 500, jobLane, time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer job.finish(false)
	a.mu.Lock()
	job.start = time.Now().Add(-2 * time.Second) // expected to take 0.5 s, running for 2
	a.mu.Unlock()
	if err := a.refusal(0); err == nil {
		t.Error("a request behind a job run past its expected end, with a minute left: admitted, want refused")
	}
}

// TestSubmissionsAreNotAhead: a job's submission holds a place while it
// fetches its source but wants no engine slot, so a request behind it on
// an idle engine is admitted, however slow the engine's images are.
func TestSubmissionsAreNotAhead(t *testing.T) {
	a := newAdmission(Capacity{EngineConcurrency: 1, JobSlots: 1, QueueLength: 4, AccountShare: 4}, time.Second)
	timed(a, 600, 600*time.Millisecond)
	leave, err := a.admit(jobLane)
	if err != nil {
		t.Fatal(err)
	}
	defer leave()
	if err := a.refusing(requestLane); err != nil {
		t.Errorf("a request behind a submission on an idle engine: %v, want admitted", err)
	}
}
