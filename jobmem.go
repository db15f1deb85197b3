package upscale

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/upscalekit/upscale/internal/periodic"
	"github.com/upscalekit/upscale/internal/workers"
)

// MemoryJobQueueOptions configures a MemoryJobQueue.
type MemoryJobQueueOptions struct {
	// Now is the queue's clock. Nil means time.Now.
	Now func() time.Time
	// RunTimeout bounds one run of a job: past it the run's context is
	// done (context.DeadlineExceeded) and the job runs again, up to
	// MaxJobAttempts runs, then is given up (ErrJobGivenUp). A job's
	// engine has what is left of it less the handler's ChargeTimeout, so
	// it should exceed EngineTimeout and ChargeTimeout together. Zero
	// means DefaultRunTimeout.
	RunTimeout time.Duration
}

// DefaultRunTimeout is how long one run of a job may take by default:
// long enough for learned passes to make the largest result a server
// makes on a slow CPU (×2 of a 12-megapixel photo took 4 minutes on two
// cores with AVX-512, and the default runtime is several times slower on
// older CPUs), far above a synchronous request's EngineTimeout. It is no
// longer how soon a dead worker's run is found: a queue shared by
// processes judges them by their beats (riverqueue's Lapse).
const DefaultRunTimeout = time.Hour

// MemoryJobQueue is a JobQueue held in process memory, for one process and
// for tests: its jobs are lost when the process ends (their units come
// back when their holds end), so a run never outlives its process nor is
// handed to another (what upscaletest.TestJobQueueLiveness checks of a
// shared queue). It is safe for concurrent use.
type MemoryJobQueue struct {
	now        func() time.Time
	runTimeout time.Duration

	mu          sync.Mutex
	jobs        map[string]*memoryJob
	submissions map[submission]string // the ID of each job with a Submission
	// queued holds the IDs of the queued jobs of each Priority, oldest
	// first.
	queued [JobPriorities][]string
	wake   chan struct{} // has a value while a job may be waiting
	swept  periodic.Gate
}

// submission is a job's Job.Submission, with the account it is of.
type submission struct{ accountID, name string }

type memoryJob struct {
	Job
	stop     context.CancelCauseFunc // the running run's, while it runs
	canceled bool                    // Cancel was asked while it ran
	overruns int                     // runs that overran RunTimeout
	// settle is, for a job that ended with no run that settled it
	// (canceled, or given up), why its settlement is asked for
	// (JobWorker.Settle).
	settle error
}

var (
	_ JobQueue   = (*MemoryJobQueue)(nil)
	_ JobCounter = (*MemoryJobQueue)(nil)
)

// NewMemoryJobQueue returns an empty MemoryJobQueue.
func NewMemoryJobQueue(opts MemoryJobQueueOptions) *MemoryJobQueue {
	return &MemoryJobQueue{
		now: clock(opts.Now), runTimeout: cmp.Or(opts.RunTimeout, DefaultRunTimeout),
		jobs: map[string]*memoryJob{}, submissions: map[submission]string{}, wake: make(chan struct{}, 1),
	}
}

// lock takes q.mu and forgets the jobs past their expiry, once a minute.
// It returns the time it used; the caller unlocks q.mu.
func (q *MemoryJobQueue) lock() time.Time {
	now := q.now()
	q.mu.Lock()
	if q.swept.Due(now) {
		for id, j := range q.jobs {
			if j.stop == nil && !now.Before(j.Expires) {
				delete(q.jobs, id)
				if s := (submission{j.AccountID, j.Submission}); q.submissions[s] == id {
					delete(q.submissions, s)
				}
			}
		}
		for l := range q.queued {
			q.queued[l] = slices.DeleteFunc(q.queued[l], func(id string) bool { return q.jobs[id] == nil })
		}
	}
	return now
}

// level is the index in q.queued of a job's Priority.
func level(priority int) int {
	return min(max(priority, 1), JobPriorities) - 1
}

// stand returns j as it stands: with its Position while it is queued. The
// caller holds q.mu.
func (q *MemoryJobQueue) stand(j *memoryJob, now time.Time) Job {
	job := j.Job
	if job.Status != JobQueued {
		return job
	}
	ahead := 0
	for _, ids := range q.queued[:level(j.Priority)+1] {
		for _, id := range ids {
			if id == j.ID {
				break
			}
			if other := q.jobs[id]; other != nil && other.Status == JobQueued && now.Before(other.Expires) {
				ahead++
			}
		}
	}
	job.Position = &ahead
	return job
}

// withJob runs do on accountID's job id with the queue locked: how Get,
// Cancel and Prepare begin. It fails with ctx's error first, then as find
// does, without running do.
func (q *MemoryJobQueue) withJob(ctx context.Context, accountID, id string, do func(j *memoryJob, now time.Time)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := q.lock()
	defer q.mu.Unlock()
	j, err := q.find(accountID, id, now)
	if err != nil {
		return err
	}
	do(j, now)
	return nil
}

