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

// TestJobQueue checks that a JobQueue keeps jobs per account, runs each
// queued job once on at most the workers it was given, records how each
// run ended, cancels queued and running jobs, gives the runs back that
// stop cut short, and forgets expired jobs. newQueue must return an empty
// queue that reads time from clock; a queue whose workers live in other
// processes still runs what Work starts here.
func TestJobQueue(t *testing.T, newQueue func(t *testing.T, clock *Clock) upscale.JobQueue) {
	ctx := context.Background()
	start := time.Now().UTC().Truncate(time.Second)
	job := func(id, account string) upscale.Job {
		return upscale.Job{
			ID: id, AccountID: account, Params: upscale.Params{Scale: 4, ImageType: upscale.Anime, Denoise: upscale.DenoiseLow},
			Source: "source-" + id, Reservation: "reservation-" + id, Created: start, Expires: start.Add(time.Hour),
		}
	}
	submit := func(t *testing.T, q upscale.JobQueue, jobs ...upscale.Job) {
		t.Helper()
		for _, j := range jobs {
			if err := q.Submit(ctx, j); err != nil {
				t.Fatalf("Submit(%s): %v", j.ID, err)
			}
		}
	}
	work := func(t *testing.T, q upscale.JobQueue, concurrency int, run upscale.JobRunner) func() {
		t.Helper()
		stop, err := q.Work(ctx, concurrency, run)
		if err != nil {
			t.Fatalf("Work: %v", err)
		}
		stopped := false
		halt := func() {
			if !stopped {
				stopped = true
				drain, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				if err := stop(drain); err != nil {
					t.Errorf("stop: %v", err)
				}
			}
		}
		t.Cleanup(halt)
		return halt
	}
	result := func(id string) *upscale.Response {
		return &upscale.Response{URL: "https://results.example/" + id, Via: upscale.PoolCredit}
	}

	t.Run("SubmitAndGet", func(t *testing.T) {
		q := newQueue(t, NewClock(start))
		want := job("job-1", "a")
		submit(t, q, want)
		got, err := q.Get(ctx, "a", "job-1")
		if err != nil {
			t.Fatal(err)
		}
		want.Status = upscale.JobQueued
		if !got.Created.Equal(want.Created) || !got.Expires.Equal(want.Expires) || got.ID != want.ID || got.AccountID != want.AccountID ||
			got.Params != want.Params || got.Source != want.Source || got.Reservation != want.Reservation || got.Status != want.Status {
			t.Errorf("Get = %+v, want %+v", got, want)
		}
		for _, tc := range []struct{ account, id string }{{"b", "job-1"}, {"a", "no-such-job"}} {
			if _, err := q.Get(ctx, tc.account, tc.id); !errors.Is(err, upscale.ErrNotFound) {
				t.Errorf("Get(%q, %q): %v, want ErrNotFound", tc.account, tc.id, err)
			}
			if _, err := q.Cancel(ctx, tc.account, tc.id); !errors.Is(err, upscale.ErrNotFound) {
				t.Errorf("Cancel(%q, %q): %v, want ErrNotFound", tc.account, tc.id, err)
			}
		}
		if got, _ := q.Get(ctx, "a", "job-1"); got.Status != upscale.JobQueued {
			t.Errorf("after another account's Cancel: %s, want queued", got.Status)
		}
	})

	t.Run("RunsEachOnceWithinConcurrency", func(t *testing.T) {
		q := newQueue(t, NewClock(start))
		const jobs = 6
		for i := range jobs {
			submit(t, q, job(fmt.Sprintf("job-%d", i), "a"))
		}
		var mu sync.Mutex
		runs := map[string]int{}
		var running, most atomic.Int32
		work(t, q, 2, func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
			n := running.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			mu.Lock()
			runs[j.ID]++
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			running.Add(-1)
			if j.ID == "job-3" {
				p := upscale.Problem{Status: 504, Code: "upstream_timeout"}
				return upscale.JobOutcome{Problem: &p}
			}
			return upscale.JobOutcome{Result: result(j.ID)}
		})
		for i := range jobs {
			id := fmt.Sprintf("job-%d", i)
			got := waitDone(t, q, "a", id)
			switch {
			case id == "job-3" && (got.Status != upscale.JobFailed || got.Problem == nil || got.Problem.Code != "upstream_timeout" || got.Result != nil):
				t.Errorf("%s: %+v, want failed with its problem", id, got)
			case id != "job-3" && (got.Status != upscale.JobSucceeded || got.Result == nil || got.Result.URL != result(id).URL || got.Result.Via != upscale.PoolCredit || got.Problem != nil):
				t.Errorf("%s: %+v, want succeeded with its result", id, got)
			}
			if got.Started.IsZero() || got.Finished.IsZero() {
				t.Errorf("%s: started %v, finished %v; want both set", id, got.Started, got.Finished)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for id, n := range runs {
			if n != 1 {
				t.Errorf("%s ran %d times, want once", id, n)
			}
		}
		if len(runs) != jobs {
			t.Errorf("%d jobs ran, want %d", len(runs), jobs)
		}
		if m := most.Load(); m > 2 {
			t.Errorf("%d runs at once with a concurrency of 2", m)
		}
	})

	t.Run("CancelQueued", func(t *testing.T) {
		q := newQueue(t, NewClock(start))
		submit(t, q, job("job-q", "a"))
		got, err := q.Cancel(ctx, "a", "job-q")
		if err != nil || got.Status != upscale.JobCanceled || !got.Started.IsZero() {
			t.Fatalf("Cancel = %+v, %v; want canceled, never started", got, err)
		}
		ran := make(chan string, 2)
		work(t, q, 1, func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
			ran <- j.ID
			return upscale.JobOutcome{Result: result(j.ID)}
		})
		submit(t, q, job("job-after", "a"))
		waitDone(t, q, "a", "job-after")
		if id := <-ran; id != "job-after" {
			t.Errorf("the canceled job ran")
		}
		if got, _ := q.Get(ctx, "a", "job-q"); got.Status != upscale.JobCanceled || got.Finished.IsZero() {
			t.Errorf("canceled job now %+v, want canceled with its end time", got)
		}
	})

	t.Run("CancelRunning", func(t *testing.T) {
		q := newQueue(t, NewClock(start))
		submit(t, q, job("job-r", "a"))
		started, sawDone := make(chan struct{}), make(chan error, 1)
		work(t, q, 1, func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
			close(started)
			<-ctx.Done()
			sawDone <- context.Cause(ctx)
			p := upscale.Problem{Status: 504, Code: "timeout"} // what a run cut short reports
			return upscale.JobOutcome{Problem: &p}
		})
		<-started
		if _, err := q.Cancel(ctx, "a", "job-r"); err != nil {
			t.Fatal(err)
		}
		select {
		case cause := <-sawDone:
			if !errors.Is(cause, upscale.ErrJobCanceled) {
				t.Errorf("the run's context ended with cause %v, want ErrJobCanceled", cause)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the run's context was not done after Cancel")
		}
		if got := waitDone(t, q, "a", "job-r"); got.Status != upscale.JobCanceled || got.Problem != nil || got.Started.IsZero() {
			t.Errorf("after Cancel: %+v, want canceled, started, no problem", got)
		}
	})

	t.Run("ResultOutlivesCancel", func(t *testing.T) {
		q := newQueue(t, NewClock(start))
		submit(t, q, job("job-paid", "a"))
		started, release := make(chan struct{}), make(chan struct{})
		work(t, q, 1, func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
			close(started)
			<-release // charged already when Cancel comes
			return upscale.JobOutcome{Result: result(j.ID)}
		})
		<-started
		if _, err := q.Cancel(ctx, "a", "job-paid"); err != nil {
			t.Fatal(err)
		}
		close(release)
		if got := waitDone(t, q, "a", "job-paid"); got.Status != upscale.JobSucceeded || got.Result == nil {
			t.Errorf("a run that returned its result after Cancel: %+v, want succeeded", got)
		}
		if got, err := q.Cancel(ctx, "a", "job-paid"); err != nil || got.Status != upscale.JobSucceeded {
			t.Errorf("Cancel of a finished job = %+v, %v; want it as it ended", got, err)
		}
	})

	t.Run("StopGivesBack", func(t *testing.T) {
		q := newQueue(t, NewClock(start))
		submit(t, q, job("job-s", "a"))
		started, cause := make(chan struct{}), make(chan error, 1)
		var runs atomic.Int32
		stop, err := q.Work(ctx, 1, func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
			runs.Add(1)
			close(started)
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return upscale.JobOutcome{}
		})
		if err != nil {
			t.Fatal(err)
		}
		<-started
		drain, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if err := stop(drain); err != nil {
			t.Fatal(err)
		}
		if got, _ := q.Get(ctx, "a", "job-s"); got.Status == upscale.JobCanceled || got.Status == upscale.JobFailed {
			t.Fatalf("a run stop cut short ended the job: %+v", got)
		}
		if c := <-cause; errors.Is(c, upscale.ErrJobCanceled) {
			t.Errorf("a run stop cut short had the cause ErrJobCanceled: it would give its unit back")
		}
		work(t, q, 1, func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
			runs.Add(1)
			return upscale.JobOutcome{Result: result(j.ID)}
		})
		if got := waitDone(t, q, "a", "job-s"); got.Status != upscale.JobSucceeded {
			t.Errorf("the job given back: %+v, want it run again to success", got)
		}
		if n := runs.Load(); n != 2 {
			t.Errorf("%d runs, want 2 (one stopped, one finished)", n)
		}
	})

	t.Run("Retry", func(t *testing.T) {
		q := newQueue(t, NewClock(start))
		submit(t, q, job("job-again", "a"))
		var mu sync.Mutex
		var runs []time.Time
		work(t, q, 1, func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
			mu.Lock()
			defer mu.Unlock()
			if runs = append(runs, time.Now()); len(runs) == 1 {
				return upscale.JobOutcome{Retry: true}
			}
			return upscale.JobOutcome{Result: result(j.ID)}
		})
		got := waitDone(t, q, "a", "job-again")
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
		old := job("job-old", "a")
		old.Expires = start.Add(time.Minute)
		submit(t, q, old)
		clock.Advance(2 * time.Minute)
		ran := make(chan string, 2)
		work(t, q, 1, func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
			ran <- j.ID
			return upscale.JobOutcome{Result: result(j.ID)}
		})
		fresh := job("job-fresh", "a")
		fresh.Expires = start.Add(time.Hour)
		submit(t, q, fresh)
		waitDone(t, q, "a", "job-fresh")
		if id := <-ran; id != "job-fresh" {
			t.Errorf("the expired job ran")
		}
		if _, err := q.Get(ctx, "a", "job-old"); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("Get of an expired job: %v, want ErrNotFound", err)
		}
	})
}

// waitDone polls accountID's job id until it has ended, for at most 30 s.
func waitDone(t *testing.T, q upscale.JobQueue, accountID, id string) upscale.Job {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		j, err := q.Get(context.Background(), accountID, id)
		if err != nil {
			t.Fatalf("Get(%s): %v", id, err)
		}
		if j.Status.Done() {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still %s after 30 s", id, j.Status)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
