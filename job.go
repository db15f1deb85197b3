package upscale

import (
	"context"
	"errors"
	"time"
)

// JobStatus is where a job of the job form is in its life.
type JobStatus string

// The statuses of a job: queued until a worker takes it, running while
// one works on it, then one of the three final ones.
const (
	JobQueued    JobStatus = "queued"
	JobRunning   JobStatus = "running"
	JobSucceeded JobStatus = "succeeded"
	JobFailed    JobStatus = "failed"
	JobCanceled  JobStatus = "canceled"
)

// Done reports whether s is final.
func (s JobStatus) Done() bool {
	return s == JobSucceeded || s == JobFailed || s == JobCanceled
}

// JobPriorities is how many priorities a JobQueue keeps apart, from 1,
// whose jobs start first, to JobPriorities.
const JobPriorities = 4

// Job is one request of the job form (Prefer: respond-async): what was
// asked and who pays for it, where its source waits, and how it ended.
type Job struct {
	ID        string `json:"id"`
	AccountID string `json:"-"`
	// KeyID is the key that submitted it (KeyID), "" when a signed-in
	// account did (ForAccount): the account's history shows it.
	KeyID  string `json:"-"`
	Params Params `json:"-"`
	// Source is the key under which the source's bytes wait in the
	// BlobStore (a BlobReader) until Expires; SourcePixels is its size in
	// pixels, 0 when the Upscaler could not say (a SizeReader).
	Source       string `json:"-"`
	SourcePixels int64  `json:"-"`
	// Reservation holds the unit that pays for the job, from Pool, until
	// Expires at the most (ReservationHolder).
	Reservation string `json:"-"`
	Pool        Pool   `json:"-"`
	// Priority orders the queued jobs: every job of a lower Priority
	// starts before any of a higher one, and within one Priority the
	// oldest first. It is 1 to JobPriorities; the handler sets it by how
	// many jobs the account has already (Config.JobShare).
	Priority int `json:"-"`
	// Webhook is the job's webhookUrl: where its end is posted, if
	// anywhere.
	Webhook string `json:"webhookUrl,omitempty"`
	// Submission, when set, names the request that submitted the job
	// among its account's: the caller's Idempotency-Key with what the
	// request asked for. A queue keeps one job per account and Submission.
	Submission string    `json:"-"`
	Status     JobStatus `json:"status"`
	Created    time.Time `json:"createdAt"`
	// Started is when a worker last took the job; zero while it never has.
	Started  time.Time `json:"startedAt,omitzero"`
	Finished time.Time `json:"finishedAt,omitzero"`
	// Expires is when the job, its source and its unit's hold end: a job
	// not finished by then never runs, and is forgotten with the rest.
	Expires time.Time `json:"expiresAt"`
	// Position is, while the job is queued, how many queued jobs start
	// before it (0: it is next); EstimatedStart is when it may start, at
	// the pace the handler has measured, zero when it has none.
	Position       *int      `json:"position,omitempty"`
	EstimatedStart time.Time `json:"estimatedStart,omitzero"`
	// Engine is how a succeeded job's image was enlarged: the value of
	// the Upscale-Engine header (Image.Engine).
	Engine string `json:"engine,omitempty"`
	// Result is a succeeded job's answer, the synchronous request's body;
	// Problem a failed job's, the problem the synchronous request would
	// have answered.
	Result  *Response `json:"result,omitempty"`
	Problem *Problem  `json:"problem,omitempty"`
	// Prepared is what the last run recorded of its result
	// (JobQueue.Prepare) while the job has not ended.
	Prepared *PreparedResult `json:"-"`
}

// PreparedResult is what a run records of its job's result before it
// charges the job's unit, so that whoever settles the job after the run
// died finds it: first the BlobStore key the result is about to be stored
// under, then, once it is stored, the answer that names it.
type PreparedResult struct {
	// Key is the result's key in the BlobStore, recorded before the
	// result is stored: a run that dies before it records Result leaves
	// at most this key to delete.
	Key string
	// Result is the answer, set once the result is stored; Engine is how
	// it was made, and LinkExpires when its link stops working.
	Result      *Response
	Engine      string
	LinkExpires time.Time
}

