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

// Job is one request of the job form (Prefer: respond-async): what was
// asked and who pays for it, where its source waits, and how it ended.
type Job struct {
	ID        string `json:"id"`
	AccountID string `json:"-"`
	Params    Params `json:"-"`
	// Source is the key under which the source's bytes wait in the
	// BlobStore (a BlobReader) until Expires.
	Source string `json:"-"`
	// Reservation holds the unit that pays for the job, from Pool, until
	// Expires at the most (ReservationHolder).
	Reservation string `json:"-"`
	Pool        Pool   `json:"-"`
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
	// Result is a succeeded job's answer, the synchronous request's body;
	// Problem a failed job's, the problem the synchronous request would
	// have answered.
	Result  *Response `json:"result,omitempty"`
	Problem *Problem  `json:"problem,omitempty"`
	// Prepared is the result a run recorded (JobQueue.Prepare) before it
	// charged the job's unit, while the job has not ended; its link works
	// until PreparedUntil.
	Prepared      *Response `json:"-"`
	PreparedUntil time.Time `json:"-"`
}

// JobOutcome is how a worker's run of a job ended: its answer, the
// problem it failed with, or that it should be run again later. A run
// that ends because its context was done (the job was canceled, or its
// worker stopped) has none of them.
type JobOutcome struct {
	Result  *Response
	Problem *Problem
	// Retry asks for the job to be run again after a while: the run
	// failed in a way that waiting may cure (a store out of reach), and
	// settled nothing.
	Retry bool
}

// JobRunner runs one job. It is called with a context that is done when
// the job is canceled or the worker stops; it must then stop soon, and
// settle what it started (the job's unit and any stored result).
type JobRunner func(ctx context.Context, job Job) JobOutcome

// JobQueue keeps the jobs of the job form from their submission until
// they expire, and hands them to workers, each to one worker at a time.
// MemoryJobQueue is the default, for one process; upscaletest.TestJobQueue
// holds every implementation to this contract. Every method returns an
// error wrapping ErrUnavailable when the queue's server cannot be reached.
type JobQueue interface {
	// Submit adds job, queued, for a worker to run before job.Expires,
	// and returns it as kept: with the ID the queue gave it (an ID it was
	// given is replaced) and its Status queued. An ID is unguessable: it
	// is all that stands between a job and a caller who only has a key.
	//
	// When the queue keeps a job of job.AccountID with job.Submission set
	// and the same, Submit adds nothing and returns that job, as it
	// stands: its Reservation and Source, not job's, are the ones in use.
	// Of concurrent Submits of one Submission, exactly one adds its job.
	Submit(ctx context.Context, job Job) (Job, error)
	// Get returns the job id of accountID. It returns an error wrapping
	// ErrNotFound when there is no such job, it expired, or it is another
	// account's: a caller cannot tell those apart.
	Get(ctx context.Context, accountID, id string) (Job, error)
	// Cancel ends the job id of accountID if it has not ended: a queued
	// job is canceled at once and never runs (its Started stays zero); a
	// running one's JobRunner has its context done, with the cause
	// ErrJobCanceled, and the job ends as Work says when the run returns. A job that has ended stays as it
	// ended. It returns the job as it stands once asked. ErrNotFound as
	// Get.
	Cancel(ctx context.Context, accountID, id string) (Job, error)
	// Prepare records result, whose link works until linkExpires, as the
	// answer of the run of job id under way, before the run charges the
	// job's unit: a later run of the job (its worker died, the charge's
	// outcome unknown) finds it in Job.Prepared, settles the charge
	// (committing again charges nothing more) and delivers it, instead of
	// enlarging the image again and leaving this result behind.
	// ErrNotFound as Get.
	Prepare(ctx context.Context, accountID, id string, result Response, linkExpires time.Time) error
	// Work starts running the queue's jobs with run, at most concurrency
	// at once, and returns the function that stops it: that stops taking
	// jobs, lets the running ones finish until drain is done, then has
	// the rest's contexts done and gives them back to be run again, by
	// this process or another, and returns once no run is left.
	//
	// A run's outcome ends its job: succeeded with a Result, whatever else
	// happened (its unit was charged); canceled if Cancel was asked while
	// it ran; queued again if stop ended it, or, at least a second later,
	// if it asked to Retry; else failed with its Problem (internal_error
	// if it returned none). A job whose worker dies
	// mid-run is run again, so run must be safe to repeat: it charges one
	// unit for a job however often it runs.
	Work(ctx context.Context, concurrency int, run JobRunner) (stop func(drain context.Context) error, err error)
}

// JobCounter is a JobQueue that can say how many of its jobs wait and
// run, for the queue-depth gauges (Load.JobsQueued, Load.JobsRunning).
type JobCounter interface {
	// CountJobs returns how many jobs wait to run now, and how many run,
	// in every process that works the queue.
	CountJobs(ctx context.Context) (queued, running int, err error)
}

// RunnerProblem is the Problem a JobQueue gives a job whose run returned
// neither a Result nor a Problem, nor asked to Retry, with its context not
// done: a JobRunner's own failure, internal_error.
func RunnerProblem() *Problem {
	p := problemFor(errors.New("the job's run returned no outcome"))
	return &p
}
