package upscaletest

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	// job is a job to submit; name goes in its Source, by which the
	// suite knows it, since the queue gives it its ID.
	job := func(name, account string) upscale.Job {
		return upscale.Job{
			AccountID: account, Params: upscale.Params{Scale: 4, ImageType: upscale.Anime, Denoise: upscale.DenoiseLow},
			Source: name, Reservation: "reservation-" + name, Pool: upscale.PoolCredit, Webhook: "https://hooks.example/" + name,
			Created: start, Expires: start.Add(time.Hour),
		}
	}
	// submit submits jobs and returns their IDs by name.
	submit := func(t *testing.T, q upscale.JobQueue, jobs ...upscale.Job) map[string]string {
		t.Helper()
		ids := map[string]string{}
		for _, j := range jobs {
			kept, err := q.Submit(ctx, j)
			if err != nil {
				t.Fatalf("Submit(%s): %v", j.Source, err)
			}
			if kept.ID == "" || kept.Status != upscale.JobQueued {
				t.Fatalf("Submit(%s) = %+v: want an ID, queued", j.Source, kept)
			}
			ids[j.Source] = kept.ID
		}
		return ids
	}
	// workWith has worker work q's jobs until the test ends, or until the
	// function it returns is called.
	workWith := func(t *testing.T, q upscale.JobQueue, concurrency int, worker upscale.JobWorker) func() {
		t.Helper()
		stop, err := q.Work(ctx, concurrency, worker)
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
	// work is workWith with run, and settlements that have nothing to do.
	work := func(t *testing.T, q upscale.JobQueue, concurrency int, run func(context.Context, upscale.Job) upscale.JobOutcome) func() {
		t.Helper()
		return workWith(t, q, concurrency, Runner(run))
	}
	result := func(id string) *upscale.Response {
		return &upscale.Response{URL: "https://results.example/" + id, Via: upscale.PoolCredit}
	}

	t.Run("SubmitAndGet", func(t *testing.T) {
		q := newQueue(t, NewClock(start))
		want := job("one", "a")
		id := submit(t, q, want)["one"]
		got, err := q.Get(ctx, "a", id)
		if err != nil {
			t.Fatal(err)
		}
		if got.ID != id || got.AccountID != want.AccountID || got.Params != want.Params || got.Source != want.Source ||
			got.Reservation != want.Reservation || got.Pool != want.Pool || got.Webhook != want.Webhook || !got.Created.Equal(want.Created) ||
			!got.Expires.Equal(want.Expires) || got.Status != upscale.JobQueued || !got.Started.IsZero() {
			t.Errorf("Get = %+v, want %+v, queued", got, want)
		}
		if !strings.HasPrefix(id, "job_") || strings.Contains(id, "/") {
			t.Errorf("ID %q: want one that begins with job_ and holds no /", id)
		}
		other := submit(t, q, job("two", "a"))["two"]
		if other == id {
			t.Errorf("two jobs with the ID %q", id)
		}
		for _, tc := range []struct{ account, id string }{{"b", id}, {"a", "no-such-job"}, {"a", id + "x"}} {
			if _, err := q.Get(ctx, tc.account, tc.id); !errors.Is(err, upscale.ErrNotFound) {
				t.Errorf("Get(%q, %q): %v, want ErrNotFound", tc.account, tc.id, err)
			}
			if _, err := q.Cancel(ctx, tc.account, tc.id); !errors.Is(err, upscale.ErrNotFound) {
				t.Errorf("Cancel(%q, %q): %v, want ErrNotFound", tc.account, tc.id, err)
			}
		}
		if got, _ := q.Get(ctx, "a", id); got.Status != upscale.JobQueued {
			t.Errorf("after another account's Cancel: %s, want queued", got.Status)
		}
	})

	t.Run("SubmitOnce", func(t *testing.T) {
		q := newQueue(t, NewClock(start))
		named := func(name, account, submission string) upscale.Job {
			j := job(name, account)
			j.Submission = submission
			return j
		}
		// Concurrent Submits of one Submission keep one job, whoever's.
		kept := make([]upscale.Job, 4)
		var submits sync.WaitGroup
		for i := range kept {
			submits.Go(func() {
				var err error
				if kept[i], err = q.Submit(ctx, named(fmt.Sprintf("try-%d", i), "a", "key-1")); err != nil {
					t.Errorf("Submit: %v", err)
				}
			})
		}
		submits.Wait()
		for _, k := range kept[1:] {
			if k.ID != kept[0].ID || k.Source != kept[0].Source || k.Reservation != kept[0].Reservation {
				t.Fatalf("Submits of one Submission kept %+v and %+v, want one job", kept[0], k)
			}
		}
		got, err := q.Get(ctx, "a", kept[0].ID)
		if err != nil || got.Source != kept[0].Source || got.Reservation != "reservation-"+got.Source {
			t.Fatalf("Get(%s) = %+v, %v, want the kept job", kept[0].ID, got, err)
		}
		// Another Submission, another account, or none: a job each.
		ids := map[string]bool{kept[0].ID: true}
		for _, j := range []upscale.Job{named("other-key", "a", "key-2"), named("other-account", "b", "key-1"), named("none-1", "a", ""), named("none-2", "a", "")} {
			id := submit(t, q, j)[j.Source]
			if ids[id] {
				t.Errorf("Submit(%s) returned the job %s again", j.Source, id)
			}
			ids[id] = true
		}
		// A job that has ended is still the Submission's.
		if _, err := q.Cancel(ctx, "a", kept[0].ID); err != nil {
			t.Fatal(err)
		}
		again, err := q.Submit(ctx, named("after-cancel", "a", "key-1"))
		if err != nil || again.ID != kept[0].ID || again.Status != upscale.JobCanceled {
			t.Errorf("Submit after the job was canceled = %+v, %v, want the canceled job %s", again, err, kept[0].ID)
		}
	})

	t.Run("SubmitOnceExpires", func(t *testing.T) {
		clock := NewClock(start)
		q := newQueue(t, clock)
		old := job("old", "a")
		old.Submission, old.Expires = "key", start.Add(time.Minute)
		oldID := submit(t, q, old)["old"]
		clock.Advance(2 * time.Minute)
		fresh := job("fresh", "a")
		fresh.Submission = "key"
		got, err := q.Submit(ctx, fresh)
		if err != nil || got.ID == oldID || got.Source != "fresh" || got.Status != upscale.JobQueued {
			t.Errorf("Submit after the Submission's job expired = %+v, %v, want a new job", got, err)
		}
	})

	t.Run("Counts", func(t *testing.T) {
		q := newQueue(t, NewClock(start))
		counter, ok := q.(upscale.JobCounter)
		if !ok {
			t.Skip("not a JobCounter")
		}
		first, second, third := job("one", "a"), job("two", "a"), job("three", "b")
		first.SourcePixels, second.SourcePixels, third.SourcePixels = 100, 20, 3
		second.Created, third.Created = start.Add(time.Second), start.Add(2*time.Second)
		submit(t, q, first, second, third)
		if n, err := counter.CountAccountJobs(ctx, "a"); err != nil || n != 2 {
			t.Errorf("CountAccountJobs(a) = %d, %v; want 2 queued", n, err)
		}
		release := make(chan struct{})
		started := make(chan struct{}, 3)
		work(t, q, 1, func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
			started <- struct{}{}
			<-release
			return upscale.JobOutcome{Result: result(j.Source)}
		})
		<-started
		// A count may lag the state by River's own bookkeeping; it
		// settles within moments.
		var counts upscale.JobCounts
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			var err error
			if counts, err = counter.CountJobs(ctx); err != nil {
				t.Fatal(err)
			}
			if counts.Queued == 2 && counts.Running == 1 {
				break
			}
		}
		n, err := counter.CountAccountJobs(ctx, "a")
		close(release)
		if counts.Queued != 2 || counts.Running != 1 || counts.QueuedPixels != 23 || !counts.OldestQueued.Equal(second.Created) {
			t.Errorf("CountJobs = %+v; want 2 queued of 23 pixels, the oldest submitted at %v, and 1 running", counts, second.Created)
		}
		if err != nil || n != 2 {
			t.Errorf("CountAccountJobs(a) with one running = %d, %v; want 2", n, err)
		}
	})

	t.Run("Priority", func(t *testing.T) {
		q := newQueue(t, NewClock(start))
		var jobs []upscale.Job
		for _, spec := range []struct {
			name, account string
			priority      int
		}{{"a-1", "a", 1}, {"a-2", "a", 2}, {"a-3", "a", 3}, {"b-1", "b", 1}, {"a-4", "a", upscale.JobPriorities}, {"c-2", "c", 2}} {
			j := job(spec.name, spec.account)
			j.Priority = spec.priority
			jobs = append(jobs, j)
		}
		ids := submit(t, q, jobs...)
		want := []string{"a-1", "b-1", "a-2", "c-2", "a-3", "a-4"}
		account := func(name string) string { return name[:1] }
		for position, name := range want {
			got, err := q.Get(ctx, account(name), ids[name])
			if err != nil || got.Position == nil || *got.Position != position || got.Priority == 0 {
				t.Errorf("Get(%s) = %+v, %v; want it queued at position %d", name, got, err, position)
			}
		}
		var mu sync.Mutex
		var order []string
		work(t, q, 1, func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
			mu.Lock()
			order = append(order, j.Source)
			mu.Unlock()
			return upscale.JobOutcome{Result: result(j.Source)}
		})
		for _, j := range jobs {
			if got := waitDone(t, q, j.AccountID, ids[j.Source]); got.Position != nil {
				t.Errorf("%s ended with a position, %d", j.Source, *got.Position)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if fmt.Sprint(order) != fmt.Sprint(want) {
			t.Errorf("ran %v, want %v: every job of a lower priority first, oldest first within one", order, want)
		}
	})

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

	// settles is a worker that runs jobs to a Result, sending each job's
	// name on ran, and sends on settled the job and why of each
	// settlement.
	settles := func(ran chan<- string, settled chan<- string) upscale.JobWorker {
		return upscale.JobWorker{
			Run: func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
				ran <- j.Source
				return upscale.JobOutcome{Result: result(j.Source)}
			},
			Settle: func(ctx context.Context, j upscale.Job, why error) upscale.JobOutcome {
				settled <- fmt.Sprintf("%s %v", j.Source, why)
				return upscale.JobOutcome{}
			},
		}
	}
	// awaitSettled waits for the settlement of the job name, why
	// ErrJobCanceled, and checks that the job stays canceled.
	awaitSettled := func(t *testing.T, q upscale.JobQueue, settled <-chan string, name, id string) {
		t.Helper()
		select {
		case got := <-settled:
			if want := fmt.Sprintf("%s %v", name, upscale.ErrJobCanceled); got != want {
				t.Errorf("settled %q, want %q", got, want)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("%s: no run settled it", name)
		}
		if got, _ := q.Get(ctx, "a", id); got.Status != upscale.JobCanceled || got.Finished.IsZero() || got.Result != nil {
			t.Errorf("%s now %+v, want canceled with its end time", name, got)
		}
	}

	t.Run("CancelQueued", func(t *testing.T) {
		q := newQueue(t, NewClock(start))
		id := submit(t, q, job("canceled", "a"))["canceled"]
		got, err := q.Cancel(ctx, "a", id)
		if err != nil || got.Status != upscale.JobCanceled || !got.Started.IsZero() {
			t.Fatalf("Cancel = %+v, %v; want canceled, never started", got, err)
		}
		ran, settled := make(chan string, 2), make(chan string, 2)
		workWith(t, q, 1, settles(ran, settled))
		waitDone(t, q, "a", submit(t, q, job("after", "a"))["after"])
		if name := <-ran; name != "after" {
			t.Errorf("the canceled job ran")
		}
		awaitSettled(t, q, settled, "canceled", id)
	})

	t.Run("CanceledRunRetriesItsSettlement", func(t *testing.T) {
		q := newQueue(t, NewClock(start))
		id := submit(t, q, job("unsettled", "a"))["unsettled"]
		started, settled := make(chan struct{}), make(chan string, 2)
		workWith(t, q, 1, upscale.JobWorker{
			Run: func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
				close(started)
				<-ctx.Done()
				return upscale.JobOutcome{Retry: true} // its settlement failed
			},
			Settle: settles(nil, settled).Settle,
		})
		<-started
		if _, err := q.Cancel(ctx, "a", id); err != nil {
			t.Fatal(err)
		}
		awaitSettled(t, q, settled, "unsettled", id)
	})

	t.Run("CancelWaitingToRunAgain", func(t *testing.T) {
		q := newQueue(t, NewClock(start))
		retried := submit(t, q, job("retried", "a"))["retried"]
		runs := make(chan string, 4)
		halt := work(t, q, 1, func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
			runs <- j.Source
			return upscale.JobOutcome{Retry: true}
		})
		if name := <-runs; name != "retried" {
			t.Fatalf("ran %s", name)
		}
		halt()
		stopped := submit(t, q, job("stopped", "a"))["stopped"]
		cutShort(t, q, func(context.Context) {}, func(context.Context) {})
		for name, id := range map[string]string{"retried": retried, "stopped": stopped} {
			got, err := q.Cancel(ctx, "a", id)
			if err != nil || got.Status != upscale.JobCanceled || got.Started.IsZero() {
				t.Errorf("Cancel(%s) waiting to run again = %+v, %v; want canceled at once, started before", name, got, err)
			}
		}
		settled := make(chan string, 2)
		workWith(t, q, 1, settles(runs, settled))
		waitDone(t, q, "a", submit(t, q, job("after", "a"))["after"])
		if name := <-runs; name != "after" {
			t.Errorf("%s ran again after it was canceled", name)
		}
		for range 2 {
			select {
			case got := <-settled:
				if !strings.HasSuffix(got, " "+upscale.ErrJobCanceled.Error()) {
					t.Errorf("settled %q, want the cause ErrJobCanceled", got)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the canceled jobs were not settled")
			}
		}
	})

	t.Run("CancelRunning", func(t *testing.T) {
		q := newQueue(t, NewClock(start))
		id := submit(t, q, job("running", "a"))["running"]
		started, sawDone := make(chan struct{}), make(chan error, 1)
		work(t, q, 1, func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
			close(started)
			<-ctx.Done()
			sawDone <- context.Cause(ctx)
			p := upscale.Problem{Status: 504, Code: "timeout"} // what a run cut short reports
			return upscale.JobOutcome{Problem: &p}
		})
		<-started
		if _, err := q.Cancel(ctx, "a", id); err != nil {
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
		if got := waitDone(t, q, "a", id); got.Status != upscale.JobCanceled || got.Problem != nil || got.Started.IsZero() {
			t.Errorf("after Cancel: %+v, want canceled, started, no problem", got)
		}
	})

	t.Run("ResultOutlivesCancel", func(t *testing.T) {
		q := newQueue(t, NewClock(start))
		id := submit(t, q, job("paid", "a"))["paid"]
		started, release := make(chan struct{}), make(chan struct{})
		work(t, q, 1, func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
			close(started)
			<-release // charged already when Cancel comes
			return upscale.JobOutcome{Result: result(j.Source)}
		})
		<-started
		if _, err := q.Cancel(ctx, "a", id); err != nil {
			t.Fatal(err)
		}
		close(release)
		if got := waitDone(t, q, "a", id); got.Status != upscale.JobSucceeded || got.Result == nil {
			t.Errorf("a run that returned its result after Cancel: %+v, want succeeded", got)
		}
		if got, err := q.Cancel(ctx, "a", id); err != nil || got.Status != upscale.JobSucceeded {
			t.Errorf("Cancel of a finished job = %+v, %v; want it as it ended", got, err)
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

// cutShort works q's one queued job with a run that calls begin, then
// outlasts the 50 ms its worker's stop gives it to drain, and calls end
// once its context is done, returning no outcome.
func cutShort(t *testing.T, q upscale.JobQueue, begin, end func(ctx context.Context)) {
	t.Helper()
	started := make(chan struct{})
	stop, err := q.Work(context.Background(), 1, upscale.JobWorker{Run: func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
		begin(ctx)
		close(started)
		<-ctx.Done()
		end(ctx)
		return upscale.JobOutcome{}
	}, Settle: Runner(nil).Settle})
	if err != nil {
		t.Fatal(err)
	}
	<-started
	drain, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := stop(drain); err != nil {
		t.Fatal(err)
	}
}

// Runner is a JobWorker that runs jobs with run and whose jobs hold
// nothing to settle: its Settle returns an empty outcome.
func Runner(run func(context.Context, upscale.Job) upscale.JobOutcome) upscale.JobWorker {
	return upscale.JobWorker{Run: run, Settle: func(context.Context, upscale.Job, error) upscale.JobOutcome { return upscale.JobOutcome{} }}
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
