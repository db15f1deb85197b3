package upscale_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/upscaletest"
)

// lostCommits is a ledger whose Commit charges but answers ErrUnavailable
// while lose is set: a commit whose answer is lost.
type lostCommits struct {
	*upscale.MemoryLedger
	lose atomic.Bool
}

func (l *lostCommits) Commit(ctx context.Context, id string) error {
	err := l.MemoryLedger.Commit(ctx, id)
	if l.lose.Load() {
		return fmt.Errorf("%w: the answer was lost", upscale.ErrUnavailable)
	}
	return err
}

// countingUpscaler counts its images.
type countingUpscaler struct {
	upscaletest.PixelUpscaler
	n *atomic.Int32
}

func (u countingUpscaler) Upscale(ctx context.Context, src []byte, opts upscale.Params) (upscale.Image, error) {
	u.n.Add(1)
	return u.PixelUpscaler.Upscale(ctx, src, opts)
}

// TestJobChargeFinishedByTheNextRun: a run whose commit's answer is lost
// leaves its result prepared; the job runs again, the next run finishes the
// charge (charging nothing more) and delivers that result: the engine ran
// once, one result is stored, one unit is charged.
func TestJobChargeFinishedByTheNextRun(t *testing.T) {
	var ledger *lostCommits
	var images atomic.Int32
	e := newEnv(t, func(c *upscale.Config) {
		ledger = &lostCommits{MemoryLedger: c.Ledger.(*upscale.MemoryLedger)}
		ledger.lose.Store(true)
		c.Ledger = ledger
		c.ChargeTimeout = 100 * time.Millisecond
		c.Upscaler = countingUpscaler{n: &images}
	})
	location, _ := e.submit(keyFree, body(e.url("/small.png")))
	for deadline := time.Now().Add(10 * time.Second); images.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // past the first run's settlement
	if j := e.job(location, keyFree); j.Status.Done() {
		t.Fatalf("with its commit's answer lost: %s, want the job run again", j.Status)
	}
	ledger.lose.Store(false)
	j := e.waitJob(location, keyFree)
	if j.Status != upscale.JobSucceeded || images.Load() != 1 || e.blobs.Len() != 1 || e.balance("free").Free != 2 {
		t.Errorf("job %s, %d images made, %d items stored, %d free left; want succeeded, 1, 1 (the result) and 2", j.Status, images.Load(), e.blobs.Len(), e.balance("free").Free)
	}
}

// jobMetrics records the job form's counts.
type jobMetrics struct {
	mu       sync.Mutex
	jobsDone map[upscale.JobStatus]int
	charged  map[string]upscale.Pool // by a request's code
}

func newJobMetrics() *jobMetrics {
	return &jobMetrics{jobsDone: map[upscale.JobStatus]int{}, charged: map[string]upscale.Pool{}}
}

func (m *jobMetrics) Attach(func() upscale.Load)             {}
func (m *jobMetrics) StepDone(upscale.Step, time.Duration)   {}
func (m *jobMetrics) ImageDone(sourceBytes, outputBytes int) {}
func (m *jobMetrics) RequestDone(code string, pool upscale.Pool, took time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if pool != "" {
		m.charged[code] = pool
	}
}

func (m *jobMetrics) JobDone(status upscale.JobStatus, waited, ran time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.jobsDone[status]++
}

func (m *jobMetrics) done(status upscale.JobStatus) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.jobsDone[status]
}

// downResults is a BlobReader whose Put of a result fails with
// ErrUnavailable while down is set; a job's source is kept as ever.
type downResults struct {
	upscale.BlobReader
	down atomic.Bool
}

func (b *downResults) Put(ctx context.Context, key string, data []byte, contentType string, expires time.Time) (string, error) {
	if b.down.Load() && !strings.HasSuffix(key, ".source") {
		return "", fmt.Errorf("%w: the object store is down", upscale.ErrUnavailable)
	}
	return b.BlobReader.Put(ctx, key, data, contentType, expires)
}

