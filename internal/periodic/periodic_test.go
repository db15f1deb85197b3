package periodic

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestRunsUntilStopped(t *testing.T) {
	var runs atomic.Int64
	j := Start(time.Millisecond, func() { runs.Add(1) })
	for runs.Load() < 3 {
		time.Sleep(time.Millisecond)
	}
	j.Stop()
	after := runs.Load()
	time.Sleep(10 * time.Millisecond)
	if runs.Load() != after {
		t.Errorf("ran %d more times after Stop", runs.Load()-after)
	}
	j.Stop() // a second Stop returns at once
}

func TestNonpositiveIntervalRunsNothing(t *testing.T) {
	j := Start(0, func() { t.Error("ran with interval 0") })
	time.Sleep(5 * time.Millisecond)
	j.Stop()
}

func TestGateOpensOnceAMinute(t *testing.T) {
	var g Gate
	start := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	for _, step := range []struct {
		at   time.Duration
		want bool
	}{{0, true}, {30 * time.Second, false}, {time.Minute - time.Nanosecond, false}, {time.Minute, true}, {time.Minute + time.Second, false}, {3 * time.Minute, true}} {
		if got := g.Due(start.Add(step.at)); got != step.want {
			t.Errorf("Due at +%v = %v, want %v", step.at, got, step.want)
		}
	}
}