// Delivers reports whether p holds a stored result whose link still works
// at now: a run of its job delivers it rather than make another, and
// Cancel leaves the job to that run.
func (p *PreparedResult) Delivers(now time.Time) bool {
	return p != nil && p.Result != nil && now.Before(p.LinkExpires)
}

// JobOutcome is how a worker's run of a job ended: its answer, the
// problem it failed with, or that it should be run again later. A run
// that ends because its context was done (the job was canceled, or its
// worker stopped) has none of them.
type JobOutcome struct {
	Result *Response
	// Engine is how Result was made: the job's Engine.
	Engine  string
	Problem *Problem
	// Retry asks for the job to be run again after a while: the run
	// failed in a way that waiting may cure (a store out of reach, the
	// engine busy until the run's deadline), and settled nothing. A run
	// that asks to Retry is not counted among the job's attempts.
	Retry bool
}

// JobWorker is what a JobQueue's workers do with its jobs: run each, and
// settle each that ended with no run that settled it. The Handler is its
// queue's (StartJobs).
type JobWorker struct {
	// Run runs one job. Its context is done when the job is canceled
	// (the cause ErrJobCanceled) or the worker stops; it must then stop
	// soon, and settle what it started (the job's unit and any stored
	// result).
	Run func(ctx context.Context, job Job) JobOutcome
	// Settle ends a job that ended with no run that settled it: canceled
	// while no live run had it (it waited to run, or its process died),
	// or whose canceled run asked to Retry (why is ErrJobCanceled); or
	// given up after its attempts (ErrJobGivenUp). It does no other work
	// but deliver a result the job had prepared (Job.Prepared), and
	// returns the job's outcome; one that asks to Retry is called again
	// later. A job may be settled more than once: by its canceler and its
	// queue, or by two processes at once.
	Settle func(ctx context.Context, job Job, why error) JobOutcome
}

// ErrJobGivenUp is why a JobQueue asks its JobWorker to settle a job it
// gave up on: the job was started MaxJobAttempts times and no run ended
// (its worker was killed, or ran out of time, each time). The settlement
// ends the job failed, with its unit given back. It never reaches an API
// caller as such.
var ErrJobGivenUp = errors.New("job given up")

// MaxJobAttempts is how many times a JobQueue whose workers can die (a
// queue shared by processes) starts a job whose runs do not end before it
// gives the job up (ErrJobGivenUp). Runs that ended asking to Retry, and
// runs that a worker's stop gave back, are not counted.
const MaxJobAttempts = 5

