package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/accounts"
	"github.com/upscalekit/upscale/dirstore"
	"github.com/upscalekit/upscale/riverqueue"
	"github.com/upscalekit/upscale/s3store"
	"github.com/upscalekit/upscale/sqlstore"
)

// storage is where keys, quotas and results live; the server and every
// admin subcommand take the same two flags.
type storage struct {
	dataDir, databaseURL string
	historyDays          int
}

func (st *storage) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&st.dataDir, "data", "./data", "directory for the SQLite database and the results")
	fs.StringVar(&st.databaseURL, "database-url", "", "postgres:// URL of a PostgreSQL database shared by replicas (default: SQLite in -data)")
	fs.IntVar(&st.historyDays, "history-days", 30, "days each account's calls and webhook deliveries are kept for its dashboard's pages, then swept; 0 means 30")
}

// queues are the queues of jobs, of their webhooks and of the
// dashboard's mail, as riverqueue's Queue is all three.
type queues interface {
	upscale.JobQueue
	upscale.WebhookQueue
	accounts.Outbox
	SendMail(ctx context.Context, concurrency int, mailer accounts.Mailer) (func(drain context.Context) error, error)
	// Displaced is closed once a live twin took this process's
	// -process-id: its workers stopped; it should exit.
	Displaced() <-chan struct{}
}

// openJobs opens the job and webhook queue (River) in the store's
// database, and brings its tables up to date: on SQLite the store's own
// connection, on PostgreSQL a pool of its own. close closes what it
// opened.
func (st storage) openJobs(ctx context.Context, store *sqlstore.Store, opts riverqueue.Options) (queue queues, close func(), err error) {
	if db := store.SQLiteDB(); db != nil {
		q, err := riverqueue.NewSQLite(db, opts)
		if err != nil {
			return nil, nil, err
		}
		return q, func() {}, q.Migrate(ctx)
	}
	pool, err := pgxpool.New(ctx, st.databaseURL)
	if err != nil {
		return nil, nil, fmt.Errorf("-database-url: %w", err)
	}
	q, err := riverqueue.NewPostgres(pool, opts)
	if err == nil {
		err = q.Migrate(ctx)
	}
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return q, pool.Close, nil
}

// open opens the key and quota store: PostgreSQL when -database-url is set,
// else SQLite in -data.
func (st storage) open(ctx context.Context) (*sqlstore.Store, error) {
	if err := os.MkdirAll(st.dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("-data: %w", err)
	}
	dsn := st.databaseURL
	if dsn == "" {
		dsn = filepath.Join(st.dataDir, "upscale.db")
	}
	if st.historyDays < 0 {
		return nil, fmt.Errorf("-history-days %d: want 1 or more, or 0 for 30", st.historyDays)
	}
	return sqlstore.Open(ctx, dsn, sqlstore.Options{CallRetention: time.Duration(st.historyDays) * 24 * time.Hour})
}

// resultStore is a BlobStore the server closes on the way out. The
// directory store also serves its links (an upscale.LinkServer); an S3
// bucket serves its own.
type resultStore interface {
	upscale.BlobStore
	Close() error
}

// openResults opens the S3 bucket when -s3-bucket is set, else the
// directory -data/outputs, whose links point at publicURL/outputs.
func (o options) openResults(ctx context.Context, publicURL string) (resultStore, error) {
	if o.s3Bucket == "" {
		return dirstore.New(dirstore.Options{Dir: filepath.Join(o.dataDir, "outputs"), BaseURL: publicURL + "/outputs"})
	}
	client, err := s3store.NewClient(ctx, o.s3Endpoint, o.s3Region)
	if err != nil {
		return nil, err
	}
	return s3store.New(ctx, s3store.Options{Client: client, Bucket: o.s3Bucket})
}

// openStores opens what the process keeps its state in: the key and
// quota store, seeded with the config file's plans, accounts and keys (or
// the demo's), the queue in its database, and the results. A server
// listens before the results are opened, as the directory store's links
// name its address.
func (p *process) openStores(ctx context.Context) error {
	store, err := p.o.storage.open(ctx)
	if err != nil {
		return err
	}
	p.store = store
	p.onClose(func() { store.Close() })
	switch {
	case p.o.configFile != "":
		if p.cfg, err = loadConfig(p.o.configFile); err != nil {
			return err
		}
	case p.worker: // nothing to seed: the API processes do
	default:
		if p.demoKey, err = loadOrCreateDemoKey(filepath.Join(p.o.dataDir, "demo-key")); err != nil {
			return err
		}
		p.cfg = demoConfig(p.demoKey, int64(p.o.demoImages))
	}
	if !p.worker { // a worker reads its config for the networks; the API processes seed the accounts
		if err := p.cfg.seed(ctx, store); err != nil {
			return err
		}
	}
	if p.processID, err = p.o.processName(); err != nil {
		return err
	}
	jobs, closeJobs, err := p.o.storage.openJobs(ctx, store, riverqueue.Options{Logger: p.logger, RunTimeout: p.o.jobRunTimeout, ProcessID: p.processID})
	if err != nil {
		return err
	}
	p.jobs = jobs
	p.onClose(closeJobs)
	if !p.worker {
		tcpListener, err := net.Listen("tcp", p.o.addr)
		if err != nil {
			return err
		}
		ln := newLimitListener(tcpListener, p.o.maxConnections)
		p.ln = ln
		p.onClose(func() { ln.Close() })
	}
	p.publicURL = strings.TrimSuffix(p.o.publicURL, "/")
	if p.publicURL == "" && p.ln != nil { // a worker has -public-url or -s3-bucket
		p.publicURL = "http://" + p.ln.Addr().String()
	}
	blobs, err := p.o.openResults(ctx, p.publicURL)
	if err != nil {
		return err
	}
	p.blobs = blobs
	p.onClose(func() { blobs.Close() })
	return nil
}
