package riverqueue_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "modernc.org/sqlite"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/accounts"
	"github.com/upscalekit/upscale/internal/testservers"
	"github.com/upscalekit/upscale/riverqueue"
	"github.com/upscalekit/upscale/upscaletest"
)

func TestMain(m *testing.M) { testservers.Main(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// sqliteQueue is a migrated Queue on a new SQLite file.
func sqliteQueue(t *testing.T, clock *upscaletest.Clock) upscale.JobQueue {
	return sqliteQueueWith(t, riverqueue.Options{Now: clock.Now, Logger: quiet, SettleInterval: 200 * time.Millisecond})
}

// postgresQueue is a migrated Queue on a new PostgreSQL database.
func postgresQueue(t *testing.T, clock *upscaletest.Clock) upscale.JobQueue {
	return postgresQueueWith(t, riverqueue.Options{Now: clock.Now, Logger: quiet, SettleInterval: 200 * time.Millisecond})
}

func sqliteQueueWith(t *testing.T, opts riverqueue.Options) *riverqueue.Queue[*sql.Tx] {
	q, _ := sqliteDatabase(t, opts)
	return q
}

func postgresQueueWith(t *testing.T, opts riverqueue.Options) *riverqueue.Queue[pgx.Tx] {
	q, _ := postgresDatabase(t, opts)
	return q
}

// sqliteDatabase is a migrated Queue on a new SQLite file, and the file.
func sqliteDatabase(t *testing.T, opts riverqueue.Options) (*riverqueue.Queue[*sql.Tx], *sql.DB) {
	return sqliteFile(t, filepath.Join(t.TempDir(), "jobs.db"), opts)
}

// sqliteFile is a migrated Queue on the SQLite file, and the database.
func sqliteFile(t *testing.T, file string, opts riverqueue.Options) (*riverqueue.Queue[*sql.Tx], *sql.DB) {
	db, err := sql.Open("sqlite", "file:"+file+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	upscaletest.Opened(t, db, err)
	db.SetMaxOpenConns(1)
	q, err := riverqueue.NewSQLite(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return q, db
}

// postgresDatabase is a migrated Queue on a new PostgreSQL database, and
// a pool on the database.
func postgresDatabase(t *testing.T, opts riverqueue.Options) (*riverqueue.Queue[pgx.Tx], *pgxpool.Pool) {
	return postgresOn(t, testservers.PostgresDatabase(t), opts)
}

// postgresOn is a migrated Queue on the PostgreSQL database, and a pool on
// it.
func postgresOn(t *testing.T, database string, opts riverqueue.Options) (*riverqueue.Queue[pgx.Tx], *pgxpool.Pool) {
	pool, err := pgxpool.New(context.Background(), database)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	q, err := riverqueue.NewPostgres(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return q, pool
}

func TestConformance(t *testing.T) {
	t.Run("SQLite", func(t *testing.T) { upscaletest.TestJobQueue(t, sqliteQueue) })
	t.Run("PostgreSQL", func(t *testing.T) { upscaletest.TestJobQueue(t, postgresQueue) })
}

// TestLiveness runs the processes of the conformance suite as Queues of
// their own on one database, SQLite's file or PostgreSQL's, with
// RunTimeout an hour: only their beats can hand a dead one's runs back.
func TestLiveness(t *testing.T) {
	options := func(id string, lapse time.Duration) riverqueue.Options {
		return riverqueue.Options{Logger: quiet, ProcessID: id, Lapse: lapse, RunTimeout: time.Hour, PollInterval: 50 * time.Millisecond}
	}
	t.Run("SQLite", func(t *testing.T) {
		upscaletest.TestJobQueueLiveness(t, func(t *testing.T, lapse time.Duration) upscaletest.OpenProcess {
			file := filepath.Join(t.TempDir(), "jobs.db")
			return func(id string) (upscale.JobQueue, func()) {
				q, _ := sqliteFile(t, file, options(id, lapse))
				return q, func() { riverqueue.Crash(q) }
			}
		})
	})
	t.Run("PostgreSQL", func(t *testing.T) {
		upscaletest.TestJobQueueLiveness(t, func(t *testing.T, lapse time.Duration) upscaletest.OpenProcess {
			database := testservers.PostgresDatabase(t)
			return func(id string) (upscale.JobQueue, func()) {
				q, _ := postgresOn(t, database, options(id, lapse))
				return q, func() { riverqueue.Crash(q) }
			}
		})
	})
}

// TestProcessIDInUse: a second live process under one ID is refused, and
// the first keeps working.
func TestProcessIDInUse(t *testing.T) {
	ctx := context.Background()
	opts := riverqueue.Options{Logger: quiet, ProcessID: "twin", Lapse: 6 * time.Second}
	database := testservers.PostgresDatabase(t)
	first, _ := postgresOn(t, database, opts)
	idle := func(context.Context, upscale.Job) upscale.JobOutcome { return upscale.JobOutcome{} }
	stop, err := first.Work(ctx, 1, upscaletest.Runner(idle))
	if err != nil {
		t.Fatal(err)
	}
	defer stop(ctx)
	second, _ := postgresOn(t, database, opts)
	if stop, err := second.Work(ctx, 1, upscaletest.Runner(idle)); !errors.Is(err, riverqueue.ErrProcessIDInUse) {
		if err == nil {
			stop(ctx)
		}
		t.Fatalf("a second process under the first's ID: Work = %v, want ErrProcessIDInUse", err)
	}
}

// TestDisplacedProcessStops: a process paused while a twin took its
// process ID finds the twin when it resumes, and stops for good: its
// River client stops by itself, before its host's stop, so it takes no
// job the twin's queue holds (it used to take each only to snooze it, ten
// a second), and its stop reports ErrProcessIDInUse, for its host to
// exit.
func TestDisplacedProcessStops(t *testing.T) {
	t.Run("SQLite", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "jobs.db")
		testDisplacedProcessStops(t, func(opts riverqueue.Options) *riverqueue.Queue[*sql.Tx] {
			q, _ := sqliteFile(t, file, opts)
			return q
		})
	})
	t.Run("PostgreSQL", func(t *testing.T) {
		database := testservers.PostgresDatabase(t)
		testDisplacedProcessStops(t, func(opts riverqueue.Options) *riverqueue.Queue[pgx.Tx] {
			q, _ := postgresOn(t, database, opts)
			return q
		})
	})
}

// testDisplacedProcessStops runs TestDisplacedProcessStops on the
// processes open opens on one database.
func testDisplacedProcessStops[TTx any](t *testing.T, open func(riverqueue.Options) *riverqueue.Queue[TTx]) {
	ctx := context.Background()
	opts := riverqueue.Options{Logger: quiet, ProcessID: "twin", Lapse: 3 * time.Second, RunTimeout: time.Hour, PollInterval: 50 * time.Millisecond}
	var firstRuns, twinRuns atomic.Int64
	// worker counts every run it is given, stopped or not; a stopped one
	// is queued again, as the handler's is.
	worker := func(runs *atomic.Int64) upscale.JobWorker {
		return upscaletest.Runner(func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
			runs.Add(1)
			select {
			case <-ctx.Done():
				return upscale.JobOutcome{}
			case <-time.After(50 * time.Millisecond): // the engine's work
				return upscale.JobOutcome{Result: &upscale.Response{URL: "https://results.example/" + j.ID}}
			}
		})
	}
	submit := func(q upscale.JobQueue) string {
		t.Helper()
		now := time.Now()
		job, err := q.Submit(ctx, upscale.Job{AccountID: "a", Source: "s", Reservation: "r", Created: now, Expires: now.Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		return job.ID
	}

	first := open(opts)
	stopFirst, err := first.Work(ctx, 2, worker(&firstRuns))
	if err != nil {
		t.Fatal(err)
	}
	defer stopFirst(ctx)
	if j := waitEnded(t, first, submit(first)); j.Status != upscale.JobSucceeded {
		t.Fatalf("the first process's job: %s, want succeeded", j.Status)
	}
	resume := riverqueue.Pause(first)
	twin := open(opts)
	// The paused process's beat stands still, so the twin takes its row.
	stopTwin, err := twin.Work(ctx, 1, worker(&twinRuns))
	if err != nil {
		t.Fatalf("a twin of a paused process: Work = %v; want it to take the process ID", err)
	}
	defer stopTwin(ctx)
	resume()
	select {
	case <-first.Displaced():
	default:
		t.Fatal("the resumed process beat, its ID held by a live twin, and is not displaced")
	}
	// Its River client stops by itself, not by its stop, called later: a
	// client fetching on would take the twin's jobs and snooze them
	// unrun, which counting runs does not see.
	clients := riverqueue.Working(first)
	if len(clients) == 0 {
		t.Fatal("the displaced process has no River client to stop; want Work's")
	}
	for _, stopped := range clients {
		select {
		case <-stopped:
		case <-time.After(10 * time.Second):
			t.Fatal("the displaced process's River client still runs 10 s after it found its twin")
		}
	}

	const jobs = 5
	for range jobs {
		id := submit(twin)
		if j := waitEnded(t, twin, id); j.Status != upscale.JobSucceeded {
			t.Fatalf("a job after the twin took over: %s, want succeeded", j.Status)
		}
		row, err := riverqueue.JobRow(ctx, twin, riverID(t, id))
		if err != nil {
			t.Fatal(err)
		}
		var meta struct {
			Snoozes int `json:"snoozes"`
		}
		if err := json.Unmarshal(row.Metadata, &meta); err != nil {
			t.Fatal(err)
		}
		// Both processes' clients are "twin/upscale": one attempt, the
		// twin's run of it, is all that tells them apart.
		if meta.Snoozes != 0 || len(row.AttemptedBy) != 1 {
			t.Errorf("job %s: snoozed %d times, attempted by %v; want taken once, the twin's run, never snoozed", id, meta.Snoozes, row.AttemptedBy)
		}
	}
	if runs := firstRuns.Load() - 1; runs != 0 {
		t.Errorf("the displaced process was given %d runs after it resumed; want none", runs)
	}
	if runs := twinRuns.Load(); runs != jobs {
		t.Errorf("the twin ran %d times for %d jobs; want each once", runs, jobs)
	}
	if err := stopFirst(ctx); !errors.Is(err, riverqueue.ErrProcessIDInUse) {
		t.Errorf("the displaced process's stop: %v; want ErrProcessIDInUse", err)
	}
	if stop, err := first.Work(ctx, 1, worker(&firstRuns)); !errors.Is(err, riverqueue.ErrProcessIDInUse) {
		if err == nil {
			stop(ctx)
		}
		t.Errorf("Work again on the displaced process's Queue: %v; want ErrProcessIDInUse", err)
	}
	if err := stopTwin(ctx); err != nil {
		t.Errorf("the twin's stop: %v", err)
	}
}

// TestLongProcessID: an ID past River's limit for a client's (a host
// name and a deep -data directory) still works, shortened.
func TestLongProcessID(t *testing.T) {
	ctx := context.Background()
	q, _ := postgresDatabase(t, riverqueue.Options{Logger: quiet, ProcessID: "host.example.com:" + strings.Repeat("/a-deep-directory", 10)})
	stop, err := q.Work(ctx, 1, upscaletest.Runner(func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
		return upscale.JobOutcome{Result: &upscale.Response{URL: "https://results.example/" + j.ID}}
	}))
	if err != nil {
		t.Fatalf("Work with a %d-byte process ID: %v", len("host.example.com:")+170, err)
	}
	defer stop(ctx)
	now := time.Now()
	job, err := q.Submit(ctx, upscale.Job{AccountID: "a", Source: "s", Reservation: "r", Created: now, Expires: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if j := waitEnded(t, q, job.ID); j.Status != upscale.JobSucceeded {
		t.Errorf("the job: %s, want succeeded", j.Status)
	}
}

// TestForgottenProcessStopsItsRuns: a process that finds its beat gone
// (others judged it dead and handed its runs back) stops what it runs,
// which runs again.
func TestForgottenProcessStopsItsRuns(t *testing.T) {
	ctx := context.Background()
	q, pool := postgresDatabase(t, riverqueue.Options{Logger: quiet, ProcessID: "forgotten", Lapse: 3 * time.Second, RunTimeout: time.Hour})
	var mu sync.Mutex
	var causes []error
	stop, err := q.Work(ctx, 1, upscaletest.Runner(func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
		mu.Lock()
		first := len(causes) == 0
		causes = append(causes, nil)
		mu.Unlock()
		if !first {
			return upscale.JobOutcome{Result: &upscale.Response{URL: "https://results.example/" + j.ID}}
		}
		<-ctx.Done()
		mu.Lock()
		causes[0] = context.Cause(ctx)
		mu.Unlock()
		return upscale.JobOutcome{}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer stop(ctx)
	now := time.Now()
	job, err := q.Submit(ctx, upscale.Job{AccountID: "a", Source: "s", Reservation: "r", Created: now, Expires: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if j, err := q.Get(ctx, "a", job.ID); err == nil && j.Status == upscale.JobRunning {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the job is not running: %+v, %v", j, err)
		}
	}
	if _, err := pool.Exec(ctx, `DELETE FROM upscale_queue_process WHERE id = 'forgotten'`); err != nil {
		t.Fatal(err)
	}
	if j := waitEnded(t, q, job.ID); j.Status != upscale.JobSucceeded {
		t.Fatalf("the job: %s, want succeeded", j.Status)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(causes) != 2 || causes[0] == nil || !strings.Contains(causes[0].Error(), "lapsed") {
		t.Errorf("runs ended by %v; want the first stopped because its beat lapsed, then a second", causes)
	}
}

// TestSilentProcessStopsItsRuns: a process that cannot beat (its table
// gone, as a database out of reach would leave it) stops its runs within
// half a lapse, before others may hand them over.
func TestSilentProcessStopsItsRuns(t *testing.T) {
	ctx := context.Background()
	const lapse = 4 * time.Second // the runs stop at half of it: room for a busy machine's beat
	q, pool := postgresDatabase(t, riverqueue.Options{Logger: quiet, ProcessID: "silent", Lapse: lapse, RunTimeout: time.Hour})
	started, stopped := make(chan struct{}), make(chan error, 1)
	stop, err := q.Work(ctx, 1, upscaletest.Runner(func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
		close(started)
		<-ctx.Done()
		stopped <- context.Cause(ctx)
		return upscale.JobOutcome{}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer stop(ctx)
	now := time.Now()
	if _, err := q.Submit(ctx, upscale.Job{AccountID: "a", Source: "s", Reservation: "r", Created: now, Expires: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	<-started
	if _, err := pool.Exec(ctx, `DROP TABLE upscale_queue_process`); err != nil {
		t.Fatal(err)
	}
	dropped := time.Now()
	select {
	case cause := <-stopped:
		if !strings.Contains(fmt.Sprint(cause), "lapsed") || time.Since(dropped) > lapse {
			t.Errorf("the run stopped %v after the beats failed, cause %v; want within the %v lapse, because it lapsed", time.Since(dropped), cause, lapse)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the run of a process that cannot beat was not stopped")
	}
}

// waitEnded polls account a's job id until it has ended, for 30 s at most.
func waitEnded(t *testing.T, q upscale.JobQueue, id string) upscale.Job {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		j, err := q.Get(context.Background(), "a", id)
		if err != nil {
			t.Fatal(err)
		}
		if j.Status.Done() {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still %s after 30 s", id, j.Status)
		}
	}
}

func TestWebhookConformance(t *testing.T) {
	options := func(clock *upscaletest.Clock, backoff func(int) time.Duration) riverqueue.Options {
		return riverqueue.Options{Now: clock.Now, Logger: quiet, WebhookBackoff: backoff}
	}
	t.Run("SQLite", func(t *testing.T) {
		upscaletest.TestWebhookQueue(t, func(t *testing.T, clock *upscaletest.Clock, backoff func(int) time.Duration) upscale.WebhookQueue {
			return sqliteQueueWith(t, options(clock, backoff))
		})
	})
	t.Run("PostgreSQL", func(t *testing.T) {
		upscaletest.TestWebhookQueue(t, func(t *testing.T, clock *upscaletest.Clock, backoff func(int) time.Duration) upscale.WebhookQueue {
			return postgresQueueWith(t, options(clock, backoff))
		})
	})
}

// TestPing checks the readiness probe's answers: nil while the database
// answers, ErrUnavailable once it does not.
func TestPing(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// open returns a Queue on a new database, and closes the database.
		open func(t *testing.T) (q upscale.Pinger, closeDatabase func(), err error)
	}{
		{"SQLite", func(t *testing.T) (upscale.Pinger, func(), error) {
			db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "jobs.db"))
			if err != nil {
				return nil, nil, err
			}
			q, err := riverqueue.NewSQLite(db, riverqueue.Options{Logger: quiet})
			return q, func() { db.Close() }, err
		}},
		{"PostgreSQL", func(t *testing.T) (upscale.Pinger, func(), error) {
			pool, err := pgxpool.New(ctx, testservers.PostgresDatabase(t))
			if err != nil {
				return nil, nil, err
			}
			q, err := riverqueue.NewPostgres(pool, riverqueue.Options{Logger: quiet})
			return q, pool.Close, err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, closeDatabase, err := tc.open(t)
			if err != nil {
				t.Fatal(err)
			}
			if err := q.Ping(ctx); err != nil {
				t.Fatalf("Ping with the database open: %v", err)
			}
			closeDatabase()
			if err := q.Ping(ctx); !errors.Is(err, upscale.ErrUnavailable) {
				t.Fatalf("Ping with the database closed: %v, want ErrUnavailable", err)
			}
		})
	}
}

// TestRescueByEitherClient: a job left running by a worker that died is
// given back by whichever client River elected to rescue it, though that
// client works the other queue. A client that did not know the job's
// kind would discard it.
func TestRescueByEitherClient(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	job := upscale.Job{
		AccountID: "acme", Params: upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone},
		Source: "s.source", Reservation: "r", Pool: upscale.PoolFree, Created: now, Expires: now.Add(time.Hour),
	}
	hook := upscale.Webhook{ID: "msg_1", AccountID: "acme", URL: "https://hooks.example/", Payload: []byte(`{}`), Expires: now.Add(time.Hour)}
	for _, tc := range []struct {
		kind string
		// leave puts one job of kind in the queue; rescuer starts the
		// only client, which works the other queue.
		leave   func(q *riverqueue.Queue[pgx.Tx]) error
		rescuer func(q *riverqueue.Queue[pgx.Tx]) (func(context.Context) error, error)
	}{
		{"upscale",
			func(q *riverqueue.Queue[pgx.Tx]) error { _, err := q.Submit(ctx, job); return err },
			func(q *riverqueue.Queue[pgx.Tx]) (func(context.Context) error, error) {
				return q.Deliver(ctx, 1, func(context.Context, upscale.Webhook) error { return nil })
			}},
		{"upscale_webhook",
			func(q *riverqueue.Queue[pgx.Tx]) error { return q.Enqueue(ctx, hook) },
			func(q *riverqueue.Queue[pgx.Tx]) (func(context.Context) error, error) {
				return q.Work(ctx, 1, upscaletest.Runner(func(context.Context, upscale.Job) upscale.JobOutcome { return upscale.JobOutcome{} }))
			}},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			database := testservers.PostgresDatabase(t)
			pool, err := pgxpool.New(ctx, database)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			q, err := riverqueue.NewPostgres(pool, riverqueue.Options{Logger: quiet, RunTimeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if err := q.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			if err := tc.leave(q); err != nil {
				t.Fatal(err)
			}
			// As River leaves the job of a worker that died mid-run.
			if _, err := pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now() - interval '1 hour', attempted_by = '{dead}' WHERE kind = $1`, tc.kind); err != nil {
				t.Fatal(err)
			}
			stop, err := tc.rescuer(q)
			if err != nil {
				t.Fatal(err)
			}
			defer stop(ctx)
			state := ""
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				if err := pool.QueryRow(ctx, `SELECT state FROM river_job WHERE kind = $1`, tc.kind).Scan(&state); err != nil {
					t.Fatal(err)
				}
				if state != "running" {
					break
				}
			}
			if state != "retryable" && state != "available" {
				t.Errorf("the dead worker's %s job is %s; want it given back (retryable or available)", tc.kind, state)
			}
		})
	}
}

// riverID is the River ID in a job's ID, "job_<River's ID>_<tag>".
func riverID(t *testing.T, id string) int64 {
	t.Helper()
	number, _, _ := strings.Cut(strings.TrimPrefix(id, "job_"), "_")
	n, err := strconv.ParseInt(number, 10, 64)
	if err != nil {
		t.Fatalf("job ID %q: %v", id, err)
	}
	return n
}

// database is a migrated Queue with the database under it, for tests that
// put River's rows in the states its own processes leave them in.
type database struct {
	name string
	// queue returns the Queue, and a function that runs a statement on
	// its database and returns the first column of its first row, if any.
	queue func(t *testing.T, opts riverqueue.Options) (upscale.JobQueue, func(query string, args ...any) (int64, error))
	// leftRunning is the statement that leaves job $1 running since an
	// hour ago, its attempt $2, as River does when its worker dies.
	leftRunning string
}

var databases = []database{
	{"SQLite", func(t *testing.T, opts riverqueue.Options) (upscale.JobQueue, func(string, ...any) (int64, error)) {
		q, db := sqliteDatabase(t, opts)
		return q, func(query string, args ...any) (n int64, err error) {
			if err = db.QueryRow(query, args...).Scan(&n); errors.Is(err, sql.ErrNoRows) {
				err = nil
			}
			return n, err
		}
	}, `UPDATE river_job SET state = 'running', attempt = $2, attempted_at = datetime('now', '-1 hour'), attempted_by = json('["dead"]') WHERE id = $1`},
	{"PostgreSQL", func(t *testing.T, opts riverqueue.Options) (upscale.JobQueue, func(string, ...any) (int64, error)) {
		q, pool := postgresDatabase(t, opts)
		return q, func(query string, args ...any) (n int64, err error) {
			if err = pool.QueryRow(context.Background(), query, args...).Scan(&n); errors.Is(err, pgx.ErrNoRows) {
				err = nil
			}
			return n, err
		}
	}, `UPDATE river_job SET state = 'running', attempt = $2, attempted_at = now() - interval '1 hour', attempted_by = '{dead}' WHERE id = $1`},
}

// TestSettlesWhatDeadWorkersLeft: a job canceled while its worker was
// dead, and a job whose worker died on its last attempt, are ended by
// River's rescuer without a run; each is run once more, its context done
// with the cause ErrJobCanceled or ErrJobGivenUp, to settle it, and ends
// as that run says.
func TestSettlesWhatDeadWorkersLeft(t *testing.T) {
	ctx := context.Background()
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			q, exec := d.queue(t, riverqueue.Options{Logger: quiet, RunTimeout: time.Second, SettleInterval: 100 * time.Millisecond})
			now := time.Now()
			job := func(name string) upscale.Job {
				return upscale.Job{
					AccountID: "acme", Params: upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone},
					Source: name, Reservation: "r-" + name, Pool: upscale.PoolFree, Created: now, Expires: now.Add(time.Hour),
				}
			}
			canceled, err := q.Submit(ctx, job("canceled"))
			if err != nil {
				t.Fatal(err)
			}
			givenUp, err := q.Submit(ctx, job("given-up"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := exec(d.leftRunning, riverID(t, canceled.ID), 1); err != nil {
				t.Fatal(err)
			}
			if _, err := exec(d.leftRunning, riverID(t, givenUp.ID), upscale.MaxJobAttempts); err != nil {
				t.Fatal(err)
			}
			if got, err := q.Cancel(ctx, "acme", canceled.ID); err != nil || got.Status != upscale.JobRunning {
				t.Fatalf("Cancel of a job whose worker is dead = %+v, %v; want it running, its cancel asked", got, err)
			}
			var settled settlements
			worker := upscaletest.Runner(func(context.Context, upscale.Job) upscale.JobOutcome { return upscale.JobOutcome{} })
			worker.Settle = settled.settle
			stop, err := q.Work(ctx, 1, worker)
			if err != nil {
				t.Fatal(err)
			}
			defer stop(ctx)
			for _, tc := range []struct {
				id    string
				want  upscale.JobStatus
				cause error
			}{{canceled.ID, upscale.JobCanceled, upscale.ErrJobCanceled}, {givenUp.ID, upscale.JobFailed, upscale.ErrJobGivenUp}} {
				got, causes := awaitSettled(t, q, tc.id, 1, settled.of)
				if got.Status != tc.want || len(causes) != 1 || !errors.Is(causes[0], tc.cause) {
					t.Errorf("%s: %s, settlements why %v; want %s, settled once, why %v", got.Source, got.Status, causes, tc.want, tc.cause)
				}
				if tc.want == upscale.JobFailed && (got.Problem == nil || got.Problem.Code != "upstream_error") {
					t.Errorf("%s: problem %+v, want the given-up problem", got.Source, got.Problem)
				}
			}
		})
	}
}

// settlements is a JobWorker's Settle: it records why each settlement
// was asked by the job's Source, and ends a job given up with its
// problem, a canceled one with none.
type settlements struct {
	mu     sync.Mutex
	causes map[string][]error
}

func (s *settlements) settle(ctx context.Context, j upscale.Job, why error) upscale.JobOutcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.causes == nil {
		s.causes = map[string][]error{}
	}
	s.causes[j.Source] = append(s.causes[j.Source], why)
	if errors.Is(why, upscale.ErrJobGivenUp) {
		return upscale.JobOutcome{Problem: upscale.GivenUpProblem()}
	}
	return upscale.JobOutcome{}
}

// of returns why the job source was settled, each time.
func (s *settlements) of(source string) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.causes[source]
}

// awaitSettled waits up to 30 s for acme's job id to end after at least
// settles settlements of it (as settledBy says of its Source), and a
// sweep or two more, and returns it with why each was.
func awaitSettled(t *testing.T, q upscale.JobQueue, id string, settles int, settledBy func(source string) []error) (upscale.Job, []error) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		got, err := q.Get(context.Background(), "acme", id)
		if err != nil {
			t.Fatal(err)
		}
		if (got.Status.Done() && len(settledBy(got.Source)) >= settles) || time.Now().After(deadline) {
			time.Sleep(300 * time.Millisecond) // a sweep or two more
			return got, settledBy(got.Source)
		}
	}
}

// TestRetriesAreNoAttempts: a run that asks to Retry, and one its
// worker's stop cuts short, are not counted among the job's attempts,
// which bound only runs that did not end.
func TestRetriesAreNoAttempts(t *testing.T) {
	ctx := context.Background()
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			q, query := d.queue(t, riverqueue.Options{Logger: quiet})
			now := time.Now()
			submitted, err := q.Submit(ctx, upscale.Job{AccountID: "acme", Source: "s", Reservation: "r", Created: now, Expires: now.Add(time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			retried, cutShort := make(chan struct{}), make(chan struct{})
			stop, err := q.Work(ctx, 1, upscaletest.Runner(func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
				select {
				case <-retried: // the second run, cut short
					close(cutShort)
					<-ctx.Done()
					return upscale.JobOutcome{}
				default:
					close(retried)
					return upscale.JobOutcome{Retry: true}
				}
			}))
			if err != nil {
				t.Fatal(err)
			}
			<-cutShort
			drain, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			if err := stop(drain); err != nil {
				t.Fatal(err)
			}
			stop, err = q.Work(ctx, 1, upscaletest.Runner(func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
				return upscale.JobOutcome{Result: &upscale.Response{URL: "https://results.example/r", Via: upscale.PoolFree}}
			}))
			if err != nil {
				t.Fatal(err)
			}
			defer stop(ctx)
			var got upscale.Job
			for deadline := time.Now().Add(30 * time.Second); !got.Status.Done() && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				if got, err = q.Get(ctx, "acme", submitted.ID); err != nil {
					t.Fatal(err)
				}
			}
			attempts, err := query(`SELECT attempt FROM river_job WHERE id = $1`, riverID(t, submitted.ID))
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != upscale.JobSucceeded || attempts != 1 {
				t.Errorf("after a Retry, a run cut short and one that succeeded: %s, %d attempts counted; want succeeded, 1", got.Status, attempts)
			}
		})
	}
}

// TestLastAttempt: on a job's last attempt, a run that overran RunTimeout
// ends the job given up, settled once, why ErrJobGivenUp;
// one canceled ends the job canceled, not given up.
func TestLastAttempt(t *testing.T) {
	ctx := context.Background()
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			q, exec := d.queue(t, riverqueue.Options{Logger: quiet, RunTimeout: 300 * time.Millisecond, SettleInterval: 100 * time.Millisecond})
			now := time.Now()
			ids := map[string]string{}
			for _, name := range []string{"overran", "canceled"} {
				j, err := q.Submit(ctx, upscale.Job{AccountID: "acme", Source: name, Reservation: "r-" + name, Created: now, Expires: now.Add(time.Hour)})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := exec(`UPDATE river_job SET attempt = $2 WHERE id = $1`, riverID(t, j.ID), upscale.MaxJobAttempts-1); err != nil {
					t.Fatal(err)
				}
				ids[name] = j.ID
			}
			var settled settlements
			started := make(chan string, 2)
			stop, err := q.Work(ctx, 2, upscale.JobWorker{Run: func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
				started <- j.Source
				<-ctx.Done() // overran, or canceled
				return upscale.JobOutcome{}
			}, Settle: settled.settle})
			if err != nil {
				t.Fatal(err)
			}
			defer stop(ctx)
			for range 2 {
				if name := <-started; name == "canceled" {
					if _, err := q.Cancel(ctx, "acme", ids[name]); err != nil {
						t.Fatal(err)
					}
				}
			}
			for _, tc := range []struct {
				name    string
				want    upscale.JobStatus
				settled int
			}{{"overran", upscale.JobFailed, 1}, {"canceled", upscale.JobCanceled, 0}} {
				got, causes := awaitSettled(t, q, ids[tc.name], tc.settled, settled.of)
				if got.Status != tc.want || len(causes) != tc.settled {
					t.Errorf("%s: %s, settlements why %v; want %s, settled by %d", tc.name, got.Status, causes, tc.want, tc.settled)
				}
				if tc.want == upscale.JobFailed && (got.Problem == nil || got.Problem.Code != "upstream_error") {
					t.Errorf("%s: problem %+v, want the given-up problem", tc.name, got.Problem)
				}
			}
		})
	}
}

// TestCanceledWithAStoredResult: a job River canceled while its dead
// worker's run had stored its result (maybe charged) reads as running,
// not canceled, until its settlement delivers the result.
func TestCanceledWithAStoredResult(t *testing.T) {
	ctx := context.Background()
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			q, exec := d.queue(t, riverqueue.Options{Logger: quiet, SettleInterval: 100 * time.Millisecond})
			now := time.Now()
			j, err := q.Submit(ctx, upscale.Job{AccountID: "acme", Source: "s", Reservation: "r", Created: now, Expires: now.Add(time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			stored := &upscale.Response{URL: "https://results.example/r", Via: upscale.PoolFree}
			if err := q.Prepare(ctx, "acme", j.ID, upscale.PreparedResult{Key: "r", Result: stored, Engine: "learned", LinkExpires: now.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
			if _, err := exec(d.leftRunning, riverID(t, j.ID), 1); err != nil {
				t.Fatal(err)
			}
			// What River's rescuer does with a job canceled while its
			// worker is dead.
			if _, err := exec(`UPDATE river_job SET state = 'cancelled', finalized_at = attempted_at WHERE id = $1`, riverID(t, j.ID)); err != nil {
				t.Fatal(err)
			}
			if got, err := q.Get(ctx, "acme", j.ID); err != nil || got.Status != upscale.JobRunning {
				t.Fatalf("before its settlement: %+v, %v; want running", got, err)
			}
			deliver := func(ctx context.Context, j upscale.Job, _ error) upscale.JobOutcome {
				if j.Prepared.Delivers(time.Now()) {
					return upscale.JobOutcome{Result: j.Prepared.Result, Engine: j.Prepared.Engine}
				}
				return upscale.JobOutcome{}
			}
			stop, err := q.Work(ctx, 1, upscale.JobWorker{Run: func(ctx context.Context, j upscale.Job) upscale.JobOutcome { return deliver(ctx, j, nil) }, Settle: deliver})
			if err != nil {
				t.Fatal(err)
			}
			defer stop(ctx)
			got, _ := awaitSettled(t, q, j.ID, 0, func(string) []error { return nil })
			if got.Status != upscale.JobSucceeded || got.Result == nil || got.Result.URL != stored.URL || got.Engine != "learned" {
				t.Errorf("after its settlement: %+v, want succeeded with the stored result", got)
			}
		})
	}
}

// mailQueue is a Queue as an outbox of the dashboard's mail.
type mailQueue interface {
	accounts.Outbox
	SendMail(ctx context.Context, concurrency int, mailer accounts.Mailer) (func(context.Context) error, error)
}

// flakyMailer fails each address's first attempt as unavailable, refuses
// the addresses that begin with "refused" for good, and counts attempts.
type flakyMailer struct {
	mu       sync.Mutex
	attempts map[string]int
	sent     map[string]accounts.Mail
}

func (m *flakyMailer) Send(_ context.Context, mail accounts.Mail) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.attempts[mail.To]++
	switch {
	case strings.HasPrefix(mail.To, "refused"):
		return errors.New("550 no such mailbox")
	case m.attempts[mail.To] == 1:
		return fmt.Errorf("%w: 421 try again later", upscale.ErrUnavailable)
	}
	m.sent[mail.To] = mail
	return nil
}

func (m *flakyMailer) state(to string) (attempts int, sent bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, sent = m.sent[to]
	return m.attempts[to], sent
}

// TestMailOutbox: a posted mail is sent by whichever process sends mail,
// tried again while the server is unavailable; a mail refused for good is
// not tried again, and one that expired, by the queue's clock, is not
// sent.
func TestMailOutbox(t *testing.T) {
	ctx := context.Background()
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			ahead := func() time.Time { return time.Now().Add(10 * time.Minute) }
			q, _ := d.queue(t, riverqueue.Options{Logger: quiet, Now: ahead})
			outbox := q.(mailQueue)
			mailer := &flakyMailer{attempts: map[string]int{}, sent: map[string]accounts.Mail{}}
			for to, expires := range map[string]time.Time{
				"retried@example.com":          time.Now().Add(time.Hour),
				"refused@example.com":          time.Now().Add(time.Hour),
				"expired@example.com":          time.Now().Add(-time.Second),
				"expired-by-clock@example.com": time.Now().Add(5 * time.Minute),
			} {
				if err := outbox.Post(ctx, accounts.Mail{To: to, Subject: "Sign in", Text: "link", HTML: "<p>link</p>"}, expires); err != nil {
					t.Fatal(err)
				}
			}
			stop, err := outbox.SendMail(ctx, 2, mailer)
			if err != nil {
				t.Fatal(err)
			}
			defer stop(ctx)
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				if _, sent := mailer.state("retried@example.com"); sent {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the mail the server first refused for now was not sent again")
				}
			}
			time.Sleep(3 * time.Second) // past the first retry's wait
			if attempts, _ := mailer.state("refused@example.com"); attempts != 1 {
				t.Errorf("a mail refused for good: %d attempts, want 1", attempts)
			}
			for _, to := range []string{"expired@example.com", "expired-by-clock@example.com"} {
				if attempts, _ := mailer.state(to); attempts != 0 {
					t.Errorf("%s, expired: %d attempts, want none", to, attempts)
				}
			}
		})
	}
}