// TestCancelWaitingToRunAgain: a job canceled while it waits to run again
// (its run asked to Retry, or StopJobs gave it back) is settled by the
// DELETE: its unit back, its source deleted, its canceled webhook sent,
// once; a DELETE sent again changes and counts nothing more. An accepted
// job is not counted as charged.
func TestCancelWaitingToRunAgain(t *testing.T) {
	for _, tc := range []struct {
		name string
		// leave ends the job's run under way so that it waits to run
		// again.
		leave func(t *testing.T, e *env, blobs *downResults, gate chan struct{})
		// restart starts the workers again once the job is canceled,
		// for its webhook to be delivered.
		restart bool
	}{
		{"AfterRetry", func(t *testing.T, e *env, blobs *downResults, gate chan struct{}) {
			blobs.down.Store(true)
			close(gate)
		}, false},
		{"AfterStop", func(t *testing.T, e *env, blobs *downResults, gate chan struct{}) {
			drain, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
			defer cancel()
			if err := e.handler.StopJobs(drain); err != nil {
				t.Fatal(err)
			}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := newReceiver(t, nil)
			var blobs *downResults
			metrics := newJobMetrics()
			u := upscaletest.GatedUpscaler{Entered: make(chan struct{}, 2), Gate: make(chan struct{})}
			e, _ := webhookEnv(t, rc, func(c *upscale.Config) {
				blobs = &downResults{BlobReader: c.Blobs.(upscale.BlobReader)}
				c.Blobs, c.Upscaler, c.Metrics = blobs, u, metrics
			})
			w := e.submitWithWebhook(rc.URL + "/hooks")
			if w.Code != http.StatusAccepted {
				t.Fatalf("submit: %d %s", w.Code, w.Body)
			}
			location := w.Header().Get("Location")
			<-u.Entered
			tc.leave(t, e, blobs, u.Gate)
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				j := e.job(location, keyFree)
				if j.Status == upscale.JobQueued && !j.Started.IsZero() {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("job %s, want it waiting to run again", j.Status)
				}
			}
			for range 2 {
				w := e.sendJob("DELETE", location, keyFree, "", "")
				var j upscale.Job
				if err := json.Unmarshal(w.Body.Bytes(), &j); err != nil || j.Status != upscale.JobCanceled {
					t.Fatalf("DELETE: %d %s, want canceled", w.Code, w.Body)
				}
			}
			if b := e.balance("free"); b.Free != 3 || e.blobs.Len() != 0 {
				t.Errorf("after the cancel: %d free images, %d items stored; want 3 and none", b.Free, e.blobs.Len())
			}
			if tc.restart {
				if err := e.handler.StartJobs(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			posts := rc.received(t, 1)
			if len(posts) != 1 || !strings.Contains(string(posts[0].body), `"upscale.job.canceled"`) {
				t.Errorf("webhooks %d, want one canceled", len(posts))
			}
			if n := metrics.done(upscale.JobCanceled); n != 1 {
				t.Errorf("the canceled job counted %d times, want once", n)
			}
			metrics.mu.Lock()
			defer metrics.mu.Unlock()
			if pool, ok := metrics.charged["accepted"]; ok {
				t.Errorf("an accepted job counted as charged to %s", pool)
			}
		})
	}
}

// lostPutAnswers is a BlobReader whose result Puts store the result but
// answer ErrUnavailable, and whose Deletes fail, while lose is set: a
// worker that stored a result and then lost its stores, as one that dies
// between storing and recording its result leaves it.
type lostPutAnswers struct {
	upscale.BlobReader
	lose atomic.Bool
}

func (b *lostPutAnswers) Put(ctx context.Context, key string, data []byte, contentType string, expires time.Time) (string, error) {
	url, err := b.BlobReader.Put(ctx, key, data, contentType, expires)
	if b.lose.Load() && !strings.HasSuffix(key, ".source") {
		return "", fmt.Errorf("%w: the answer was lost", upscale.ErrUnavailable)
	}
	return url, err
}

func (b *lostPutAnswers) Delete(ctx context.Context, key string, expires time.Time) error {
	if b.lose.Load() {
		return fmt.Errorf("%w: the store is down", upscale.ErrUnavailable)
	}
	return b.BlobReader.Delete(ctx, key, expires)
}

// TestJobLeavesNoOrphanResult: a result stored by a run that could
// neither record it nor delete it is deleted by the next run, which finds
// its key recorded before it was stored: one result stays, the one
// delivered.
func TestJobLeavesNoOrphanResult(t *testing.T) {
	var blobs *lostPutAnswers
	var images atomic.Int32
	e := newEnv(t, func(c *upscale.Config) {
		blobs = &lostPutAnswers{BlobReader: c.Blobs.(upscale.BlobReader)}
		blobs.lose.Store(true)
		c.Blobs, c.Upscaler = blobs, countingUpscaler{n: &images}
	})
	location, _ := e.submit(keyFree, body(e.url("/small.png")))
	for deadline := time.Now().Add(10 * time.Second); images.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	for deadline := time.Now().Add(10 * time.Second); e.job(location, keyFree).Status != upscale.JobQueued; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first run did not end")
		}
	}
	blobs.lose.Store(false) // the run after it
	j := e.waitJob(location, keyFree)
	if j.Status != upscale.JobSucceeded || images.Load() != 2 || e.blobs.Len() != 1 || e.balance("free").Free != 2 {
		t.Errorf("job %s, %d images made, %d items stored, %d free left; want succeeded, 2, 1 (the delivered result) and 2",
			j.Status, images.Load(), e.blobs.Len(), e.balance("free").Free)
	}
}

