// Package sqlstore keeps API keys and quotas in SQL, through one
// implementation for two engines: SQLite (modernc.org/sqlite, pure Go, no
// server) for a single machine, and PostgreSQL (github.com/jackc/pgx/v5) for
// several replicas sharing one database.
//
// A Store is an upscale.KeyStore, an upscale.QuotaLedger and an
// upscale.BillingLedger (grants, refunds and plan terms from a payment
// provider, each applied once), plus the admin operations a host's billing
// code calls (create and revoke keys, set plans,
// grant credits and share bonus, read usage). Balances never go negative:
// every unit is taken by one conditional UPDATE. Every change to a balance
// is also a row of an append-only journal, so each balance can be audited
// against the sum of its journal.
package sqlstore

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	"modernc.org/sqlite"               // registers "sqlite"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/accounts"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Options configures a Store. Every zero field means the default beside it.
type Options struct {
	// Ledger sets the ledger's clock and reservation TTL; see
	// upscale.LedgerOptions for their defaults.
	Ledger upscale.LedgerOptions
	// MaxOpenConns caps this Store's PostgreSQL connections. Zero means
	// four per CPU: more only adds server processes fighting for the same
	// cores (on 2 cores, 64 busy goroutines charged 5× faster through 8
	// connections than through 64). SQLite always uses one.
	MaxOpenConns int
	// CallRetention is how long the history keeps a call
	// (upscale.CallHistory), and the log a webhook's delivery
	// (upscale.WebhookLog). Zero means upscale.DefaultCallRetention.
	CallRetention time.Duration
}

// Store is a KeyStore and QuotaLedger on SQLite or PostgreSQL. It is safe
// for concurrent use, and several processes may share one database.
type Store struct {
	db     *sql.DB
	sqlite bool
	opts   upscale.LedgerOptions

	idempotencySwept atomic.Int64 // Unix nanoseconds of the last sweep of expired Idempotency-Keys
	callRetention    time.Duration
	callsSwept       atomic.Int64 // Unix nanoseconds of the last sweep of the calls past callRetention
	deliveriesSwept  atomic.Int64 // and of the webhook deliveries
}

// Every interface a Store implements.
var (
	_ upscale.KeyAdmin           = (*Store)(nil)
	_ upscale.KeyLister          = (*Store)(nil)
	_ upscale.QuotaLedger        = (*Store)(nil)
	_ upscale.ReservationHolder  = (*Store)(nil)
	_ upscale.ReservationExpirer = (*Store)(nil)
	_ upscale.UsageReporter      = (*Store)(nil)
	_ upscale.FirstCharger       = (*Store)(nil)
	_ upscale.CallHistory        = (*Store)(nil)
	_ upscale.WebhookLog         = (*Store)(nil)
	_ upscale.BillingLedger      = (*Store)(nil)
	_ upscale.CheckoutStore      = (*Store)(nil)
	_ upscale.IdempotencyStore   = (*Store)(nil)
	_ upscale.WebhookSecrets     = (*Store)(nil)
	_ upscale.Pinger             = (*Store)(nil)
	_ accounts.Directory         = (*Store)(nil)
	_ accounts.ShareLedger       = (*Store)(nil)
	_ accounts.LinkStore         = (*Store)(nil)
	_ accounts.SessionStore      = (*Store)(nil)
)

// Open connects to the database named by dsn and brings its schema up to
// date. A dsn starting with postgres:// or postgresql:// is a PostgreSQL
// connection URL; anything else is the path of a SQLite database file,
// created if missing.
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	s := &Store{opts: opts.Ledger.WithDefaults(), callRetention: cmp.Or(opts.CallRetention, upscale.DefaultCallRetention)}
	var err error
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		s.db, err = sql.Open("pgx", dsn)
		if err == nil {
			s.db.SetMaxOpenConns(cmp.Or(opts.MaxOpenConns, 4*runtime.NumCPU()))
		}
	} else {
		s.sqlite = true
		s.db, err = sql.Open("sqlite", sqliteDSN(dsn))
		// One connection: SQLite has one writer at a time anyway, and
		// queueing in database/sql is cheaper than spinning on a busy
		// database. Other processes wait through busy_timeout.
		s.db.SetMaxOpenConns(1)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlstore: open: %w", err)
	}
	if err := s.migrate(ctx); err != nil {
		s.db.Close()
		return nil, err
	}
	return s, nil
}