// find returns accountID's job id, unexpired, or ErrNotFound for a job
// that is unknown, another account's or expired. The caller holds q.mu.
func (q *MemoryJobQueue) find(accountID, id string, now time.Time) (*memoryJob, error) {
	j, ok := q.jobs[id]
	if !ok || j.AccountID != accountID || (j.stop == nil && !now.Before(j.Expires)) {
		return nil, fmt.Errorf("job %q: %w", id, ErrNotFound)
	}
	return j, nil
}

// Submit implements JobQueue. IDs are "job_" and 26 random letters and
// digits.
func (q *MemoryJobQueue) Submit(ctx context.Context, job Job) (Job, error) {
	if err := ctx.Err(); err != nil {
		return Job{}, err
	}
	now := q.lock()
	defer q.mu.Unlock()
	submitted := submission{job.AccountID, job.Submission}
	if job.Submission != "" {
		if j, err := q.find(job.AccountID, q.submissions[submitted], now); err == nil {
			return q.stand(j, now), nil
		}
	}
	job.ID, job.Status, job.Priority = "job_"+strings.ToLower(rand.Text()), JobQueued, level(job.Priority)+1
	j := &memoryJob{Job: job}
	q.jobs[job.ID] = j
	if job.Submission != "" {
		q.submissions[submitted] = job.ID
	}
	q.enqueue(j)
	return q.stand(j, now), nil
}

// enqueue puts j last among the queued jobs of its Priority, and wakes a
// worker. The caller holds q.mu.
func (q *MemoryJobQueue) enqueue(j *memoryJob) {
	l := level(j.Priority)
	q.queued[l] = append(q.queued[l], j.ID)
	q.signal()
}

// signal wakes a worker. The caller holds q.mu.
func (q *MemoryJobQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Get implements JobQueue.
func (q *MemoryJobQueue) Get(ctx context.Context, accountID, id string) (Job, error) {
	var job Job
	err := q.withJob(ctx, accountID, id, func(j *memoryJob, now time.Time) { job = q.stand(j, now) })
	return job, err
}

// Cancel implements JobQueue.
func (q *MemoryJobQueue) Cancel(ctx context.Context, accountID, id string) (Job, error) {
	var job Job
	err := q.withJob(ctx, accountID, id, func(j *memoryJob, now time.Time) {
		switch {
		case j.Status == JobQueued && j.Prepared.Delivers(now):
			// Its result is made and maybe charged: it runs again to
			// deliver it.
		case j.Status == JobQueued: // never run, or waiting to run again
			j.Status, j.Finished = JobCanceled, now
			l := level(j.Priority)
			q.queued[l] = slices.DeleteFunc(q.queued[l], func(queued string) bool { return queued == id })
			q.settleLater(j, ErrJobCanceled, 0) // its canceler may have failed to
		case j.Status == JobRunning && j.settle == nil:
			j.canceled = true
			j.stop(ErrJobCanceled)
		}
		job = q.stand(j, now)
	})
	return job, err
}

// CountJobs implements JobCounter.
func (q *MemoryJobQueue) CountJobs(ctx context.Context) (JobCounts, error) {
	if err := ctx.Err(); err != nil {
		return JobCounts{}, err
	}
	now := q.lock()
	defer q.mu.Unlock()
	var counts JobCounts
	for _, j := range q.jobs {
		switch {
		case j.Status == JobRunning:
			counts.Running++
		case j.Status == JobQueued && now.Before(j.Expires):
			counts.Queued++
			counts.QueuedPixels += j.SourcePixels
			if counts.OldestQueued.IsZero() || j.Created.Before(counts.OldestQueued) {
				counts.OldestQueued = j.Created
			}
		}
	}
	return counts, nil
}

// CountAccountJobs implements JobCounter.
func (q *MemoryJobQueue) CountAccountJobs(ctx context.Context, accountID string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	now := q.lock()
	defer q.mu.Unlock()
	n := 0
	for _, j := range q.jobs {
		if j.AccountID == accountID && (j.Status == JobRunning || (j.Status == JobQueued && now.Before(j.Expires))) {
			n++
		}
	}
	return n, nil
}

// Prepare implements JobQueue.
func (q *MemoryJobQueue) Prepare(ctx context.Context, accountID, id string, prepared PreparedResult) error {
	return q.withJob(ctx, accountID, id, func(j *memoryJob, _ time.Time) { j.Prepared = &prepared })
}

// Work implements JobQueue.
func (q *MemoryJobQueue) Work(ctx context.Context, concurrency int, worker JobWorker) (func(drain context.Context) error, error) {
	if concurrency < 1 {
		return nil, fmt.Errorf("work on %d jobs at once: want at least 1", concurrency)
	}
	if worker.Run == nil || worker.Settle == nil {
		return nil, errors.New("work: the JobWorker needs both Run and Settle")
	}
	work := func(runCtx context.Context, t taken) {
		if t.settle != nil {
			q.finish(t.job, worker.Settle(runCtx, t.Job, t.settle), runCtx)
			return
		}
		q.finish(t.job, worker.Run(runCtx, t.Job), runCtx)
	}
	cutShort := func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		for _, j := range q.jobs {
			if j.stop != nil && !j.canceled {
				j.stop(errWorkerStopped)
			}
		}
	}
	return workers.Start(concurrency, q.take, work, cutShort), nil
}

