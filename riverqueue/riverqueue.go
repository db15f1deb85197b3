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
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
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
	// and gives the job back. A job's engine has what is left of it less
	// the handler's ChargeTimeout. Zero means upscale.DefaultRunTimeout.
	// It must be above the handler's EngineTimeout and ChargeTimeout
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

// classify marks as ErrUnavailable the failures of a database that could
// not be reached in time; an error after ctx ended is the caller's.
func classify(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return err
	}
	return fmt.Errorf("%w: %w", upscale.ErrUnavailable, err)
}
