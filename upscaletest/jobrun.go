package upscaletest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
)

// testJobQueueRuns checks TestJobQueue's runs: each job once within the
// workers' concurrency, runs given back or prepared, tried again, and
// expired jobs forgotten.
func testJobQueueRuns(t *testing.T, s jobQueueSuite) {
	ctx, start, newQueue, job, submit, result := context.Background(), s.start, s.newQueue, s.job, s.submit, jobResult
	t.Run("RunsEachOnceWithinConcurrency", func(t *testing.T) {
		q := newQueue(t, NewClock(start))
		var jobs []upscale.Job
		for i := range 6 {
			jobs = append(jobs, job(fmt.Sprintf("job-%d", i), "a"))
		}
		ids := submit(t, q, jobs...)
		var mu sync.Mutex
		runs := map[string]int{}
		var running, most atomic.Int32
		work(t, q, 2, func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
			n := running.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			mu.Lock()
			runs[j.Source]++
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			running.Add(-1)
			if j.Source == "job-3" {
				p := upscale.Problem{Status: 504, Code: "upstream_timeout"}
				return upscale.JobOutcome{Problem: &p}
			}
			return upscale.JobOutcome{Result: result(j.Source), Engine: "engine-of-" + j.Source}
		})
		for name, id := range ids {
			got := waitDone(t, q, "a", id)
			switch {
			case name == "job-3" && (got.Status != upscale.JobFailed || got.Problem == nil || got.Problem.Code != "upstream_timeout" || got.Result != nil):
				t.Errorf("%s: %+v, want failed with its problem", name, got)
			case name != "job-3" && (got.Status != upscale.JobSucceeded || got.Result == nil || got.Result.URL != result(name).URL || got.Result.Via != upscale.PoolCredit ||
				got.Engine != "engine-of-"+name || got.Problem != nil):
				t.Errorf("%s: %+v, want succeeded with its result and engine", name, got)
			}
			if got.Started.IsZero() || got.Finished.IsZero() {
				t.Errorf("%s: started %v, finished %v; want both set", name, got.Started, got.Finished)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for name, n := range runs {
			if n != 1 {
				t.Errorf("%s ran %d times, want once", name, n)
			}
		}
		if len(runs) != len(jobs) {
			t.Errorf("%d jobs ran, want %d", len(runs), len(jobs))
		}
		if m := most.Load(); m > 2 {
			t.Errorf("%d runs at once with a concurrency of 2", m)
		}
	})

	t.Run("StopGivesBack", func(t *testing.T) {
		q := newQueue(t, NewClock(start))
		id := submit(t, q, job("stopped", "a"))["stopped"]
		cause := make(chan error, 1)
		var runs atomic.Int32
		cutShort(t, q, func(context.Context) { runs.Add(1) }, func(ctx context.Context) { cause <- context.Cause(ctx) })
		if got, _ := q.Get(ctx, "a", id); got.Status == upscale.JobCanceled || got.Status == upscale.JobFailed {
			t.Fatalf("a run stop cut short ended the job: %+v", got)
		}
		if c := <-cause; errors.Is(c, upscale.ErrJobCanceled) {
			t.Errorf("a run stop cut short had the cause ErrJobCanceled: it would give its unit back")
		}
		work(t, q, 1, func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
			runs.Add(1)
			return upscale.JobOutcome{Result: result(j.Source)}
		})
		if got := waitDone(t, q, "a", id); got.Status != upscale.JobSucceeded {
			t.Errorf("the job given back: %+v, want it run again to success", got)
		}
		if n := runs.Load(); n != 2 {
			t.Errorf("%d runs, want 2 (one stopped, one finished)", n)
		}
	})

	t.Run("PreparedOutlivesItsRun", func(t *testing.T) {
		q := newQueue(t, NewClock(start))
		id := submit(t, q, job("prepared", "a"))["prepared"]
		prepared := upscale.PreparedResult{Key: "result-key.png", Result: result("prepared"), Engine: "learned", LinkExpires: start.Add(time.Hour)}
		cutShort(t, q, func(ctx context.Context) {
			keyOnly := prepared
			keyOnly.Result, keyOnly.Engine = nil, ""
			for _, p := range []upscale.PreparedResult{keyOnly, prepared} {
				if err := q.Prepare(ctx, "a", id, p); err != nil {
					t.Errorf("Prepare: %v", err)
				}
			}
		}, func(context.Context) {})
		// Waiting to run again with its result prepared, the job is past
		// canceling: its next run delivers the result.
		if got, err := q.Cancel(ctx, "a", id); err != nil || got.Status.Done() {
			t.Errorf("Cancel with a prepared result = %+v, %v; want it left to run", got, err)
		}
		seen := make(chan upscale.Job, 1)
		work(t, q, 1, func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
			seen <- j
			return upscale.JobOutcome{Result: j.Prepared.Result, Engine: j.Prepared.Engine}
		})
		j := <-seen
		if p := j.Prepared; p == nil || p.Key != prepared.Key || p.Result == nil || p.Result.URL != prepared.Result.URL || p.Result.Via != prepared.Result.Via ||
			p.Engine != prepared.Engine || !p.LinkExpires.Equal(prepared.LinkExpires) {
			t.Errorf("the next run got Prepared %+v, want %+v", j.Prepared, prepared)
		}
		if got := waitDone(t, q, "a", id); got.Status != upscale.JobSucceeded || got.Result == nil || got.Result.URL != prepared.Result.URL || got.Engine != "learned" || got.Prepared != nil {
			t.Errorf("job %+v, want succeeded with the prepared result, no longer prepared", got)
		}
		if err := q.Prepare(ctx, "b", id, prepared); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("Prepare of another account's job: %v, want ErrNotFound", err)
		}
	})

	t.Run("Retry", func(t *testing.T) {
		q := newQueue(t, NewClock(start))
		id := submit(t, q, job("again", "a"))["again"]
		var mu sync.Mutex
		var runs []time.Time
		work(t, q, 1, func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
			mu.Lock()
			defer mu.Unlock()
			if runs = append(runs, time.Now()); len(runs) == 1 {
				return upscale.JobOutcome{Retry: true}
			}
			return upscale.JobOutcome{Result: result(j.Source)}
		})
		got := waitDone(t, q, "a", id)
		mu.Lock()
		defer mu.Unlock()
		if got.Status != upscale.JobSucceeded || len(runs) != 2 {
			t.Fatalf("after a Retry: %+v in %d runs, want succeeded in 2", got, len(runs))
		}
		if waited := runs[1].Sub(runs[0]); waited < time.Second {
			t.Errorf("run again %v after asking to Retry, want a second or more", waited)
		}
	})

	t.Run("Expires", func(t *testing.T) {
		clock := NewClock(start)
		q := newQueue(t, clock)
		old := job("old", "a")
		old.Expires = start.Add(time.Minute)
		oldID := submit(t, q, old)["old"]
		clock.Advance(2 * time.Minute)
		ran := make(chan string, 2)
		work(t, q, 1, func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
			ran <- j.Source
			return upscale.JobOutcome{Result: result(j.Source)}
		})
		fresh := job("fresh", "a")
		fresh.Expires = start.Add(time.Hour)
		waitDone(t, q, "a", submit(t, q, fresh)["fresh"])
		if name := <-ran; name != "fresh" {
			t.Errorf("the expired job ran")
		}
		if _, err := q.Get(ctx, "a", oldID); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("Get of an expired job: %v, want ErrNotFound", err)
		}
	})
}