// workerCatcher is a JobQueue whose Work runs nothing but keeps the
// JobWorker, for a test to call as a queue does for a job its dead
// worker left.
type workerCatcher struct {
	*upscale.MemoryJobQueue
	worker upscale.JobWorker
}

func (q *workerCatcher) Work(ctx context.Context, concurrency int, worker upscale.JobWorker) (func(context.Context) error, error) {
	q.worker = worker
	return func(context.Context) error { return nil }, nil
}

// TestJobSettledForADeadWorker: the settlement a queue asks of a job its
// dead worker left does no work: a canceled job's unit goes back, its
// source is deleted and its canceled webhook sent; a job given up fails
// with upstream_error, its unit back. Asked twice, it counts the job once.
func TestJobSettledForADeadWorker(t *testing.T) {
	for _, tc := range []struct {
		cause  error
		status upscale.JobStatus
		event  string
	}{{upscale.ErrJobCanceled, upscale.JobCanceled, "upscale.job.canceled"}, {upscale.ErrJobGivenUp, upscale.JobFailed, "upscale.job.failed"}} {
		t.Run(string(tc.status), func(t *testing.T) {
			rc := newReceiver(t, nil)
			var queue *workerCatcher
			var images atomic.Int32
			metrics := newJobMetrics()
			e, _ := webhookEnv(t, rc, func(c *upscale.Config) {
				queue = &workerCatcher{MemoryJobQueue: upscale.NewMemoryJobQueue(upscale.MemoryJobQueueOptions{Now: c.Now})}
				c.Jobs, c.Upscaler, c.Metrics = queue, countingUpscaler{n: &images}, metrics
			})
			w := e.submitWithWebhook(rc.URL + "/hooks")
			var submitted upscale.Job
			if err := json.Unmarshal(w.Body.Bytes(), &submitted); err != nil || w.Code != http.StatusAccepted {
				t.Fatalf("submit: %d %s", w.Code, w.Body)
			}
			job, err := queue.Get(context.Background(), "free", submitted.ID)
			if err != nil {
				t.Fatal(err)
			}
			var outcome upscale.JobOutcome
			for range 2 {
				outcome = queue.worker.Settle(context.Background(), job, tc.cause)
			}
			if images.Load() != 0 || outcome.Result != nil || outcome.Retry || (tc.status == upscale.JobFailed) != (outcome.Problem != nil) {
				t.Errorf("outcome %+v after %d images; want no work, a problem for a job given up", outcome, images.Load())
			}
			if p := outcome.Problem; p != nil && (p.Status != http.StatusBadGateway || p.Code != "upstream_error") {
				t.Errorf("a job given up: problem %+v, want 502 upstream_error", p)
			}
			if b := e.balance("free"); b.Free != 3 || e.blobs.Len() != 0 {
				t.Errorf("settled: %d free images, %d items stored; want 3 and none", b.Free, e.blobs.Len())
			}
			if posts := rc.received(t, 1); len(posts) != 1 || !strings.Contains(string(posts[0].body), `"`+tc.event+`"`) {
				t.Errorf("%d webhooks, want one %s", len(posts), tc.event)
			}
			if n := metrics.done(tc.status); n != 1 {
				t.Errorf("the job counted %d times, want once", n)
			}
		})
	}
}

