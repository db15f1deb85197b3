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
	t.Run("SQLite", func(t *testing.T) {
		db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "jobs.db"))
		if err != nil {
			t.Fatal(err)
		}
		q, err := riverqueue.NewSQLite(db, riverqueue.Options{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Ping(ctx); err != nil {
			t.Fatalf("Ping with the database open: %v", err)
		}
		db.Close()
		if err := q.Ping(ctx); !errors.Is(err, upscale.ErrUnavailable) {
			t.Fatalf("Ping with the database closed: %v, want ErrUnavailable", err)
		}
	})
	t.Run("PostgreSQL", func(t *testing.T) {
		pool, err := pgxpool.New(ctx, testservers.PostgresDatabase(t))
		if err != nil {
			t.Fatal(err)
		}
		q, err := riverqueue.NewPostgres(pool, riverqueue.Options{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Ping(ctx); err != nil {
			t.Fatalf("Ping with the database open: %v", err)
		}
		pool.Close()
		if err := q.Ping(ctx); !errors.Is(err, upscale.ErrUnavailable) {
			t.Fatalf("Ping with the pool closed: %v, want ErrUnavailable", err)
		}
	})
}
