// Package riverqueue is an upscale.JobQueue on River
// (github.com/riverqueue/river), a job queue in the database: on SQLite
// (the standalone's file, one machine) or PostgreSQL (replicas and worker
// processes sharing one database). River brings what a queue of our own
// would have to grow: runs given back when their worker dies (rescued
// after RunTimeout), retries with backoff, cancellation across processes,
// and the cleaning of old jobs; its operator UI (riverqueue.com/riverui)
// reads the same tables.
//
// A job is one River job of kind "upscale" in the queue "upscale". Its ID
// is "job_<River's ID>_<26 random letters and digits>": River's ID finds
// the row, and the random part, kept in the job's arguments, is what a
// caller must know besides a key. The run's outcome is the job's recorded
// output (river.RecordOutput): a result, or the problem of a failed job.
package riverqueue

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	"github.com/upscalekit/upscale"
)

// Options configures a Queue. Every zero field means the default beside
// it.
type Options struct {
	// RunTimeout bounds one run of a job: past it River cancels the run
	// and gives the job back, and a run whose worker died is given back
	// this long after it started (plus a minute). Zero means 10 minutes,
	// far above a run's work (the handler's EngineTimeout and
	// SettleTimeout).
	RunTimeout time.Duration
	// Retention is how long River keeps ended jobs: the handler's JobTTL.
	// Zero means 24 hours.
	Retention time.Duration
	// PollInterval is how often a worker looks for new jobs where the
	// database cannot notify it (SQLite). Zero means 200 ms.
	PollInterval time.Duration
	// Logger receives River's own log. Nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock jobs and webhooks expire by. Nil means time.Now.
	Now func() time.Time
	// WebhookBackoff is the wait after a failed webhook delivery, by the
	// number of attempts so far. Nil means upscale.WebhookBackoff.
	WebhookBackoff func(attempt int) time.Duration
}

// Queue is an upscale.JobQueue on River. TTx is the driver's transaction
// type.
type Queue[TTx any] struct {
	driver riverdriver.Driver[TTx]
	opts   Options
	client *river.Client[TTx] // inserts, reads and cancels; works no job
}

var (
	_ upscale.JobQueue     = (*Queue[*sql.Tx])(nil)
	_ upscale.JobQueue     = (*Queue[pgx.Tx])(nil)
	_ upscale.WebhookQueue = (*Queue[*sql.Tx])(nil)
	_ upscale.WebhookQueue = (*Queue[pgx.Tx])(nil)
	_ upscale.JobCounter   = (*Queue[*sql.Tx])(nil)
	_ upscale.JobCounter   = (*Queue[pgx.Tx])(nil)
	_ upscale.Pinger       = (*Queue[*sql.Tx])(nil)
	_ upscale.Pinger       = (*Queue[pgx.Tx])(nil)
)

// NewSQLite returns a Queue on a SQLite database, which River needs opened
// with one connection at most (db.SetMaxOpenConns(1)): SQLite takes one
// writer at a time.
func NewSQLite(db *sql.DB, opts Options) (*Queue[*sql.Tx], error) {
	return newQueue(riversqlite.New(db), opts)
}

// NewPostgres returns a Queue on a PostgreSQL database.
func NewPostgres(pool *pgxpool.Pool, opts Options) (*Queue[pgx.Tx], error) {
	return newQueue(riverpgxv5.New(pool), opts)
}