// TestCancelSettledOnceTheLedgerAnswers: a job canceled while it waits,
// whose unit the ledger could not give back then, is settled by its
// queue's workers once the ledger answers: its unit back, its source
// deleted, counted once.
func TestCancelSettledOnceTheLedgerAnswers(t *testing.T) {
	metrics := newJobMetrics()
	e, _, ledger, _ := newFlakyEnv(t, func(c *upscale.Config) { c.Metrics, c.ChargeTimeout = metrics, 50*time.Millisecond })
	if err := e.handler.StopJobs(context.Background()); err != nil {
		t.Fatal(err)
	}
	location, _ := e.submit(keyFree, body(e.url("/small.png")))
	ledger.releaseFailures.Store(1 << 30)
	if w := e.sendJob("DELETE", location, keyFree, "", ""); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"status":"canceled"`) {
		t.Fatalf("DELETE: %d %s, want canceled", w.Code, w.Body)
	}
	if b := e.balance("free"); b.Free != 2 {
		t.Fatalf("%d free images while the ledger is down, want 2: the unit still held", b.Free)
	}
	ledger.releaseFailures.Store(0)
	if err := e.handler.StartJobs(context.Background()); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); e.balance("free").Free != 3 || e.blobs.Len() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d free images, %d items stored; want 3 and none", e.balance("free").Free, e.blobs.Len())
		}
	}
	if n := metrics.done(upscale.JobCanceled); n != 1 {
		t.Errorf("the canceled job counted %d times, want once", n)
	}
}

// TestCancelAfterAChargeOfUnknownOutcome: a job canceled while its charge's
// outcome is unknown (the ledger committed, its answer lost) keeps its
// result: the run asks to Retry, and the job's settlement delivers the
// result, charged once, rather than deleting what was paid for.
func TestCancelAfterAChargeOfUnknownOutcome(t *testing.T) {
	var queue *upscale.MemoryJobQueue
	var jobID atomic.Value
	e, _, ledger, _ := newFlakyEnv(t, func(c *upscale.Config) {
		queue = upscale.NewMemoryJobQueue(upscale.MemoryJobQueueOptions{Now: c.Now})
		c.Jobs, c.ChargeTimeout = queue, time.Millisecond
	})
	ledger.commitFailures.Store(1)
	ledger.commitLostAnswer = true
	ledger.onCommitFailure = func() {
		if _, err := queue.Cancel(context.Background(), "free", jobID.Load().(string)); err != nil {
			t.Error(err)
		}
	}
	if err := e.handler.StopJobs(context.Background()); err != nil {
		t.Fatal(err)
	}
	location, job := e.submit(keyFree, body(e.url("/small.png")))
	jobID.Store(job["id"].(string))
	if err := e.handler.StartJobs(context.Background()); err != nil {
		t.Fatal(err)
	}
	var got upscale.Job
	for deadline := time.Now().Add(10 * time.Second); !got.Status.Done() || got.Status == upscale.JobCanceled; time.Sleep(5 * time.Millisecond) {
		if got = e.job(location, keyFree); time.Now().After(deadline) {
			break
		}
	}
	if got.Status != upscale.JobSucceeded || got.Result == nil {
		t.Fatalf("job %+v, want succeeded with the result it was charged for", got)
	}
	if b := e.balance("free"); b.Free != 2 || e.blobs.Len() != 1 {
		t.Errorf("%d free images, %d items stored; want 2 and the result", b.Free, e.blobs.Len())
	}
}
