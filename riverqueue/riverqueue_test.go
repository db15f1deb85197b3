package riverqueue_test

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "modernc.org/sqlite"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/internal/testservers"
	"github.com/upscalekit/upscale/riverqueue"
	"github.com/upscalekit/upscale/upscaletest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testservers.Stop()
	os.Exit(code)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// sqliteQueue is a migrated Queue on a new SQLite file.
func sqliteQueue(t *testing.T, clock *upscaletest.Clock) upscale.JobQueue {
	return sqliteQueueWith(t, riverqueue.Options{Now: clock.Now, Logger: quiet})
}

// postgresQueue is a migrated Queue on a new PostgreSQL database.
func postgresQueue(t *testing.T, clock *upscaletest.Clock) upscale.JobQueue {
	return postgresQueueWith(t, riverqueue.Options{Now: clock.Now, Logger: quiet})
}

func sqliteQueueWith(t *testing.T, opts riverqueue.Options) *riverqueue.Queue[*sql.Tx] {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "jobs.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	q, err := riverqueue.NewSQLite(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return q
}

func postgresQueueWith(t *testing.T, opts riverqueue.Options) *riverqueue.Queue[pgx.Tx] {
	pool, err := pgxpool.New(context.Background(), testservers.PostgresDatabase(t))
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
	return q
}

func TestConformance(t *testing.T) {
	t.Run("SQLite", func(t *testing.T) { upscaletest.TestJobQueue(t, sqliteQueue) })
	t.Run("PostgreSQL", func(t *testing.T) { upscaletest.TestJobQueue(t, postgresQueue) })
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
				return q.Work(ctx, 1, func(context.Context, upscale.Job) upscale.JobOutcome { return upscale.JobOutcome{} })
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
