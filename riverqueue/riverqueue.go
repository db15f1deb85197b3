// Package riverqueue is an upscale.JobQueue on River
// (github.com/riverqueue/river), a job queue in the database: on SQLite
// (the standalone's file, one machine) or PostgreSQL (replicas and worker
// processes sharing one database). River brings what a queue of our own
// would have to grow: retries with backoff, cancellation across processes,
// and the cleaning of old jobs; its operator UI (riverqueue.com/riverui)
// reads the same tables. Runs whose process died are handed back by the
// processes' beats (liveness.go), within Lapse, not after River's run
// timeout.
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
	"github.com/upscalekit/upscale/dashboard"
	"github.com/upscalekit/upscale/internal/periodic"
)

// Options configures a Queue. Every zero field means the default beside
// it.
type Options struct {
	// RunTimeout bounds one run of a job: past it River cancels the run
	// and gives the job back. A job's engine has what is left of it less
	// the handler's SettleTimeout. Zero means upscale.DefaultRunTimeout.
	// It must be above the handler's EngineTimeout and SettleTimeout
	// together: a run waiting its turn for the engine gives it up in time
	// only then (else its wait may overrun, which counts as an attempt).
	// A dead process's runs are handed back by Lapse, not by it; River's
	// own rescuer, a minute after it, is left for the runs of clients
	// that do not beat.
	RunTimeout time.Duration
	// ProcessID names this process among those that work the queue's
	// database: River records it with each run (as "<ProcessID>/upscale").
	// Keep it the same across the process's restarts, so that a process
	// restarted after a crash hands back at once the runs it had; two
	// processes alive at once must not share it (Work refuses to start,
	// ErrProcessIDInUse, while another beats under it). One longer than
	// 64 bytes is shortened to its start and a digest. Empty means a
	// random ID: a restarted process's runs are then handed back after
	// Lapse, as any dead process's.
	ProcessID string
	// Lapse is how long a working process may go without beating before
	// the other working processes hand its runs back, to run again. It
	// beats every Lapse/6, and stops its own job runs once it has not
	// beaten for half of Lapse. Zero means 30 seconds.
	Lapse time.Duration
	// Retention is how long River keeps ended jobs: the handler's JobTTL.
	// Zero means 24 hours.
	Retention time.Duration
	// PollInterval is how often a worker looks for new jobs where the
	// database cannot notify it (SQLite). Zero means 200 ms.
	PollInterval time.Duration
	// Logger receives River's own log. Nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock jobs, webhooks and mail expire by. Nil means
	// time.Now. River's own schedule (when a run is tried again) and the
	// processes' beats keep the wall clock, as River and the database do.
	Now func() time.Time
	// WebhookBackoff is the wait after a failed webhook delivery, by the
	// number of attempts so far. Nil means upscale.WebhookBackoff.
	WebhookBackoff func(attempt int) time.Duration
	// SettleInterval is how often a process that works the queue looks
	// for jobs River ended without a run to settle them (see Work). Zero
	// means 30 seconds.
	SettleInterval time.Duration
}

// Queue is an upscale.JobQueue on River. TTx is the driver's transaction
// type.
type Queue[TTx any] struct {
	driver riverdriver.Driver[TTx]
	opts   Options
	client *river.Client[TTx] // inserts, reads and cancels; works no job
	live   *liveness[TTx]
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
		opts.RunTimeout = upscale.DefaultRunTimeout
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
	if opts.SettleInterval == 0 {
		opts.SettleInterval = 30 * time.Second
	}
	if opts.Lapse == 0 {
		opts.Lapse = 30 * time.Second
	}
	if opts.ProcessID == "" {
		opts.ProcessID = "process-" + strings.ToLower(rand.Text())
	}
	q := &Queue[TTx]{driver: driver, opts: opts}
	q.live = newLiveness(q)
	client, err := river.NewClient(driver, q.config(nil, "", 0))
	if err != nil {
		return nil, fmt.Errorf("riverqueue: %w", err)
	}
	q.client = client
	return q, nil
}