// SQLiteDB returns the store's SQLite database, for a queue that keeps
// its jobs in the same file (riverqueue.NewSQLite), on the store's one
// connection; nil on PostgreSQL, where a queue opens a pool of its own.
func (s *Store) SQLiteDB() *sql.DB {
	if !s.sqlite {
		return nil
	}
	return s.db
}

// sqliteDSN turns a path into a modernc.org/sqlite DSN: write-ahead logging
// so readers do not block the writer, foreign keys on, a writer waits up to
// ten seconds for another process's transaction, and every transaction
// takes the write lock when it begins, so two never deadlock upgrading.
func sqliteDSN(path string) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_txlock", "immediate")
	return "file:" + path + "?" + q.Encode()
}

// Ping checks that the database answers; it implements upscale.Pinger.
func (s *Store) Ping(ctx context.Context) error {
	return classify(ctx, s.db.PingContext(ctx))
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// migrate applies the embedded migrations not yet applied, in order, each
// in its own transaction. On PostgreSQL an advisory lock keeps replicas
// starting together from applying one twice; SQLite's write lock does the
// same there.
func (s *Store) migrate(ctx context.Context) error {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	slices.Sort(names)
	if _, err := s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)`); err != nil {
		return fmt.Errorf("sqlstore: migrate: %w", err)
	}
	for _, name := range names {
		version, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(name, "migrations/"), "_", 2)[0])
		if err != nil {
			return fmt.Errorf("sqlstore: migration %s has no version number", name)
		}
		script, err := migrations.ReadFile(name)
		if err != nil {
			return err
		}
		err = s.tx(ctx, func(tx *sql.Tx) error {
			if !s.sqlite {
				if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(72656)`); err != nil {
					return err
				}
			}
			var applied int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations WHERE version = $1`, version).Scan(&applied); err != nil || applied > 0 {
				return err
			}
			if _, err := tx.ExecContext(ctx, string(script)); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)`, version, s.opts.Now().UnixNano())
			return err
		})
		if err != nil {
			return fmt.Errorf("sqlstore: migration %s: %w", name, err)
		}
	}
	return nil
}

// tx runs fn in a transaction, committing if it returns nil.
func (s *Store) tx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return classify(ctx, err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return classify(ctx, err)
	}
	return classify(ctx, tx.Commit())
}

// classify marks the failures that waiting may cure with
// upscale.ErrUnavailable, so that the handler answers 503 with a
// Retry-After and stops calling for a while: no connection to PostgreSQL
// (refused, reset or closed mid-query), a server shutting down, starting up
// or out of connections (SQLSTATE class 08, 57P01 to 57P03, 53300), and a
// SQLite database still locked by another process after busy_timeout. An
// error after ctx ended is the caller's, and stays as it is.
func classify(ctx context.Context, err error) error {
	if err == nil || ctx.Err() != nil || !transient(err) {
		return err
	}
	return fmt.Errorf("sqlstore: %w: %w", upscale.ErrUnavailable, err)
}

func transient(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "08") || slices.Contains([]string{"57P01", "57P02", "57P03", "53300"}, pgErr.Code)
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	if errors.As(err, &connectErr) || errors.As(err, &netErr) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	const sqliteBusy, sqliteLocked = 5, 6
	var sqliteErr *sqlite.Error
	if errors.As(err, &sqliteErr) {
		primary := sqliteErr.Code() & 0xff // extended codes keep the primary one in the low byte
		return primary == sqliteBusy || primary == sqliteLocked
	}
	return false
}

// journal appends one row to the journal.
func journal(ctx context.Context, tx *sql.Tx, accountID string, pool upscale.Pool, delta int64, reason, requestID, month string, now time.Time) error {
	_, err := tx.ExecContext(ctx,
		`INSERT INTO journal (id, account_id, pool, delta, reason, request_id, month, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		rand.Text(), accountID, string(pool), delta, reason, requestID, month, now.UnixNano())
	return err
}

func notFound(what, id string) error {
	return fmt.Errorf("%s %q: %w", what, id, upscale.ErrNotFound)
}

// noRows maps sql.ErrNoRows to ErrNotFound for what and id.
func noRows(err error, what, id string) error {
	if errors.Is(err, sql.ErrNoRows) {
		return notFound(what, id)
	}
	return err
}