func newQueue[TTx any](driver riverdriver.Driver[TTx], opts Options) (*Queue[TTx], error) {
	if opts.RunTimeout == 0 {
		opts.RunTimeout = 10 * time.Minute
	}
	if opts.Retention == 0 {
		opts.Retention = 24 * time.Hour
	}
	if opts.PollInterval == 0 {
		opts.PollInterval = 200 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.WebhookBackoff == nil {
		opts.WebhookBackoff = upscale.WebhookBackoff
	}
	q := &Queue[TTx]{driver: driver, opts: opts}
	client, err := river.NewClient(driver, q.config(nil, "", 0))
	if err != nil {
		return nil, fmt.Errorf("riverqueue: %w", err)
	}
	q.client = client
	return q, nil
}

// Migrate brings River's tables in the database up to this version's.
func (q *Queue[TTx]) Migrate(ctx context.Context) error {
	migrator, err := rivermigrate.New(q.driver, &rivermigrate.Config{Logger: q.opts.Logger})
	if err != nil {
		return fmt.Errorf("riverqueue: %w", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("riverqueue: migrate: %w", err)
	}
	return nil
}

// The River queues of upscale jobs and of their webhooks.
const (
	queueName        = "upscale"
	webhookQueueName = "upscale_webhooks"
)

// config is River's configuration for a client: one that works
// concurrency jobs of queue with workers, or, without them, one that only
// inserts, reads and cancels.
func (q *Queue[TTx]) config(workers *river.Workers, queue string, concurrency int) *river.Config {
	cfg := &river.Config{
		CancelledJobRetentionPeriod: q.opts.Retention,
		CompletedJobRetentionPeriod: q.opts.Retention,
		DiscardedJobRetentionPeriod: q.opts.Retention,
		FetchPollInterval:           q.opts.PollInterval,
		// River fetches at most once per cooldown, and every poll and
		// every insert's notification starts one, so a slot freed within
		// a cooldown waits out the rest of it for its next job. With
		// River's 100 ms, workers of half-second learned jobs were idle
		// 11% of the time with jobs waiting; with 10 ms, 1% (make
		// loadtest, jobs).
		FetchCooldown:        min(q.opts.PollInterval, 10*time.Millisecond),
		JobTimeout:           q.opts.RunTimeout,
		RescueStuckJobsAfter: q.opts.RunTimeout + time.Minute,
		RetryPolicy:          retryPolicy{},
		Logger:               q.opts.Logger,
	}
	if workers != nil {
		cfg.Workers = workers
		cfg.Queues = map[string]river.QueueConfig{queue: {MaxWorkers: concurrency}}
	}
	return cfg
}

// retryPolicy runs a job given back again a second later, then after
// twice as long each time, a minute at the most: a store out of reach for
// an hour delays its jobs by a minute once it is back.
type retryPolicy struct{}

func (retryPolicy) NextRetry(job *rivertype.JobRow) time.Time {
	wait := time.Second << min(max(job.Attempt-1, 0), 6)
	return time.Now().Add(min(wait, time.Minute))
}

// maxAttempts is how often River runs a job before giving up on it: in
// effect never, since the job expires first (JobTTL, the retry policy's
// minute apart at most).
const maxAttempts = 10_000

// jobArgs is an upscale job as River keeps it.
type jobArgs struct {
	Tag         string         `json:"tag"` // the random part of the job's ID
	AccountID   string         `json:"accountId" river:"unique"`
	Submission  string         `json:"submission,omitempty" river:"unique"`
	Params      upscale.Params `json:"params"`
	Source      string         `json:"source"`
	Reservation string         `json:"reservation"`
	Pool        upscale.Pool   `json:"pool"`
	Webhook     string         `json:"webhook,omitempty"`
	Created     time.Time      `json:"created"`
	Expires     time.Time      `json:"expires"`
}

func (jobArgs) Kind() string { return "upscale" }

// output is what a run records: the result, or the problem; or, while
// it runs, the result it prepared before charging.
type output struct {
	Result        *upscale.Response `json:"result,omitempty"`
	Problem       *upscale.Problem  `json:"problem,omitempty"`
	Prepared      *upscale.Response `json:"prepared,omitempty"`
	PreparedUntil time.Time         `json:"preparedUntil,omitzero"`
}

// Submit implements upscale.JobQueue.
func (q *Queue[TTx]) Submit(ctx context.Context, job upscale.Job) (upscale.Job, error) {
	args := jobArgs{
		Tag: strings.ToLower(rand.Text()), AccountID: job.AccountID, Submission: job.Submission, Params: job.Params,
		Source: job.Source, Reservation: job.Reservation, Pool: job.Pool, Webhook: job.Webhook, Created: job.Created, Expires: job.Expires,
	}
	opts := &river.InsertOpts{Queue: queueName, MaxAttempts: maxAttempts}
	if job.Submission != "" {
		// River's unique jobs: one job per account and Submission in
		// every state, until the job is cleaned away after Retention.
		opts.UniqueOpts = river.UniqueOpts{ByArgs: true, ByState: rivertype.JobStates()}
	}
	res, err := q.client.Insert(ctx, args, opts)
	if err != nil {
		return upscale.Job{}, classify(ctx, fmt.Errorf("riverqueue: insert: %w", err))
	}
	kept, err := q.job(res.Job)
	if err != nil || !res.UniqueSkippedAsDuplicate || q.opts.Now().Before(kept.Expires) || kept.Status == upscale.JobRunning {
		return kept, err
	}
	// The Submission's job expired, and is forgotten as Get forgets it;
	// River only cleans it away later.
	if _, err := q.client.JobDelete(ctx, res.Job.ID); err != nil && !errors.Is(err, rivertype.ErrNotFound) {
		return upscale.Job{}, classify(ctx, fmt.Errorf("riverqueue: delete the expired job %q: %w", kept.ID, err))
	}
	return q.Submit(ctx, job)
}

// jobID formats a job's ID.
func jobID(riverID int64, tag string) string {
	return "job_" + strconv.FormatInt(riverID, 10) + "_" + tag
}

// row reads accountID's job id: ErrNotFound for an ID that does not
// parse, a job that does not exist, of another kind, tag or account, or
// expired.
func (q *Queue[TTx]) row(ctx context.Context, accountID, id string, read func(context.Context, int64) (*rivertype.JobRow, error)) (*rivertype.JobRow, upscale.Job, error) {
	notFound := fmt.Errorf("riverqueue: job %q: %w", id, upscale.ErrNotFound)
	number, tag, ok := strings.Cut(strings.TrimPrefix(id, "job_"), "_")
	riverID, err := strconv.ParseInt(number, 10, 64)
	if !ok || err != nil || !strings.HasPrefix(id, "job_") {
		return nil, upscale.Job{}, notFound
	}
	row, err := read(ctx, riverID)
	if errors.Is(err, rivertype.ErrNotFound) {
		return nil, upscale.Job{}, notFound
	}
	if err != nil {
		return nil, upscale.Job{}, classify(ctx, fmt.Errorf("riverqueue: job %q: %w", id, err))
	}
	job, err := q.job(row)
	if err != nil || row.Kind != (jobArgs{}).Kind() || job.ID != jobID(riverID, tag) || job.AccountID != accountID || !q.opts.Now().Before(job.Expires) {
		return nil, upscale.Job{}, notFound
	}
	return row, job, nil
}

// Get implements upscale.JobQueue.
func (q *Queue[TTx]) Get(ctx context.Context, accountID, id string) (upscale.Job, error) {
	_, job, err := q.row(ctx, accountID, id, q.client.JobGet)
	return job, err
}

// Cancel implements upscale.JobQueue. River cancels a queued job at once,
// and a running one's run through its context, in whichever process it
// runs (within two seconds where the database cannot notify, SQLite).
func (q *Queue[TTx]) Cancel(ctx context.Context, accountID, id string) (upscale.Job, error) {
	row, job, err := q.row(ctx, accountID, id, q.client.JobGet)
	if err != nil || job.Status.Done() {
		return job, err
	}
	if row, err = q.client.JobCancel(ctx, row.ID); err != nil {
		return upscale.Job{}, classify(ctx, fmt.Errorf("riverqueue: cancel job %q: %w", id, err))
	}
	return q.job(row)
}

// CountJobs implements upscale.JobCounter: the queue's available and
// running jobs (a job waiting out a retry's backoff is neither).
func (q *Queue[TTx]) CountJobs(ctx context.Context) (queued, running int, err error) {
	counts, err := q.driver.GetExecutor().JobCountByQueueAndState(ctx, &riverdriver.JobCountByQueueAndStateParams{QueueNames: []string{queueName}})
	if err != nil {
		return 0, 0, classify(ctx, fmt.Errorf("riverqueue: count jobs: %w", err))
	}
	for _, c := range counts {
		queued, running = queued+int(c.CountAvailable), running+int(c.CountRunning)
	}
	return queued, running, nil
}

// Ping implements upscale.Pinger: the queue's database answers.
func (q *Queue[TTx]) Ping(ctx context.Context) error {
	if err := q.driver.GetExecutor().Ping(ctx); err != nil {
		return classify(ctx, fmt.Errorf("riverqueue: ping: %w", err))
	}
	return nil
}

// Prepare implements upscale.JobQueue: the job's output, written now.
func (q *Queue[TTx]) Prepare(ctx context.Context, accountID, id string, result upscale.Response, linkExpires time.Time) error {
	row, _, err := q.row(ctx, accountID, id, q.client.JobGet)
	if err != nil {
		return err
	}
	if _, err := q.client.JobUpdate(ctx, row.ID, &river.JobUpdateParams{Output: output{Prepared: &result, PreparedUntil: linkExpires}}); err != nil {
		return classify(ctx, fmt.Errorf("riverqueue: prepare job %q: %w", id, err))
	}
	return nil
}

// job is the upscale job a River row holds.
func (q *Queue[TTx]) job(row *rivertype.JobRow) (upscale.Job, error) {
	var args jobArgs
	if err := json.Unmarshal(row.EncodedArgs, &args); err != nil {
		return upscale.Job{}, fmt.Errorf("riverqueue: job %d's arguments: %w", row.ID, err)
	}
	job := upscale.Job{
		ID: jobID(row.ID, args.Tag), AccountID: args.AccountID, Params: args.Params, Source: args.Source,
		Reservation: args.Reservation, Pool: args.Pool, Webhook: args.Webhook, Created: args.Created, Expires: args.Expires,
		Status: upscale.JobQueued,
	}
	if row.AttemptedAt != nil {
		job.Started = *row.AttemptedAt
	}
	if row.FinalizedAt != nil {
		job.Finished = *row.FinalizedAt
	}
	var out output
	if raw := row.Output(); raw != nil {
		if err := json.Unmarshal(raw, &out); err != nil {
			return upscale.Job{}, fmt.Errorf("riverqueue: job %d's output: %w", row.ID, err)
		}
	}
	switch row.State {
	case rivertype.JobStateRunning:
		job.Status = upscale.JobRunning
	case rivertype.JobStateCancelled:
		job.Status = upscale.JobCanceled
		if row.Attempt == 0 {
			job.Started = time.Time{}
		}
	case rivertype.JobStateCompleted, rivertype.JobStateDiscarded:
		job.Status, job.Result = upscale.JobSucceeded, out.Result
		if out.Result == nil {
			job.Status, job.Problem = upscale.JobFailed, cmp.Or(out.Problem, upscale.RunnerProblem())
		}
	}
	if !job.Status.Done() {
		job.Prepared, job.PreparedUntil = out.Prepared, out.PreparedUntil
	}
	return job, nil
}

// classify marks as ErrUnavailable the failures of a database that could
// not be reached in time; an error after ctx ended is the caller's.
func classify(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return err
	}
	return fmt.Errorf("%w: %w", upscale.ErrUnavailable, err)
}

// Work implements upscale.JobQueue: a River client of its own, with
// concurrency workers on the queue "upscale".
func (q *Queue[TTx]) Work(ctx context.Context, concurrency int, run upscale.JobRunner) (func(drain context.Context) error, error) {
	return q.work(ctx, run, nil, queueName, concurrency)
}

// work starts a River client that works queue, at most concurrency jobs
// at once, with run for the upscale jobs or deliver for the webhooks, and
// returns its stop: it waits for the runs until drain is done, then
// cancels the rest, which River gives back.
//
// The client knows both kinds of job whichever queue it works: River
// elects one client of all those on the database to rescue the jobs of
// workers that died, and that client discards a job of a kind it does
// not know. The kind it does not work is never run there, as its queue is
// not in the client's Queues.
func (q *Queue[TTx]) work(ctx context.Context, run upscale.JobRunner, deliver func(context.Context, upscale.Webhook) error, queue string, concurrency int) (func(drain context.Context) error, error) {
	if concurrency < 1 {
		return nil, fmt.Errorf("riverqueue: work on %d jobs at once: want at least 1", concurrency)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &worker{job: q.job, now: q.opts.Now, run: run})
	river.AddWorker(workers, &webhookWorker{now: q.opts.Now, backoff: q.opts.WebhookBackoff, deliver: deliver})
	client, err := river.NewClient(q.driver, q.config(workers, queue, concurrency))
	if err != nil {
		return nil, fmt.Errorf("riverqueue: %w", err)
	}
	if err := client.Start(ctx); err != nil {
		return nil, fmt.Errorf("riverqueue: start the workers: %w", err)
	}
	var once sync.Once
	var stopErr error
	return func(drain context.Context) error {
		once.Do(func() {
			if err := client.Stop(drain); err != nil && drain.Err() == nil {
				stopErr = err
				return
			}
			if drain.Err() != nil {
				cancelled, cancel := context.WithTimeout(context.WithoutCancel(drain), time.Minute)
				defer cancel()
				stopErr = client.StopAndCancel(cancelled)
			}
		})
		return stopErr
	}, nil
}

// worker runs upscale jobs for River.
type worker struct {
	river.WorkerDefaults[jobArgs]
	job func(*rivertype.JobRow) (upscale.Job, error)
	now func() time.Time
	run upscale.JobRunner
}

// errExpired cancels a job a worker takes past its expiry: it never runs.
var errExpired = errors.New("riverqueue: the job expired before it ran")

// errRetry gives a job back to River, to run again by its retry policy.
var errRetry = errors.New("riverqueue: the run asked to run the job again later")

// Work runs one job: a run ended by the job's cancellation is given the
// cause upscale.ErrJobCanceled; its outcome is recorded as the job's
// output (a Result always stands), its cancellation ends the job
// cancelled, and a Retry or a run cut short (its worker stopped, River's
// timeout) is an error, which gives the job back.
func (w *worker) Work(ctx context.Context, rj *river.Job[jobArgs]) error {
	job, err := w.job(rj.JobRow)
	if err != nil {
		return river.JobCancel(err)
	}
	if !w.now().Before(job.Expires) {
		return river.JobCancel(errExpired)
	}
	job.Status = upscale.JobRunning
	runCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	stop := context.AfterFunc(ctx, func() {
		cause := context.Cause(ctx)
		if errors.Is(cause, rivertype.ErrJobCancelledRemotely) {
			cause = upscale.ErrJobCanceled
		}
		cancel(cause)
	})
	defer stop()
	outcome := w.run(runCtx, job)
	canceled := errors.Is(context.Cause(runCtx), upscale.ErrJobCanceled)
	switch {
	case outcome.Result != nil:
		return river.RecordOutput(ctx, output{Result: outcome.Result})
	case canceled:
		return river.JobCancel(upscale.ErrJobCanceled)
	case runCtx.Err() != nil:
		return context.Cause(runCtx)
	case outcome.Retry:
		return errRetry
	}
	return river.RecordOutput(ctx, output{Problem: cmp.Or(outcome.Problem, upscale.RunnerProblem())})
}

// webhookArgs is a webhook as River keeps it: a job of kind
// "upscale_webhook" in the queue "upscale_webhooks", unique by ID.
type webhookArgs struct {
	ID        string    `json:"id" river:"unique"`
	AccountID string    `json:"accountId"`
	URL       string    `json:"url"`
	Payload   []byte    `json:"payload"`
	Expires   time.Time `json:"expires"`
}

func (webhookArgs) Kind() string { return "upscale_webhook" }

// Enqueue implements upscale.WebhookQueue.
func (q *Queue[TTx]) Enqueue(ctx context.Context, w upscale.Webhook) error {
	args := webhookArgs{ID: w.ID, AccountID: w.AccountID, URL: w.URL, Payload: w.Payload, Expires: w.Expires}
	_, err := q.client.Insert(ctx, args, &river.InsertOpts{
		Queue: webhookQueueName, MaxAttempts: maxAttempts,
		UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: rivertype.JobStates()},
	})
	if err != nil {
		return classify(ctx, fmt.Errorf("riverqueue: insert webhook %s: %w", w.ID, err))
	}
	return nil
}