// JobQueue keeps the jobs of the job form from their submission until
// they expire, and hands them to workers, each to one worker at a time.
// MemoryJobQueue is the default, for one process; upscaletest.TestJobQueue
// holds every implementation to this contract. Every method returns an
// error wrapping ErrUnavailable when the queue's server cannot be reached.
type JobQueue interface {
	// Submit adds job, queued, for a worker to run before job.Expires,
	// after the queued jobs of its Priority and lower, and returns it as
	// kept: with the ID the queue gave it (an ID it was given is
	// replaced), its Status queued and its Position. An ID is unguessable:
	// it is all that stands between a job and a caller who only has a key.
	// It begins with "job_", and holds no "/": the handler tells a job's
	// path from its own by it.
	//
	// When the queue keeps a job of job.AccountID with job.Submission set
	// and the same, Submit adds nothing and returns that job, as it
	// stands: its Reservation and Source, not job's, are the ones in use.
	// Of concurrent Submits of one Submission, exactly one adds its job.
	Submit(ctx context.Context, job Job) (Job, error)
	// Get returns the job id of accountID, with its Position while it is
	// queued. It returns an error wrapping ErrNotFound when there is no
	// such job, it expired, or it is another account's: a caller cannot
	// tell those apart.
	Get(ctx context.Context, accountID, id string) (Job, error)
	// Cancel ends the job id of accountID if it has not ended: a job
	// waiting to run, whether it never ran or waits to run again (after a
	// Retry, or a worker's stop), is canceled at once and runs no more:
	// its canceler settles it (gives its unit back, deletes its source),
	// and Work's JobWorker settles it again (Settle), which finishes what
	// the canceler could not.
	// A running one's run has its context done, with the cause
	// ErrJobCanceled, and the job ends as Work says when the run returns.
	// A job that has ended stays as it ended, and so does a waiting job
	// whose Prepared result still works: its next run delivers it. It
	// returns the job as it stands once asked. ErrNotFound as Get.
	Cancel(ctx context.Context, accountID, id string) (Job, error)
	// Prepare records prepared as what the run of job id under way made
	// of its result, replacing what it recorded before: a later run of
	// the job (its worker died, the charge's outcome unknown) finds it in
	// Job.Prepared, and delivers the result (committing again charges
	// nothing more) or deletes it, instead of leaving it behind.
	// ErrNotFound as Get.
	Prepare(ctx context.Context, accountID, id string, prepared PreparedResult) error
	// Work starts running the queue's jobs with worker.Run, at most
	// concurrency at once, and settling with worker.Settle the jobs that
	// ended without a run that settled them, and returns the function
	// that stops it: that stops taking
	// jobs, lets the running ones finish until drain is done, then has
	// the rest's contexts done and gives them back to be run again, by
	// this process or another, and returns once no run is left.
	//
	// A run's outcome ends its job: succeeded with a Result, whatever else
	// happened (its unit was charged); canceled if Cancel was asked while
	// it ran (and settled by one more run if it asked to Retry); failed
	// with its Problem, even if stop ended it (it settled the job); queued
	// again if stop ended it, or, at least a second later, if it asked to
	// Retry; else failed with internal_error. A job whose worker dies
	// mid-run is run again, so Run must be safe to repeat: it charges one
	// unit for a job however often it runs. A queue bounds one run's time
	// (its context's deadline); a job whose runs overrun it, or whose
	// workers die, runs MaxJobAttempts times at most, then is given up and
	// settled (ErrJobGivenUp).
	Work(ctx context.Context, concurrency int, worker JobWorker) (stop func(drain context.Context) error, err error)
}

// JobCounts is what a JobCounter counts of its queue's jobs.
type JobCounts struct {
	// Queued is how many jobs wait to run, Running how many run, in every
	// process that works the queue. A queue may count among Queued the
	// jobs that wait out a Retry's delay (MemoryJobQueue does; riverqueue
	// counts them once their delay is over).
	Queued, Running int
	// OldestQueued is when the queued job submitted first was submitted;
	// zero while none is queued.
	OldestQueued time.Time
	// QueuedPixels is the queued jobs' source pixels (Job.SourcePixels)
	// together: the work waiting, for an autoscaler.
	QueuedPixels int64
}

// JobCounter is a JobQueue that can count its jobs: for the queue's
// gauges (Load), and for each account's share of the workers
// (Config.JobShare). A JobQueue that is not one runs jobs oldest first
// whoever submitted them.
type JobCounter interface {
	// CountJobs counts the queue's jobs now.
	CountJobs(ctx context.Context) (JobCounts, error)
	// CountAccountJobs returns how many of accountID's jobs are queued or
	// running now.
	CountAccountJobs(ctx context.Context, accountID string) (int, error)
}

// RunnerProblem is the Problem a JobQueue gives a job whose run returned
// neither a Result nor a Problem, nor asked to Retry, with its context not
// done: the run's own failure, internal_error.
func RunnerProblem() *Problem {
	p := problemFor(errors.New("the job's run returned no outcome"))
	return &p
}

// GivenUpProblem is the Problem of a job given up after MaxJobAttempts
// (ErrJobGivenUp): 502 upstream_error, which a queue may show until the
// job's settlement records it.
func GivenUpProblem() *Problem {
	p := problemFor(Explain(ErrUpstream, msgJobGivenUp))
	return &p
}