// taken is a job a worker took, as it stood then, and why it is to be
// settled, if it is.
type taken struct {
	Job
	job    *memoryJob
	settle error
}

// take waits for the oldest unexpired queued job, or one to settle, and
// marks it running, with the context its run or settlement gets; false
// once stopping is closed.
func (q *MemoryJobQueue) take(stopping <-chan struct{}) (t taken, runCtx context.Context, ok bool) {
	ok = workers.WaitToTake(stopping, q.wake, func() bool {
		now := q.lock()
		defer q.mu.Unlock()
		for l := range q.queued {
			for len(q.queued[l]) > 0 {
				j := q.jobs[q.queued[l][0]]
				q.queued[l] = q.queued[l][1:]
				if j == nil || (j.Status != JobQueued && j.settle == nil) || j.stop != nil || !now.Before(j.Expires) {
					continue
				}
				deadlined, release := context.WithTimeout(context.Background(), q.runTimeout)
				var cancel context.CancelCauseFunc
				runCtx, cancel = context.WithCancelCause(deadlined)
				j.stop = func(cause error) { cancel(cause); release() }
				if j.settle == nil {
					j.Status, j.Started, j.canceled = JobRunning, now, false
				}
				t = taken{Job: j.Job, job: j, settle: j.settle}
				q.signal() // another worker may take the next
				return true
			}
		}
		return false
	})
	return t, runCtx, ok
}

// finish ends a run or a settlement as JobQueue.Work says: a Result
// always stands (the unit was charged); a run asked to cancel, or the
// settlement of a canceled job, ends it canceled, or, if it asked to
// Retry, has it settled again a while later (running meanwhile if that
// settlement delivers a stored result); then a Problem ends the job
// failed; a run the queue stopped goes back to the front of the queue,
// and one that asked to Retry waits a while to run again.
func (q *MemoryJobQueue) finish(j *memoryJob, outcome JobOutcome, runCtx context.Context) {
	now := q.lock()
	defer q.mu.Unlock()
	stopped, overran := runCtx.Err() != nil, errors.Is(runCtx.Err(), context.DeadlineExceeded)
	j.stop(nil)
	j.stop = nil
	settled := j.settle
	if j.canceled {
		settled = ErrJobCanceled
	}
	j.canceled, j.settle = false, nil
	if overran && settled == nil && outcome.Result == nil && outcome.Problem == nil && !outcome.Retry {
		if j.overruns++; j.overruns >= MaxJobAttempts {
			settled, outcome = ErrJobGivenUp, JobOutcome{Retry: true} // settled later, by Settle
		}
	}
	switch {
	case outcome.Result != nil:
		j.Status, j.Result, j.Engine = JobSucceeded, outcome.Result, outcome.Engine
	case settled != nil && outcome.Retry:
		j.Status, j.Problem = JobCanceled, nil
		if settled == ErrJobGivenUp {
			j.Status, j.Problem = JobFailed, GivenUpProblem()
		}
		if j.Prepared.Delivers(now) {
			j.Status = JobRunning
		}
		q.settleLater(j, settled, retryDelay)
		j.Finished = cmp.Or(j.Finished, now)
		return
	case settled == ErrJobGivenUp:
		j.Status, j.Problem = JobFailed, cmp.Or(outcome.Problem, GivenUpProblem())
	case settled != nil:
		j.Status = JobCanceled
	case outcome.Problem != nil:
		j.Status, j.Problem = JobFailed, outcome.Problem
	case outcome.Retry || overran:
		j.Status = JobQueued
		time.AfterFunc(retryDelay, func() {
			q.mu.Lock()
			defer q.mu.Unlock()
			if j.Status == JobQueued {
				q.enqueue(j)
			}
		})
		return
	case stopped:
		j.Status = JobQueued
		l := level(j.Priority)
		q.queued[l] = slices.Insert(q.queued[l], 0, j.ID)
		q.signal()
		return
	default:
		j.Status, j.Problem = JobFailed, RunnerProblem()
	}
	j.Finished, j.Prepared = cmp.Or(j.Finished, now), nil
}

// settleLater has a worker settle the job j, canceled or given up, after
// delay (JobWorker.Settle, why settle: ErrJobCanceled or ErrJobGivenUp),
// ahead of every queued job. The caller holds q.mu.
func (q *MemoryJobQueue) settleLater(j *memoryJob, settle error, delay time.Duration) {
	j.settle = settle
	time.AfterFunc(delay, func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		q.queued[0] = slices.Insert(q.queued[0], 0, j.ID)
		q.signal()
	})
}

// retryDelay is how long a run that asked to Retry waits to run again.
const retryDelay = time.Second

// errWorkerStopped is the cause of a run's context done by Work's stop.
var errWorkerStopped = errors.New("worker stopped")
