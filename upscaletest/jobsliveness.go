package upscaletest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
)

// OpenProcess opens a JobQueue on a store shared by processes, as the
// process named id sees it (a second process under an id is that process
// restarted), and returns crash, which ends that process as SIGKILL
// would: it beats no more and takes no more jobs, and its runs stay as
// they stand, never to return.
type OpenProcess func(id string) (q upscale.JobQueue, crash func())

// TestJobQueueLiveness checks what a JobQueue shared by processes promises
// about their deaths: a process that dies mid-run has its run handed back
// to a live process once its lapse has passed, however long the queue
// lets a run take; a process restarted under its ID hands back its own
// runs at once, not after the lapse; and a run merely slower than the
// lapse is never handed to a second process while its own lives.
// newStore returns, for a new shared store whose processes judge each
// other dead after lapse, the function that opens its processes; their
// queue must let a run take an hour.
func TestJobQueueLiveness(t *testing.T, newStore func(t *testing.T, lapse time.Duration) OpenProcess) {
	ctx := context.Background()
	newJob := func() upscale.Job {
		now := time.Now().UTC()
		return upscale.Job{
			AccountID: "a", Params: upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone},
			Source: "source", Reservation: "reservation", Pool: upscale.PoolCredit, Created: now, Expires: now.Add(time.Hour),
		}
	}
	submit := func(t *testing.T, q upscale.JobQueue) string {
		t.Helper()
		kept, err := q.Submit(ctx, newJob())
		if err != nil {
			t.Fatal(err)
		}
		return kept.ID
	}
	work := func(t *testing.T, q upscale.JobQueue, run func(context.Context, upscale.Job) upscale.JobOutcome) {
		t.Helper()
		stop, err := q.Work(ctx, 1, Runner(run))
		if err != nil {
			t.Fatalf("Work: %v", err)
		}
		t.Cleanup(func() {
			drain, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := stop(drain); err != nil {
				t.Errorf("stop: %v", err)
			}
		})
	}
	// dies opens process id and has it take a job and die mid-run: it
	// returns once the process is dead with the job's run under way.
	dies := func(t *testing.T, open OpenProcess, id string) {
		t.Helper()
		q, crash := open(id)
		entered, dead := make(chan struct{}), make(chan struct{})
		work(t, q, func(context.Context, upscale.Job) upscale.JobOutcome {
			close(entered)
			<-dead // a dead process's run never returns; the test's end frees it
			return upscale.JobOutcome{}
		})
		t.Cleanup(func() { close(dead) }) // before its stop, which waits for it
		<-entered
		crash()
	}
	// succeeds works q with a run that succeeds at once, counting the runs.
	succeeds := func(t *testing.T, q upscale.JobQueue, runs *atomic.Int64) {
		work(t, q, func(_ context.Context, j upscale.Job) upscale.JobOutcome {
			runs.Add(1)
			return upscale.JobOutcome{Result: &upscale.Response{URL: "https://results.example/" + j.ID, Via: j.Pool}}
		})
	}

	t.Run("DeadProcessRunsHandedBack", func(t *testing.T) {
		t.Parallel()
		open := newStore(t, 2*time.Second)
		live, _ := open("live")
		id := submit(t, live)
		dies(t, open, "dead")
		var runs atomic.Int64
		succeeds(t, live, &runs)
		if j := waitDone(t, live, "a", id); j.Status != upscale.JobSucceeded || runs.Load() != 1 {
			t.Errorf("the dead process's job: %s after %d runs elsewhere; want succeeded after 1", j.Status, runs.Load())
		}
	})

	t.Run("RestartHandsBackAtOnce", func(t *testing.T) {
		t.Parallel()
		const lapse = 20 * time.Second
		open := newStore(t, lapse)
		first, _ := open("p")
		id := submit(t, first)
		dies(t, open, "p")
		died := time.Now()
		restarted, _ := open("p")
		var runs atomic.Int64
		succeeds(t, restarted, &runs)
		j := waitDone(t, restarted, "a", id)
		if j.Status != upscale.JobSucceeded || runs.Load() != 1 {
			t.Errorf("the job: %s after %d runs; want succeeded after 1", j.Status, runs.Load())
		}
		if took := time.Since(died); took >= lapse {
			t.Errorf("the restarted process ran its own job %v after it died; want it handed back before the %v lapse", took, lapse)
		}
	})

	t.Run("SlowRunNotHandedOver", func(t *testing.T) {
		t.Parallel()
		// Long enough that a beat delayed by a busy machine does not
		// stop the run (a process stops its runs at half its lapse).
		const lapse = 5 * time.Second
		open := newStore(t, lapse)
		var mu sync.Mutex
		var ran []string
		slow := func(process string) func(context.Context, upscale.Job) upscale.JobOutcome {
			return func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
				mu.Lock()
				ran = append(ran, process)
				mu.Unlock()
				select {
				case <-time.After(2 * lapse):
				case <-ctx.Done():
					return upscale.JobOutcome{}
				}
				return upscale.JobOutcome{Result: &upscale.Response{URL: "https://results.example/" + j.ID, Via: j.Pool}}
			}
		}
		one, _ := open("one")
		two, _ := open("two")
		id := submit(t, one)
		work(t, one, slow("one"))
		work(t, two, slow("two"))
		j := waitDone(t, one, "a", id)
		mu.Lock()
		defer mu.Unlock()
		if j.Status != upscale.JobSucceeded || len(ran) != 1 {
			t.Errorf("the slow job: %s, run by %v; want succeeded, run once", j.Status, ran)
		}
	})
}
