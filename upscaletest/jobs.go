package upscaletest

import (
	"context"
	"fmt"
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
	s := jobQueueSuite{newQueue: newQueue, start: time.Now().UTC().Truncate(time.Second)}
	testJobQueueSubmit(t, s)
	testJobQueueRuns(t, s)
	testJobQueueCancels(t, s)
}

// jobQueueSuite is what TestJobQueue's checks share: the queue under test,
// made anew for each, and when their jobs were created.
type jobQueueSuite struct {
	newQueue func(t *testing.T, clock *Clock) upscale.JobQueue
	start    time.Time
}

// job is a job to submit; name goes in its Source, by which the suite
// knows it, since the queue gives it its ID.
func (s jobQueueSuite) job(name, account string) upscale.Job {
	return upscale.Job{
		AccountID: account, KeyID: "key-" + account, Params: upscale.Params{Scale: 4, ImageType: upscale.Anime, Denoise: upscale.DenoiseLow},
		Source: name, Reservation: "reservation-" + name, Pool: upscale.PoolCredit, Webhook: "https://hooks.example/" + name,
		Created: s.start, Expires: s.start.Add(time.Hour),
	}
}

// submit submits jobs and returns their IDs by name.
func (s jobQueueSuite) submit(t *testing.T, q upscale.JobQueue, jobs ...upscale.Job) map[string]string {
	t.Helper()
	ids := map[string]string{}
	for _, j := range jobs {
		kept, err := q.Submit(context.Background(), j)
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
func workWith(t *testing.T, q upscale.JobQueue, concurrency int, worker upscale.JobWorker) func() {
	t.Helper()
	ctx := context.Background()
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
func work(t *testing.T, q upscale.JobQueue, concurrency int, run func(context.Context, upscale.Job) upscale.JobOutcome) func() {
	t.Helper()
	return workWith(t, q, concurrency, Runner(run))
}

// jobResult is the result the suite's runs make of job id.
func jobResult(id string) *upscale.Response {
	return &upscale.Response{URL: "https://results.example/" + id, Via: upscale.PoolCredit}
}

// settles is a worker that runs jobs to a Result, sending each job's
// name on ran, and sends on settled the job and why of each
// settlement.
func settles(ran chan<- string, settled chan<- string) upscale.JobWorker {
	return upscale.JobWorker{
		Run: func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
			ran <- j.Source
			return upscale.JobOutcome{Result: jobResult(j.Source)}
		},
		Settle: func(ctx context.Context, j upscale.Job, why error) upscale.JobOutcome {
			settled <- fmt.Sprintf("%s %v", j.Source, why)
			return upscale.JobOutcome{}
		},
	}
}

// awaitSettled waits for the settlement of the job name, why
// ErrJobCanceled, and checks that the job stays canceled.
func awaitSettled(t *testing.T, q upscale.JobQueue, settled <-chan string, name, id string) {
	t.Helper()
	select {
	case got := <-settled:
		if want := fmt.Sprintf("%s %v", name, upscale.ErrJobCanceled); got != want {
			t.Errorf("settled %q, want %q", got, want)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("%s: no run settled it", name)
	}
	if got, _ := q.Get(context.Background(), "a", id); got.Status != upscale.JobCanceled || got.Finished.IsZero() || got.Result != nil {
		t.Errorf("%s now %+v, want canceled with its end time", name, got)
	}
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