// Migrate brings River's tables in the database up to this version's,
// and adds the table the working processes beat in.
func (q *Queue[TTx]) Migrate(ctx context.Context) error {
	migrator, err := rivermigrate.New(q.driver, &rivermigrate.Config{Logger: q.opts.Logger})
	if err != nil {
		return fmt.Errorf("riverqueue: %w", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("riverqueue: migrate: %w", err)
	}
	if err := q.driver.GetExecutor().Exec(ctx, processTable); err != nil {
		return fmt.Errorf("riverqueue: migrate: the processes' table: %w", err)
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
		cfg.ID = q.live.clientID(queue)
		cfg.Workers = workers
		cfg.Queues = map[string]river.QueueConfig{queue: {MaxWorkers: concurrency}}
	}
	return cfg
}

// retryPolicy runs a job whose run did not end (its worker was killed,
// or it overran RunTimeout) again a second later, then after twice as
// long each time, a minute at the most.
type retryPolicy struct{}

func (retryPolicy) NextRetry(job *rivertype.JobRow) time.Time {
	return time.Now().Add(backoff(job.Attempt - 1))
}

// backoff is a second, twice as long for each time before, a minute at
// the most.
func backoff(times int) time.Duration {
	return min(time.Second<<min(max(times, 0), 6), time.Minute)
}

// jobArgs is an upscale job as River keeps it.
type jobArgs struct {
	Tag          string         `json:"tag"` // the random part of the job's ID
	AccountID    string         `json:"accountId" river:"unique"`
	Submission   string         `json:"submission,omitempty" river:"unique"`
	Params       upscale.Params `json:"params"`
	Source       string         `json:"source"`
	SourcePixels int64          `json:"sourcePixels,omitempty"`
	Reservation  string         `json:"reservation"`
	Pool         upscale.Pool   `json:"pool"`
	Webhook      string         `json:"webhook,omitempty"`
	Created      time.Time      `json:"created"`
	Expires      time.Time      `json:"expires"`
}

func (jobArgs) Kind() string { return "upscale" }

// output is what a run records: the result and how it was made, or the
// problem; or, while the job has not ended, what its run prepared. Settled
// marks a job that ended with its settlement done (or with nothing to
// settle), which the settling sweep skips.
type output struct {
	Result   *upscale.Response `json:"result,omitempty"`
	Engine   string            `json:"engine,omitempty"`
	Problem  *upscale.Problem  `json:"problem,omitempty"`
	Prepared *prepared         `json:"prepared,omitempty"`
	Settled  bool              `json:"settled,omitempty"`
}

// prepared is an upscale.PreparedResult as River keeps it.
type prepared struct {
	Key         string            `json:"key"`
	Result      *upscale.Response `json:"result,omitempty"`
	Engine      string            `json:"engine,omitempty"`
	LinkExpires time.Time         `json:"linkExpires"`
}

// Submit implements upscale.JobQueue.
func (q *Queue[TTx]) Submit(ctx context.Context, job upscale.Job) (upscale.Job, error) {
	args := jobArgs{
		Tag: strings.ToLower(rand.Text()), AccountID: job.AccountID, Submission: job.Submission, Params: job.Params,
		Source: job.Source, SourcePixels: job.SourcePixels, Reservation: job.Reservation, Pool: job.Pool, Webhook: job.Webhook,
		Created: job.Created, Expires: job.Expires,
	}
	opts := &river.InsertOpts{Queue: queueName, MaxAttempts: upscale.MaxJobAttempts, Priority: min(max(job.Priority, 1), upscale.JobPriorities)}
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
		if err == nil {
			kept, err = q.stand(ctx, kept, res.Job.ID)
		}
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
	row, job, err := q.row(ctx, accountID, id, q.client.JobGet)
	if err != nil {
		return upscale.Job{}, err
	}
	return q.stand(ctx, job, row.ID)
}

// jobsAhead counts the available jobs River fetches before the job
// riverID: those of its queue with a lower priority, or the same and an
// earlier schedule (then a lower ID), as River's fetch orders them.
const jobsAhead = `SELECT count(*) FROM river_job j JOIN river_job me ON me.id = $1
WHERE j.queue = me.queue AND j.state = 'available' AND (j.priority < me.priority OR (j.priority = me.priority
	AND (j.scheduled_at < me.scheduled_at OR (j.scheduled_at = me.scheduled_at AND j.id < me.id))))`

// stand returns job, whose River ID is riverID, with its Position while it
// is queued.
func (q *Queue[TTx]) stand(ctx context.Context, job upscale.Job, riverID int64) (upscale.Job, error) {
	if job.Status != upscale.JobQueued {
		return job, nil
	}
	var ahead int
	if err := q.driver.GetExecutor().QueryRow(ctx, jobsAhead, riverID).Scan(&ahead); err != nil {
		return upscale.Job{}, classify(ctx, fmt.Errorf("riverqueue: job %q's position: %w", job.ID, err))
	}
	job.Position = &ahead
	return job, nil
}

// Cancel implements upscale.JobQueue. River cancels a queued job at once,
// and a running one's run through its context, in whichever process it
// runs (within two seconds where the database cannot notify, SQLite).
func (q *Queue[TTx]) Cancel(ctx context.Context, accountID, id string) (upscale.Job, error) {
	row, job, err := q.row(ctx, accountID, id, q.client.JobGet)
	if err != nil {
		return upscale.Job{}, err
	}
	if job.Status.Done() || (job.Status == upscale.JobQueued && job.Prepared.Delivers(q.opts.Now())) {
		return q.stand(ctx, job, row.ID)
	}
	if row, err = q.client.JobCancel(ctx, row.ID); err != nil {
		return upscale.Job{}, classify(ctx, fmt.Errorf("riverqueue: cancel job %q: %w", id, err))
	}
	// A job canceled while it waited is settled by its canceler and, in
	// case that failed, by the sweep too, which then changes nothing.
	return q.job(row)
}

// CountJobs implements upscale.JobCounter: the queue's available and
// running jobs (a job waiting out a retry's backoff is neither), the
// oldest available one's submission and their source pixels.
func (q *Queue[TTx]) CountJobs(ctx context.Context) (upscale.JobCounts, error) {
	exec := q.driver.GetExecutor()
	counts, err := exec.JobCountByQueueAndState(ctx, &riverdriver.JobCountByQueueAndStateParams{QueueNames: []string{queueName}})
	if err != nil {
		return upscale.JobCounts{}, classify(ctx, fmt.Errorf("riverqueue: count jobs: %w", err))
	}
	var jobs upscale.JobCounts
	for _, c := range counts {
		jobs.Queued, jobs.Running = jobs.Queued+int(c.CountAvailable), jobs.Running+int(c.CountRunning)
	}
	if jobs.Queued == 0 {
		return jobs, nil
	}
	var oldest string
	err = exec.QueryRow(ctx, `SELECT coalesce(sum(CAST(args ->> 'sourcePixels' AS BIGINT)), 0),
		coalesce((SELECT args ->> 'created' FROM river_job WHERE queue = $1 AND state = 'available' ORDER BY id LIMIT 1), '')
		FROM river_job WHERE queue = $1 AND state = 'available'`, queueName).Scan(&jobs.QueuedPixels, &oldest)
	if err != nil {
		return upscale.JobCounts{}, classify(ctx, fmt.Errorf("riverqueue: count queued work: %w", err))
	}
	jobs.OldestQueued, _ = time.Parse(time.RFC3339Nano, oldest) // zero if the job ended since
	return jobs, nil
}

// CountAccountJobs implements upscale.JobCounter.
func (q *Queue[TTx]) CountAccountJobs(ctx context.Context, accountID string) (int, error) {
	n, err := q.countAccount(ctx, jobArgs{}.Kind(), accountID)
	if err != nil {
		return 0, classify(ctx, fmt.Errorf("riverqueue: count the account's jobs: %w", err))
	}
	return n, nil
}

// countAccount counts accountID's River jobs of kind that have not ended.
func (q *Queue[TTx]) countAccount(ctx context.Context, kind, accountID string) (int, error) {
	var n int
	err := q.driver.GetExecutor().QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = $1 AND args ->> 'accountId' = $2
		AND state IN ('available', 'pending', 'retryable', 'running', 'scheduled')`, kind, accountID).Scan(&n)
	return n, err
}

// Ping implements upscale.Pinger: the queue's database answers.
func (q *Queue[TTx]) Ping(ctx context.Context) error {
	if err := q.driver.GetExecutor().Ping(ctx); err != nil {
		return classify(ctx, fmt.Errorf("riverqueue: ping: %w", err))
	}
	return nil
}

// Prepare implements upscale.JobQueue: the job's output, written now.
func (q *Queue[TTx]) Prepare(ctx context.Context, accountID, id string, p upscale.PreparedResult) error {
	row, _, err := q.row(ctx, accountID, id, q.client.JobGet)
	if err != nil {
		return err
	}
	out := output{Prepared: &prepared{Key: p.Key, Result: p.Result, Engine: p.Engine, LinkExpires: p.LinkExpires}}
	if _, err := q.client.JobUpdate(ctx, row.ID, &river.JobUpdateParams{Output: out}); err != nil {
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
		ID: jobID(row.ID, args.Tag), AccountID: args.AccountID, Params: args.Params, Source: args.Source, SourcePixels: args.SourcePixels,
		Reservation: args.Reservation, Pool: args.Pool, Priority: row.Priority, Webhook: args.Webhook, Created: args.Created, Expires: args.Expires,
		Status: upscale.JobQueued,
	}
	if row.AttemptedAt != nil {
		job.Started = *row.AttemptedAt
	}
	if row.FinalizedAt != nil {
		job.Finished = *row.FinalizedAt
	}
	out, err := outputOf(row)
	if err != nil {
		return upscale.Job{}, err
	}
	// A Result always stands, however River ended the job: its unit was
	// charged. A job River ended with a stored result and no run to
	// settle it yet is running: its settlement delivers that result.
	switch {
	case row.State == rivertype.JobStateRunning:
		job.Status = upscale.JobRunning
	case !finalized(row.State):
	case out.Result != nil:
		job.Status, job.Result, job.Engine = upscale.JobSucceeded, out.Result, out.Engine
	case !out.Settled && out.Prepared != nil && out.Prepared.Result != nil && q.opts.Now().Before(out.Prepared.LinkExpires):
		job.Status = upscale.JobRunning
	case row.State == rivertype.JobStateCancelled:
		job.Status = upscale.JobCanceled
	case row.State == rivertype.JobStateDiscarded && out.Problem == nil:
		// Given up after its attempts; its settlement records this.
		job.Status, job.Problem = upscale.JobFailed, upscale.GivenUpProblem()
	default:
		job.Status, job.Problem = upscale.JobFailed, cmp.Or(out.Problem, upscale.RunnerProblem())
	}
	if p := out.Prepared; p != nil && !out.Settled {
		job.Prepared = &upscale.PreparedResult{Key: p.Key, Result: p.Result, Engine: p.Engine, LinkExpires: p.LinkExpires}
	}
	return job, nil
}

// finalized reports whether River has ended a job in state.
func finalized(state rivertype.JobState) bool {
	return state == rivertype.JobStateCancelled || state == rivertype.JobStateCompleted || state == rivertype.JobStateDiscarded
}

// outputOf is the output a River row's run recorded, if any.
func outputOf(row *rivertype.JobRow) (output, error) {
	var out output
	if raw := row.Output(); raw != nil {
		if err := json.Unmarshal(raw, &out); err != nil {
			return output{}, fmt.Errorf("riverqueue: job %d's output: %w", row.ID, err)
		}
	}
	return out, nil
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
// concurrency workers on the queue "upscale", this process's beat, and a
// sweep, every SettleInterval, of the jobs River ended without a run to
// settle them. The run of a process that died is handed back within
// Lapse: to run again, or ended canceled, when a cancel was asked of it
// meanwhile, or discarded, after upscale.MaxJobAttempts; each ended one is
// settled (worker.Settle), and its outcome recorded. It returns an error wrapping ErrProcessIDInUse while another
// live process beats under Options.ProcessID.
func (q *Queue[TTx]) Work(ctx context.Context, concurrency int, worker upscale.JobWorker) (func(drain context.Context) error, error) {
	if worker.Run == nil || worker.Settle == nil {
		return nil, errors.New("riverqueue: Work: the JobWorker needs both Run and Settle")
	}
	stop, err := q.work(ctx, handlers{run: worker.Run}, queueName, concurrency)
	if err != nil {
		return nil, err
	}
	sweep := func() {
		if err := q.settleLeft(context.WithoutCancel(ctx), worker.Settle); err != nil {
			q.opts.Logger.Warn("riverqueue: settle the jobs River ended; tried again later", "err", err)
		}
	}
	// The first sweep runs now, beside the workers, rather than after
	// one SettleInterval; Work does not wait for it.
	first := make(chan struct{})
	go func() {
		defer close(first)
		sweep()
	}()
	sweeper := periodic.Start(q.opts.SettleInterval, sweep)
	return func(drain context.Context) error {
		sweeper.Stop()
		<-first
		return stop(drain)
	}, nil
}

// settleBatch is how many ended jobs one sweep settles at the most.
const settleBatch = 100

// settleLeft settles the jobs River ended without a run to settle them,
// oldest first, why ErrJobCanceled (cancelled) or ErrJobGivenUp
// (discarded), and records each outcome as settled. A settlement that
// asks to Retry is tried at the next sweep. Processes that sweep at once
// may settle a job twice, which the settlement allows.
func (q *Queue[TTx]) settleLeft(ctx context.Context, settle func(context.Context, upscale.Job, error) upscale.JobOutcome) error {
	list, err := q.client.JobList(ctx, river.NewJobListParams().Kinds(jobArgs{}.Kind()).
		States(rivertype.JobStateCancelled, rivertype.JobStateDiscarded).
		Where(`(metadata -> 'output' ->> 'settled') IS NULL`).First(settleBatch))
	if err != nil {
		return classify(ctx, fmt.Errorf("riverqueue: list the ended jobs: %w", err))
	}
	for _, row := range list.Jobs {
		out := output{Settled: true}
		if job, err := q.job(row); err != nil {
			// No run could read it either: nothing can be settled, and
			// its unit goes back when its hold ends.
			q.opts.Logger.Error("riverqueue: an ended job cannot be read to settle it", "river_id", row.ID, "err", err)
		} else {
			why := upscale.ErrJobCanceled
			if row.State == rivertype.JobStateDiscarded {
				why = upscale.ErrJobGivenUp
			}
			outcome := settle(ctx, job, why)
			if outcome.Retry {
				continue
			}
			out.Result, out.Engine, out.Problem = outcome.Result, outcome.Engine, outcome.Problem
		}
		if _, err := q.client.JobUpdate(ctx, row.ID, &river.JobUpdateParams{Output: out}); err != nil {
			return classify(ctx, fmt.Errorf("riverqueue: record River job %d settled: %w", row.ID, err))
		}
	}
	return nil
}

// handlers are what a River client of this package does with each kind
// of job: run the upscale jobs, deliver the webhooks, send the mail; a
// client has the one of the queue it works.
type handlers struct {
	run     func(context.Context, upscale.Job) upscale.JobOutcome
	deliver func(context.Context, upscale.Webhook) error
	send    dashboard.Mailer
}

// work starts a River client that works queue, at most concurrency jobs
// at once, with h, and returns its stop: it waits for the runs until
// drain is done, then cancels the rest, which River gives back.
//
// The client knows every kind of job whichever queue it works: River
// elects one client of all those on the database to rescue the jobs of
// workers that died, and that client discards a job of a kind it does
// not know. The kinds it does not work are never run there, as their
// queues are not in the client's Queues.
func (q *Queue[TTx]) work(ctx context.Context, h handlers, queue string, concurrency int) (func(drain context.Context) error, error) {
	if concurrency < 1 {
		return nil, fmt.Errorf("riverqueue: work on %d jobs at once: want at least 1", concurrency)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &worker{job: q.job, now: q.opts.Now, run: h.run, fence: q.live.currentFence})
	river.AddWorker(workers, &webhookWorker{
		now: q.opts.Now, backoff: q.opts.WebhookBackoff, deliver: h.deliver,
		share: upscale.WebhookAccountShare(concurrency), inFlight: map[string]int{},
	})
	river.AddWorker(workers, &mailWorker{send: h.send, now: q.opts.Now})
	client, err := river.NewClient(q.driver, q.config(workers, queue, concurrency))
	if err != nil {
		return nil, fmt.Errorf("riverqueue: %w", err)
	}
	if err := q.live.join(ctx, client); err != nil {
		return nil, err
	}
	if err := client.Start(ctx); err != nil {
		q.live.leave(ctx, client)
		return nil, fmt.Errorf("riverqueue: start the workers: %w", err)
	}
	var once sync.Once
	var stopErr error
	return func(drain context.Context) error {
		once.Do(func() {
			if err := client.Stop(drain); err != nil && drain.Err() == nil {
				stopErr = err
			} else if drain.Err() != nil {
				cancelled, cancel := context.WithTimeout(context.WithoutCancel(drain), time.Minute)
				defer cancel()
				stopErr = client.StopAndCancel(cancelled)
			}
			if stopErr == nil {
				q.live.leave(drain, client)
			} // else runs may still be under way: the process beats on for them
		})
		return stopErr
	}, nil
}

// worker runs upscale jobs for River.
type worker struct {
	river.WorkerDefaults[jobArgs]
	job func(*rivertype.JobRow) (upscale.Job, error)
	now func() time.Time
	run func(context.Context, upscale.Job) upscale.JobOutcome
	// fence is done once this process's runs may be handed over
	// (liveness).
	fence func() context.Context
}

// errExpired cancels a job a worker takes past its expiry: it never runs.
var errExpired = errors.New("riverqueue: the job expired before it ran")

// Work runs one job: a run ended by the job's cancellation is given the
// cause upscale.ErrJobCanceled, and River's deadline (RunTimeout) is the
// run's. The run's outcome is recorded as the job's output, settled: a
// Result always stands; a canceled run ends the job cancelled, and a
// Problem ends it completed, even when its worker's stop or its deadline
// ended the run (the run settled it). A Retry is snoozed, which River
// does not count as an attempt; a canceled job's Retry (its settlement
// failed) leaves it cancelled and unsettled, with what it prepared, for
// the sweep. A run that overran is an error: River runs the job again, as
// it does one whose worker died, up to upscale.MaxJobAttempts times. A run
// its worker's stop, or its process's lapse, cut short runs again at once.
func (w *worker) Work(ctx context.Context, rj *river.Job[jobArgs]) error {
	job, err := w.job(rj.JobRow)
	if err != nil {
		return river.JobCancel(err)
	}
	if !w.now().Before(job.Expires) {
		// Nothing to settle: the unit's hold and the source expire
		// with it.
		if err := river.RecordOutput(ctx, output{Settled: true}); err != nil {
			return err
		}
		return river.JobCancel(errExpired)
	}
	job.Status = upscale.JobRunning
	runCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	if deadline, ok := ctx.Deadline(); ok {
		var cancelDeadline context.CancelFunc
		runCtx, cancelDeadline = context.WithDeadline(runCtx, deadline)
		defer cancelDeadline()
	}
	stop := context.AfterFunc(ctx, func() {
		cause := context.Cause(ctx)
		if errors.Is(cause, rivertype.ErrJobCancelledRemotely) {
			cause = upscale.ErrJobCanceled
		}
		cancel(cause)
	})
	defer stop()
	fence := w.fence()
	unfence := context.AfterFunc(fence, func() { cancel(context.Cause(fence)) })
	defer unfence()
	outcome := w.run(runCtx, job)
	cause := context.Cause(runCtx)
	switch {
	case outcome.Result != nil:
		return river.RecordOutput(ctx, output{Result: outcome.Result, Engine: outcome.Engine, Settled: true})
	case errors.Is(cause, upscale.ErrJobCanceled) && outcome.Retry:
		return river.JobCancel(upscale.ErrJobCanceled)
	case errors.Is(cause, upscale.ErrJobCanceled):
		if err := river.RecordOutput(ctx, output{Settled: true}); err != nil {
			return err
		}
		return river.JobCancel(upscale.ErrJobCanceled)
	case outcome.Problem != nil:
		return river.RecordOutput(ctx, output{Problem: outcome.Problem, Settled: true})
	case outcome.Retry:
		return river.JobSnooze(backoff(snoozes(rj.JobRow)))
	case errors.Is(cause, context.DeadlineExceeded):
		return fmt.Errorf("riverqueue: the run overran RunTimeout: %w", cause)
	case runCtx.Err() != nil:
		return river.JobSnooze(0)
	}
	return river.RecordOutput(ctx, output{Problem: upscale.RunnerProblem(), Settled: true})
}

// snoozes is how often River has snoozed the job so far.
func snoozes(row *rivertype.JobRow) int {
	var meta struct {
		Snoozes int `json:"snoozes"`
	}
	json.Unmarshal(row.Metadata, &meta) // no count: none so far
	return meta.Snoozes
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

// Enqueue implements upscale.WebhookQueue. An account's webhook is
// fetched before those of accounts with more undelivered at the time (its
// River priority), so that a burst of one account's, or a receiver that
// keeps failing, is worked through behind the others'.
func (q *Queue[TTx]) Enqueue(ctx context.Context, w upscale.Webhook) error {
	waiting, err := q.countAccount(ctx, webhookArgs{}.Kind(), w.AccountID)
	if err != nil {
		return classify(ctx, fmt.Errorf("riverqueue: count the account's webhooks: %w", err))
	}
	args := webhookArgs{ID: w.ID, AccountID: w.AccountID, URL: w.URL, Payload: w.Payload, Expires: w.Expires}
	_, err = q.client.Insert(ctx, args, &river.InsertOpts{
		Queue: webhookQueueName, MaxAttempts: maxDeliveries, Priority: 1 + min(waiting/webhookShareOfQueue, upscale.JobPriorities-1),
		UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: rivertype.JobStates()},
	})
	if err != nil {
		return classify(ctx, fmt.Errorf("riverqueue: insert webhook %s: %w", w.ID, err))
	}
	return nil
}

// webhookShareOfQueue is how many undelivered webhooks of an account keep
// its next one at the first priority; each as many more lower it by one.
const webhookShareOfQueue = 4

// maxDeliveries is how often River attempts a webhook before giving up on
// it: in effect never, since the webhook expires first (WebhookTTL, the
// backoff's 6 h apart at most).
const maxDeliveries = 10_000

// Deliver implements upscale.WebhookQueue: a River client of its own,
// with concurrency workers on the queue "upscale_webhooks".
func (q *Queue[TTx]) Deliver(ctx context.Context, concurrency int, deliver func(context.Context, upscale.Webhook) error) (func(drain context.Context) error, error) {
	return q.work(ctx, handlers{deliver: deliver}, webhookQueueName, concurrency)
}

// webhookWorker delivers webhooks for River: an attempt that fails is an
// error, which River retries after the backoff, until the webhook expires;
// one the receiver answered 410 is not tried again. An account's webhooks
// take at most share of this process's deliverers at once: one beyond it
// is snoozed for a while, uncounted, and the deliverer takes another.
type webhookWorker struct {
	river.WorkerDefaults[webhookArgs]
	now     func() time.Time
	backoff func(attempt int) time.Duration
	deliver func(context.Context, upscale.Webhook) error
	share   int

	mu       sync.Mutex
	inFlight map[string]int // by account
}

// webhookTurn is how long a webhook beyond its account's share waits
// before a deliverer takes it again: about one slow attempt.
const webhookTurn = 2 * time.Second

func (w *webhookWorker) Work(ctx context.Context, rj *river.Job[webhookArgs]) error {
	a := rj.Args
	if !w.now().Before(a.Expires) {
		return river.JobCancel(errWebhookExpired)
	}
	if !w.take(a.AccountID) {
		return river.JobSnooze(webhookTurn)
	}
	defer w.leave(a.AccountID)
	err := w.deliver(ctx, upscale.Webhook{ID: a.ID, AccountID: a.AccountID, URL: a.URL, Payload: a.Payload, Expires: a.Expires})
	if errors.Is(err, upscale.ErrWebhookGone) {
		return river.JobCancel(err)
	}
	return err
}

// take counts one of accountID's deliveries under way, unless it has its
// share under way already.
func (w *webhookWorker) take(accountID string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.inFlight[accountID] >= w.share {
		return false
	}
	w.inFlight[accountID]++
	return true
}

func (w *webhookWorker) leave(accountID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.inFlight[accountID]--; w.inFlight[accountID] == 0 {
		delete(w.inFlight, accountID)
	}
}

func (w *webhookWorker) NextRetry(rj *river.Job[webhookArgs]) time.Time {
	return time.Now().Add(w.backoff(rj.Attempt))
}

// errWebhookExpired cancels a webhook whose delivery was given up.
var errWebhookExpired = errors.New("riverqueue: the webhook expired before it was delivered")
