package upscale_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/upscaletest"
)

// TestJobFailureNotCharged: a job the engine fails on ends failed with
// the problem the request would have had, and is not charged.
func TestJobFailureNotCharged(t *testing.T) {
	e := newEnv(t, func(c *upscale.Config) { c.Upscaler = failingUpscaler{err: upscale.ErrUpstream} })
	location, _ := e.submit(keyFree, body(e.url("/small.png")))
	j := e.waitJob(location, keyFree)
	if j.Status != upscale.JobFailed || j.Problem == nil || j.Problem.Code != "upstream_error" || j.Problem.Status != 502 {
		t.Fatalf("job %+v, want failed with upstream_error", j)
	}
	if b := e.balance("free"); b.Free != 3 || e.blobs.Len() != 0 {
		t.Errorf("after the failure: %d free images, %d items stored; want 3 and none", b.Free, e.blobs.Len())
	}
}

// TestStopJobsGivesBack: a job whose worker stops mid-run keeps its unit
// and source, and another handler on the same stores runs it to the end,
// charged once.
func TestStopJobsGivesBack(t *testing.T) {
	var queue upscale.JobQueue
	u := upscaletest.GatedUpscaler{Entered: make(chan struct{}, 2), Gate: make(chan struct{})}
	e := newEnv(t, func(c *upscale.Config) {
		c.Upscaler = u
		queue = upscale.NewMemoryJobQueue(upscale.MemoryJobQueueOptions{Now: c.Now})
		c.Jobs = queue
	})
	location, _ := e.submit(keyFree, body(e.url("/small.png")))
	<-u.Entered
	drain, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := e.handler.StopJobs(drain); err != nil {
		t.Fatal(err)
	}
	if j := e.job(location, keyFree); j.Status != upscale.JobQueued || e.balance("free").Free != 2 {
		t.Fatalf("after its worker stopped: %s, %d free images; want queued, its unit held", j.Status, e.balance("free").Free)
	}
	close(u.Gate)
	next, err := upscale.New(upscale.Config{Keys: e.keys, Ledger: e.ledger, Upscaler: upscaletest.PixelUpscaler{}, Blobs: e.blobs, Jobs: queue,
		Fetch: upscale.FetchPolicy{AllowPrivateNetworks: true}, Capacity: upscale.Capacity{IdleRelease: -1}, Now: e.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := next.StartJobs(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { next.StopJobs(context.Background()) })
	e.handler = next
	if j := e.waitJob(location, keyFree); j.Status != upscale.JobSucceeded || e.balance("free").Free != 2 || e.blobs.Len() != 1 {
		t.Errorf("run by the next handler: %+v, %d free images, %d items; want succeeded, charged once, the result alone", j, e.balance("free").Free, e.blobs.Len())
	}
}

// TestNewStartsNothing: New leaves no goroutine behind; the workers start
// with StartJobs, stop with StopJobs, and may start again.
func TestNewStartsNothing(t *testing.T) {
	keys, ledger := upscale.NewMemoryKeyStore(), upscale.NewMemoryLedger(upscale.LedgerOptions{})
	blobs := newMemoryBlobs(t, upscale.MemoryBlobStoreOptions{})
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	h, err := upscale.New(upscale.Config{Keys: keys, Ledger: ledger, Upscaler: upscaletest.PixelUpscaler{}, Blobs: blobs, Capacity: upscale.Capacity{IdleRelease: -1}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 2 {
		if err := h.StartJobs(ctx); err != nil {
			t.Fatal(err)
		}
		if err := h.StartJobs(ctx); err == nil {
			t.Error("StartJobs while the workers run: no error")
		}
		if err := h.StopJobs(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestJobWaitsItsTurn: a job whose run waits for the engine behind
// requests longer than EngineTimeout is not failed for it: only the
// engine's own work is under the deadline.
func TestJobWaitsItsTurn(t *testing.T) {
	e := newEnv(t, func(c *upscale.Config) {
		c.Upscaler = slowUpscaler{took: 150 * time.Millisecond}
		c.EngineTimeout = 200 * time.Millisecond
		c.Capacity.EngineConcurrency = 1
	})
	requests := make(chan *httptest.ResponseRecorder, 3)
	for range 3 {
		go func() { requests <- e.post(keyPro, body(e.url("/small.png"))) }()
	}
	for e.hits.Load() < 3 { // the requests hold or wait for the engine
		time.Sleep(time.Millisecond)
	}
	location, _ := e.submit(keyFree, body(e.url("/small.png")))
	if j := e.waitJob(location, keyFree); j.Status != upscale.JobSucceeded {
		t.Errorf("a job that waited behind requests: %s %+v, want succeeded", j.Status, j.Problem)
	}
	for range 3 {
		<-requests
	}
}

// TestWebhookGone: a receiver that answers 410 Gone gets no more
// attempts of that webhook.
func TestWebhookGone(t *testing.T) {
	rc := newReceiver(t, func(int) int { return http.StatusGone })
	e, _ := webhookEnv(t, rc)
	if w := e.submitWithWebhook(rc.URL + "/hooks"); w.Code != http.StatusAccepted {
		t.Fatalf("submit: %d %s", w.Code, w.Body)
	}
	if posts := rc.received(t, 1); len(posts) != 1 {
		t.Errorf("%d attempts after a 410, want 1", len(posts))
	}
}

// deadlineQueue is a MemoryJobQueue whose runs have a deadline, as
// River's do (RunTimeout).
type deadlineQueue struct {
	*upscale.MemoryJobQueue
	runTimeout time.Duration
	runs       atomic.Int32
}

func (q *deadlineQueue) Work(ctx context.Context, concurrency int, worker upscale.JobWorker) (func(context.Context) error, error) {
	run := worker.Run
	worker.Run = func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
		q.runs.Add(1)
		ctx, cancel := context.WithTimeout(ctx, q.runTimeout)
		defer cancel()
		return run(ctx, j)
	}
	return q.MemoryJobQueue.Work(ctx, concurrency, worker)
}

// TestJobGivesUpItsTurnInTime: a job's run that waits for the engine
// until the rest of its own deadline would not cover an enlargement asks
// to run again later: it is not failed, and it succeeds once the engine
// is free.
func TestJobGivesUpItsTurnInTime(t *testing.T) {
	var queue *deadlineQueue
	e := newEnv(t, func(c *upscale.Config) {
		c.Upscaler = slowUpscaler{took: 1500 * time.Millisecond} // it keeps its slot past a request's deadline
		// A run waits its turn for 100 ms (2300 - 2000 - 200), and once
		// it has the engine, has at least 2000 ms for the 1500 ms image:
		// room for a loaded machine under -race.
		c.EngineTimeout, c.ChargeTimeout = 2000*time.Millisecond, 200*time.Millisecond
		c.Capacity.EngineConcurrency = 1
		queue = &deadlineQueue{MemoryJobQueue: upscale.NewMemoryJobQueue(upscale.MemoryJobQueueOptions{Now: c.Now}), runTimeout: 2300 * time.Millisecond}
		c.Jobs = queue
	})
	request := make(chan *httptest.ResponseRecorder, 1)
	go func() { request <- e.post(keyPro, body(e.url("/small.png"))) }()
	for e.handler.Load().InEngine == 0 { // the request holds the engine for 1.5 s
		time.Sleep(time.Millisecond)
	}
	location, _ := e.submit(keyFree, body(e.url("/small.png")))
	if j := e.waitJob(location, keyFree); j.Status != upscale.JobSucceeded || queue.runs.Load() < 2 {
		t.Errorf("a job whose first run could not get the engine in time: %s %+v after %d runs; want succeeded on a later run",
			j.Status, j.Problem, queue.runs.Load())
	}
	<-request
}

// deadlineUpscaler records how long each Upscale had before its deadline.
type deadlineUpscaler struct {
	upscaletest.PixelUpscaler
	left chan time.Duration
}

func (u deadlineUpscaler) Upscale(ctx context.Context, src []byte, opts upscale.Params) (upscale.Image, error) {
	deadline, _ := ctx.Deadline()
	u.left <- time.Until(deadline)
	return u.PixelUpscaler.Upscale(ctx, src, opts)
}

// TestJobEngineHasTheRunsTime: a request's engine has EngineTimeout; a
// job's has what its run has left but ChargeTimeout, so that an engine
// deciding by its deadline (learned or classical passes) makes a job's
// result learned where a request's would not be.
func TestJobEngineHasTheRunsTime(t *testing.T) {
	u := deadlineUpscaler{left: make(chan time.Duration, 2)}
	e := newEnv(t, func(c *upscale.Config) {
		c.Upscaler, c.EngineTimeout, c.ChargeTimeout = u, 2*time.Second, 15*time.Second
		c.Jobs = upscale.NewMemoryJobQueue(upscale.MemoryJobQueueOptions{Now: c.Now, RunTimeout: 5 * time.Minute})
	})
	checkOK(t, e.post(keyFree, body(e.url("/small.png"))), upscale.PoolFree)
	if left := <-u.left; left > 2*time.Second {
		t.Errorf("a request's engine had %v, want EngineTimeout's 2s at most", left)
	}
	location, _ := e.submit(keyFree, body(e.url("/small.png")))
	if left := <-u.left; left < 4*time.Minute || left > 5*time.Minute-15*time.Second {
		t.Errorf("a job's engine had %v, want its run's 5 minutes but the 15 s to settle", left)
	}
	if j := e.waitJob(location, keyFree); j.Status != upscale.JobSucceeded {
		t.Errorf("job %s, want succeeded", j.Status)
	}
	// A run shorter than ChargeTimeout gives its engine all it has, not a
	// deadline already past.
	short := deadlineUpscaler{left: make(chan time.Duration, 1)}
	e = newEnv(t, func(c *upscale.Config) {
		c.Upscaler, c.ChargeTimeout = short, 15*time.Second
		c.Jobs = upscale.NewMemoryJobQueue(upscale.MemoryJobQueueOptions{Now: c.Now, RunTimeout: 10 * time.Second})
	})
	location, _ = e.submit(keyFree, body(e.url("/small.png")))
	if left := <-short.left; left < 5*time.Second {
		t.Errorf("a job in a 10 s run had %v for its engine, want about 10 s", left)
	}
	if j := e.waitJob(location, keyFree); j.Status != upscale.JobSucceeded {
		t.Errorf("the job in a short run: %s, want succeeded", j.Status)
	}
}

// TestMemoryJobQueueGivesUpOverruns: a run that overruns RunTimeout runs
// again, MaxJobAttempts times at most; then the job is given up, settled
// why ErrJobGivenUp, and failed.
func TestMemoryJobQueueGivesUpOverruns(t *testing.T) {
	q := upscale.NewMemoryJobQueue(upscale.MemoryJobQueueOptions{RunTimeout: 20 * time.Millisecond})
	now := time.Now()
	job, err := q.Submit(context.Background(), upscale.Job{AccountID: "a", Source: "s", Reservation: "r", Created: now, Expires: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	var overruns atomic.Int32
	settled := make(chan error, 2)
	stop, err := q.Work(context.Background(), 1, upscale.JobWorker{
		Run: func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
			<-ctx.Done() // never ends in time
			overruns.Add(1)
			return upscale.JobOutcome{}
		},
		Settle: func(ctx context.Context, j upscale.Job, why error) upscale.JobOutcome {
			settled <- why
			return upscale.JobOutcome{Problem: upscale.GivenUpProblem()}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop(context.Background())
	select {
	case cause := <-settled:
		if !errors.Is(cause, upscale.ErrJobGivenUp) {
			t.Errorf("settled why %v, want ErrJobGivenUp", cause)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the job was not given up")
	}
	got, err := q.Get(context.Background(), "a", job.ID)
	if err != nil || got.Status != upscale.JobFailed || got.Problem == nil || got.Problem.Code != "upstream_error" || overruns.Load() != upscale.MaxJobAttempts {
		t.Errorf("%+v, %v after %d overruns; want failed, upstream_error, after %d", got, err, overruns.Load(), upscale.MaxJobAttempts)
	}
}

// timedUpscaler is a deadlineUpscaler that tells how long it takes.
type timedUpscaler struct {
	deadlineUpscaler
	expected time.Duration
	known    bool
}

func (u timedUpscaler) EstimateDuration([]byte, upscale.Params) (time.Duration, bool, error) {
	return u.expected, u.known, nil
}

// TestJobEngineTimeFollowsItsWork: an Upscaler that tells how long a job
// takes has three times that for it, at least EngineTimeout, within its
// run's time less ChargeTimeout; one that cannot tell yet has the run's.
func TestJobEngineTimeFollowsItsWork(t *testing.T) {
	for _, tc := range []struct {
		name     string
		expected time.Duration
		known    bool
		least    time.Duration
		most     time.Duration
	}{
		{"ThreeTimesItsWork", time.Minute, true, 2*time.Minute + 50*time.Second, 3 * time.Minute},
		{"AtLeastEngineTimeout", time.Second, true, 9 * time.Second, 10 * time.Second},
		{"WithinItsRun", time.Hour, true, 4 * time.Minute, 5*time.Minute - 15*time.Second},
		{"NotKnownYet", 0, false, 4 * time.Minute, 5*time.Minute - 15*time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := timedUpscaler{deadlineUpscaler{left: make(chan time.Duration, 1)}, tc.expected, tc.known}
			e := newEnv(t, func(c *upscale.Config) {
				c.Upscaler, c.EngineTimeout, c.ChargeTimeout = u, 10*time.Second, 15*time.Second
				c.Jobs = upscale.NewMemoryJobQueue(upscale.MemoryJobQueueOptions{Now: c.Now, RunTimeout: 5 * time.Minute})
			})
			location, _ := e.submit(keyFree, body(e.url("/small.png")))
			if left := <-u.left; left < tc.least || left > tc.most {
				t.Errorf("expected %v (known: %v): the job's engine had %v, want %v to %v", tc.expected, tc.known, left, tc.least, tc.most)
			}
			if j := e.waitJob(location, keyFree); j.Status != upscale.JobSucceeded {
				t.Errorf("job %s, want succeeded", j.Status)
			}
		})
	}
}

// inspectingUpscaler counts how often the handler reads a source's
// header: through InspectSource, or through an estimator alone.
type inspectingUpscaler struct {
	upscaletest.PixelUpscaler
	inspections, alone atomic.Int32
}

func (u *inspectingUpscaler) InspectSource(src []byte, params upscale.Params) (upscale.SourceReport, error) {
	u.inspections.Add(1)
	pixels, err := u.PixelUpscaler.SourcePixels(src)
	return upscale.SourceReport{Pixels: pixels, Memory: 4 * pixels}, err
}

func (u *inspectingUpscaler) SourcePixels(src []byte) (int64, error) {
	u.alone.Add(1)
	return u.PixelUpscaler.SourcePixels(src)
}

func (u *inspectingUpscaler) EstimateMemory(src []byte, _ upscale.Params) (int64, error) {
	u.alone.Add(1)
	pixels, err := u.PixelUpscaler.SourcePixels(src)
	return 4 * pixels, err
}

// TestHeaderReadOnce: the handler reads a source's header once at a job's
// submission and once before each enlargement, through a SourceInspector,
// where it read it twice at submission and twice before a job's
// enlargement (a HEIC's with libheif each time).
func TestHeaderReadOnce(t *testing.T) {
	u := &inspectingUpscaler{}
	e := newEnv(t, func(c *upscale.Config) { c.Upscaler = u })
	location, _ := e.submit(keyFree, body(e.url("/small.png")))
	if j := e.waitJob(location, keyFree); j.Status != upscale.JobSucceeded {
		t.Fatalf("job %+v, want succeeded", j)
	}
	checkOK(t, e.post(keyFree, body(e.url("/small.png"))), upscale.PoolFree)
	if inspections, alone := u.inspections.Load(), u.alone.Load(); inspections != 3 || alone != 0 {
		t.Errorf("the header read %d times whole and %d times by one estimator alone, for a job and a request; want 3 (submission, the job's run, the request) and 0", inspections, alone)
	}
}