// Deliver implements upscale.WebhookQueue: a River client of its own,
// with concurrency workers on the queue "upscale_webhooks".
func (q *Queue[TTx]) Deliver(ctx context.Context, concurrency int, deliver func(context.Context, upscale.Webhook) error) (func(drain context.Context) error, error) {
	return q.work(ctx, nil, deliver, webhookQueueName, concurrency)
}

// webhookWorker delivers webhooks for River: an attempt that fails is an
// error, which River retries after the backoff, until the webhook expires.
type webhookWorker struct {
	river.WorkerDefaults[webhookArgs]
	now     func() time.Time
	backoff func(attempt int) time.Duration
	deliver func(context.Context, upscale.Webhook) error
}

func (w *webhookWorker) Work(ctx context.Context, rj *river.Job[webhookArgs]) error {
	a := rj.Args
	if !w.now().Before(a.Expires) {
		return river.JobCancel(errWebhookExpired)
	}
	return w.deliver(ctx, upscale.Webhook{ID: a.ID, AccountID: a.AccountID, URL: a.URL, Payload: a.Payload, Expires: a.Expires})
}

func (w *webhookWorker) NextRetry(rj *river.Job[webhookArgs]) time.Time {
	return time.Now().Add(w.backoff(rj.Attempt))
}

// errWebhookExpired cancels a webhook whose delivery was given up.
var errWebhookExpired = errors.New("riverqueue: the webhook expired before it was delivered")
