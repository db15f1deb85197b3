// Command standalone serves the upscale API on its own: the handler, an
// engine (libvips, or waifu2x's networks on oneDNN or ONNX Runtime with
// -engine onnx), keys and quotas in SQLite under -data (or PostgreSQL with
// -database-url) and results in -data/outputs (or an S3 bucket with
// -s3-bucket), configured by flags and an optional JSON file of plans,
// accounts and keys.
//
// Without -config it creates a demo account on a free plan and prints its key
// and a curl command to try it. Admin subcommands (standalone keys create
// --account acme, ...) work on the same database; see admin.go.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stripe/stripe-go/v84"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/api"
	"github.com/upscalekit/upscale/billing/stripebilling"
	"github.com/upscalekit/upscale/dashboard"
	"github.com/upscalekit/upscale/dirstore"
	"github.com/upscalekit/upscale/engine/onnx"
	"github.com/upscalekit/upscale/internal/periodic"
	"github.com/upscalekit/upscale/prommetrics"
	"github.com/upscalekit/upscale/riverqueue"
	"github.com/upscalekit/upscale/s3store"
	"github.com/upscalekit/upscale/sqlstore"
)

func main() {
	run := run
	if len(os.Args) > 1 && isSubcommand(os.Args[1]) {
		run = runSubcommand
	}
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "standalone:", err)
		os.Exit(1)
	}
}

type options struct {
	addr, configFile, publicURL string
	metricsAddr                 string
	linkTTL, engineTimeout      time.Duration
	allowPrivateSources         bool
	storage
	s3Endpoint, s3Bucket, s3Region            string
	engine, onnxRuntime, onnxRuntimeLib       string
	onnxPrecision                             string
	queueLength, accountShare, maxConnections int
	memoryBudget                              int64
	drainDelay, keyCacheTTL, jobRunTimeout    time.Duration
	jobWorkers                                int
	processID, stripeAPIBase                  string
	smtpURL, mailFrom, signUps                string
	signUpsPerDay                             int
}

// storage is where keys, quotas and results live; the server and every
// admin subcommand take the same two flags.
type storage struct {
	dataDir, databaseURL string
}

func (st *storage) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&st.dataDir, "data", "./data", "directory for the SQLite database and the results")
	fs.StringVar(&st.databaseURL, "database-url", "", "postgres:// URL of a PostgreSQL database shared by replicas (default: SQLite in -data)")
}

// queues are the queues of jobs, of their webhooks and of the
// dashboard's mail, as riverqueue's Queue is all three.
type queues interface {
	upscale.JobQueue
	upscale.WebhookQueue
	dashboard.Outbox
	SendMail(ctx context.Context, concurrency int, mailer dashboard.Mailer) (func(drain context.Context) error, error)
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

// processName is -process-id, by default the host name and the absolute
// -data directory: the same across restarts, and apart for processes on
// one host that keep their files apart.
func (o options) processName() (string, error) {
	if o.processID != "" {
		return o.processID, nil
	}
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("-process-id: the host name: %w", err)
	}
	dir, err := filepath.Abs(o.dataDir)
	if err != nil {
		return "", fmt.Errorf("-process-id: -data: %w", err)
	}
	return host + ":" + dir, nil
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
	return sqlstore.Open(ctx, dsn, sqlstore.Options{})
}

// settleTimeout is how long the server keeps trying to settle a charge
// (upscale.Config.SettleTimeout); a job's run keeps that much of its time
// for it.
const settleTimeout = 15 * time.Second

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("standalone", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.storage.addFlags(fs)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8080", "address to listen on (port 0 picks a free port)")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "address of a second listener serving Prometheus metrics at /metrics, such as 127.0.0.1:9090 (default: no metrics)")
	fs.StringVar(&o.configFile, "config", "", "JSON file of plans, accounts and keys (default: one demo account and key)")
	fs.StringVar(&o.publicURL, "public-url", "", "base URL under which clients reach this server, for output links (default: http://<addr>)")
	fs.DurationVar(&o.linkTTL, "link-ttl", time.Hour, "how long output links work")
	fs.DurationVar(&o.engineTimeout, "engine-timeout", 60*time.Second, "longest the engine may work on one image, queueing included")
	fs.BoolVar(&o.allowPrivateSources, "allow-private-sources", false, "fetch images from loopback and private addresses on any port (local testing only)")
	fs.StringVar(&o.s3Bucket, "s3-bucket", "", "keep results in this S3 bucket, behind presigned links (default: files in -data); credentials come from the standard AWS environment variables")
	fs.StringVar(&o.s3Endpoint, "s3-endpoint", "", "URL of an S3-compatible server, e.g. http://127.0.0.1:9000 (default: AWS)")
	fs.StringVar(&o.s3Region, "s3-region", "", "region of the S3 bucket (default: AWS_REGION, or us-east-1 with -s3-endpoint)")
	fs.StringVar(&o.engine, "engine", "vips", "upscaling engine: vips (libvips, classical, fast) or onnx (waifu2x networks, sharper, slower)")
	fs.IntVar(&o.accountShare, "account-share", 0, "places one account's requests may hold at once; more get 429 rate_limited (default half of the engine's concurrency plus the queue length)")
	fs.IntVar(&o.queueLength, "queue-length", 0, "requests admitted beyond those in the engine (fetching or waiting for it); more are refused at once with 503 overloaded (default 4 × the engine's concurrency)")
	fs.Int64Var(&o.memoryBudget, "memory-budget", 1<<30, "bytes of memory requests may hold at once (sources, and the engine's estimated working memory); more wait or get 503 overloaded")
	fs.IntVar(&o.maxConnections, "max-connections", 1024, "most client connections open at once; more wait in the kernel's backlog")
	fs.DurationVar(&o.keyCacheTTL, "key-cache-ttl", 5*time.Second, "how long a key lookup's answer is kept in memory: a key revoked by another process (keys revoke, another replica) works for at most this long; 0 looks every key up in the database")
	fs.IntVar(&o.jobWorkers, "job-workers", 0, "jobs of the job form (Prefer: respond-async) this process runs at once, from the queue in the database (default the engine's concurrency; -1 none, for an API replica beside worker processes)")
	fs.DurationVar(&o.jobRunTimeout, "job-run-timeout", upscale.DefaultRunTimeout, "longest one run of a job may take before it is stopped and run again; a job's engine has this less the time to settle its charge, for learned passes at every size on slow CPUs (a job whose process died is run again within 30 s of its last beat, whatever this is)")
	fs.StringVar(&o.processID, "process-id", "", "names this process among those that run jobs from the database: keep it across restarts, so that a restarted process runs again at once the jobs it had when it died; two live processes cannot share it (default the host name and the absolute -data directory)")
	fs.DurationVar(&o.drainDelay, "drain-delay", 5*time.Second, "after SIGTERM, how long /readyz answers 503 before the listener closes, so load balancers stop sending requests first (SIGINT skips it)")
	fs.StringVar(&o.onnxRuntime, "onnx-runtime", "auto", "what runs -engine onnx's networks: auto (oneDNN and ONNX Runtime, whichever measures faster at start), onednn (oneDNN's convolutions) or onnxruntime (ONNX Runtime)")
	fs.StringVar(&o.onnxRuntimeLib, "onnxruntime-lib", "", "path of libonnxruntime.so.1 for -onnx-runtime auto or onnxruntime (default: $"+onnx.LibraryEnv+", else where make deps installs it)")
	fs.StringVar(&o.onnxPrecision, "onnx-precision", "", "arithmetic -engine onnx's networks may run in: int8, bf16 or fp32, or several comma-separated (default: any the runtimes offer on this CPU); of several, the fastest measured at start")
	fs.StringVar(&o.smtpURL, "smtp-url", os.Getenv(smtpURLEnv), "smtp://user:password@host:587 (STARTTLS, required but for loopback) or smtps://…: the server that mails sign-in links, which lets people sign in and open accounts by email on the dashboard (default $"+smtpURLEnv+", which keeps the password out of the process list)")
	fs.StringVar(&o.mailFrom, "mail-from", "", "the sender of the sign-in mail, such as 'Upscale <no-reply@example.com>'; required with -smtp-url")
	fs.StringVar(&o.signUps, "signups", "open", "with -smtp-url: open (an address without an account opens one, on the config's signUpPlan) or closed (only addresses that have accounts get sign-in links)")
	fs.IntVar(&o.signUpsPerDay, "signups-per-day", 100, "with -signups open: the most accounts opened by email in a day (UTC); past it a link that would open one answers 429 until the next day (standalone accounts opened lists them); 0 means no cap")
	fs.StringVar(&o.stripeAPIBase, "stripe-api-base", "", "for tests: an http URL on loopback where a Stripe test server (stripe-mock, a fake) answers instead of Stripe; selling needs "+stripeKeyEnv+" and "+stripeHookEnv+" in the environment and the config file's billing section")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if err := checkAPIBase(o.stripeAPIBase); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if o.s3Bucket == "" && (o.s3Endpoint != "" || o.s3Region != "") {
		return o, errors.New("-s3-endpoint and -s3-region need -s3-bucket")
	}
	if o.engine != "vips" && o.engine != "onnx" {
		return o, fmt.Errorf("-engine %q: want vips or onnx", o.engine)
	}
	if least := o.engineTimeout + settleTimeout; o.jobRunTimeout <= least {
		return o, fmt.Errorf("-job-run-timeout %v is not above -engine-timeout %v and the %v a charge may take to settle: a run could not use the engine's time, nor give up its turn in time", o.jobRunTimeout, o.engineTimeout, settleTimeout)
	}
	if o.signUps != "open" && o.signUps != "closed" {
		return o, fmt.Errorf("-signups %q: want open or closed", o.signUps)
	}
	if o.signUpsPerDay < 0 {
		return o, errors.New("-signups-per-day cannot be negative")
	}
	if o.smtpURL != "" && o.mailFrom == "" {
		return o, errors.New("-smtp-url needs -mail-from, the sender of the sign-in mail")
	}
	if o.memoryBudget < 1 {
		return o, errors.New("-memory-budget must be a positive number of bytes")
	}
	if o.maxConnections < 1 {
		return o, errors.New("-max-connections must be at least 1")
	}
	if (o.onnxRuntimeLib != "" || o.onnxPrecision != "" || o.onnxRuntime != "auto") && o.engine != "onnx" {
		return o, errors.New("-onnx-runtime, -onnxruntime-lib and -onnx-precision need -engine onnx")
	}
	if o.onnxRuntime != "auto" && o.onnxRuntime != "onednn" && o.onnxRuntime != "onnxruntime" {
		return o, fmt.Errorf("-onnx-runtime %q: want auto, onednn or onnxruntime", o.onnxRuntime)
	}
	if o.onnxRuntimeLib != "" && o.onnxRuntime == "onednn" {
		return o, errors.New("-onnxruntime-lib needs -onnx-runtime auto or onnxruntime")
	}
	// openEngine refuses a precision no runtime offers, naming those they
	// do.
	return o, nil
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

// run runs the server, or, as "standalone worker [flags]", a process that
// only works the job form's jobs from the queue in the database, beside
// processes that serve the API (-job-workers -1).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	worker := len(args) > 0 && args[0] == "worker"
	if worker {
		args = args[1:]
	}
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if worker && o.jobWorkers < 0 {
		return errors.New("worker: -job-workers must not be negative: a worker works jobs")
	}
	if worker && o.publicURL == "" && o.s3Bucket == "" {
		return errors.New("worker: give -public-url, where the API processes serve the results in -data (or keep them in -s3-bucket)")
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	// Caught from the start: a SIGTERM right after the banner must drain
	// too, not kill the process.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(signals)

	store, err := o.storage.open(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	cfg := fileConfig{}
	demoKey := ""
	switch {
	case worker: // the API processes seed the accounts
	case o.configFile != "":
		if cfg, err = loadConfig(o.configFile); err != nil {
			return err
		}
	default:
		if demoKey, err = loadOrCreateDemoKey(filepath.Join(o.dataDir, "demo-key")); err != nil {
			return err
		}
		cfg = demoConfig(demoKey)
	}
	if err := cfg.seed(ctx, store); err != nil {
		return err
	}
	processID, err := o.processName()
	if err != nil {
		return err
	}
	jobs, closeJobs, err := o.storage.openJobs(ctx, store, riverqueue.Options{Logger: logger, RunTimeout: o.jobRunTimeout, ProcessID: processID})
	if err != nil {
		return err
	}
	defer closeJobs()

	var ln net.Listener
	if !worker {
		tcpListener, err := net.Listen("tcp", o.addr)
		if err != nil {
			return err
		}
		ln = newLimitListener(tcpListener, o.maxConnections)
		defer ln.Close()
	}
	publicURL := strings.TrimSuffix(o.publicURL, "/")
	if publicURL == "" && ln != nil { // a worker has -public-url or -s3-bucket
		publicURL = "http://" + ln.Addr().String()
	}
	blobs, err := o.openResults(ctx, publicURL)
	if err != nil {
		return err
	}
	defer blobs.Close()
	engine, chosen, err := o.openEngine(ctx, logger)
	if err != nil {
		return err
	}
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), chosen.info())
	metrics, err := prommetrics.New(registry)
	if err != nil {
		return err
	}
	var builtin map[string][]byte
	if !worker { // a worker fetches no source: its jobs' are in the BlobStore
		if builtin, err = builtinSamples(publicURL); err != nil {
			return err
		}
	}
	var seller *stripebilling.Billing
	wording := upscale.Wording{}
	if !worker { // the API processes sell
		if seller, err = newBilling(cfg, store, publicURL, o.stripeAPIBase, logger); err != nil {
			return err
		}
		if seller != nil {
			wording.BuyURL = publicURL + billingPath
		}
	}
	var keys upscale.KeyLister = store
	if o.keyCacheTTL > 0 {
		cached := upscale.NewCachedKeyStore(store, upscale.CachedKeyStoreOptions{TTL: o.keyCacheTTL})
		defer cached.Close()
		keys = cached
	}
	handler, err := upscale.New(upscale.Config{
		Keys:                 keys,
		Ledger:               store,
		Idempotency:          store,
		Upscaler:             engine,
		Blobs:                blobs,
		Jobs:                 jobs,
		JobWorkers:           o.jobWorkers,
		Webhooks:             jobs,
		WebhookSecrets:       store,
		LinkTTL:              o.linkTTL,
		EngineTimeout:        o.engineTimeout,
		SettleTimeout:        settleTimeout,
		FreeTierMaxFileBytes: cfg.FreeTierMaxFileBytes,
		Capacity:             upscale.Capacity{QueueLength: o.queueLength, AccountShare: o.accountShare, MemoryBudget: o.memoryBudget},
		Fetch:                upscale.FetchPolicy{BuiltinSources: builtin, AllowPrivateNetworks: o.allowPrivateSources},
		Wording:              wording,
		Metrics:              metrics,
		Logger:               logger,
	})
	if err != nil {
		return err
	}
	if err := handler.StartJobs(ctx); err != nil {
		return err
	}

	if worker {
		fmt.Fprintf(stdout, "upscale standalone worker: jobs from the queue in the database (engine %s)\n", o.engine)
		if o.metricsAddr != "" {
			metricsServer, err := serveMetrics(o, registry, stdout, logger)
			if err != nil {
				return err
			}
			defer metricsServer.Close()
		}
		return work(ctx, handler, o, signals, logger)
	}

	// The middleware form: the API and the result links (when the
	// directory store serves them) in front of the server's own routes.
	mux := http.NewServeMux()
	mux.Handle("GET /livez", handler.LiveHandler())
	mux.Handle("GET /readyz", handler.ReadyHandler())
	mux.Handle("GET /samples/", sampleHandler())
	mux.HandleFunc("GET /openapi.yaml", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		w.Write(api.OpenAPI)
	})
	email, closeMail, err := o.mailOptions(ctx, cfg, store, jobs)
	if err != nil {
		return err
	}
	defer closeMail()
	signIn, err := newSignIn(ctx, store, publicURL, email)
	if err != nil {
		return err
	}
	dashboardCfg := dashboard.Config{
		SignIn: signIn, Keys: keys, Ledger: store, WebhookSecrets: store, Logger: logger,
		API: handler, APIURL: publicURL + "/api/v1/upscale",
		Samples: []dashboard.Sample{{Name: "A photo (256×256)", URL: sampleURL(publicURL, "photo.png")}, {Name: "Line art (250×361)", URL: sampleURL(publicURL, "lineart.png")}},
	}
	if cfg.ShareBonus != nil && email != nil && email.SignUps {
		bonus := &dashboard.ShareBonus{Directory: store, Ledger: store, PerSignup: cfg.ShareBonus.PerSignup, MonthlyCap: cfg.ShareBonus.MonthlyCap}
		dashboardCfg.ShareBonus = bonus
		paying := periodic.Start(shareBonusInterval, func() {
			ctx, cancel := context.WithTimeout(context.Background(), shareBonusInterval)
			defer cancel()
			if _, err := bonus.Pay(ctx); err != nil {
				logger.Warn("standalone: pay the share bonus; tried again in a minute", "err", err)
			}
		})
		defer paying.Stop()
	}
	if seller != nil {
		dashboardCfg.Seller = seller
		mux.Handle("POST "+webhookPath, seller.Webhook())
	}
	dash, err := dashboard.New(dashboardCfg)
	if err != nil {
		return err
	}
	mux.Handle("/dashboard/", http.StripPrefix("/dashboard", dash))
	mux.Handle("GET /{$}", landingHandler())
	srv := newServer(handler.Middleware(mux), o.engineTimeout, logger)

	if seller != nil {
		fmt.Fprintf(stdout, "selling through Stripe: register the webhook endpoint %s%s (API version %s) for: %s\n",
			publicURL, webhookPath, stripe.APIVersion, strings.Join(stripebilling.Events, ", "))
	}
	if email != nil {
		fmt.Fprintf(stdout, "sign-in by email at %s/dashboard/signin: sign-ups %s", publicURL, o.signUps)
		if email.SignUps {
			fmt.Fprintf(stdout, " (accounts open on the plan %q)", email.Plan.Name)
		}
		fmt.Fprintln(stdout)
	}
	fmt.Fprintf(stdout, "upscale standalone listening on %s (engine %s)\n", publicURL, o.engine)
	if o.metricsAddr != "" {
		metricsServer, err := serveMetrics(o, registry, stdout, logger)
		if err != nil {
			return err
		}
		defer metricsServer.Close()
	}
	if demoKey != "" {
		fmt.Fprintf(stdout, "demo account %q on the free plan (%d images a month)\n", "demo", cfg.Plans["free"].MonthlyImages)
		fmt.Fprintf(stdout, "API key: %s\n", demoKey)
		link, err := signIn.Link("demo")
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "dashboard (this link signs in once, within 15 minutes; standalone dashboard link makes more): %s\n", link)
		fmt.Fprintf(stdout, "try (the sample is served by this server, so no internet access is needed):\n  curl -sS -X POST %s/api/v1/upscale -H 'Authorization: Bearer %s' -H 'Content-Type: application/json' -d '{\"imageUrl\": \"%s\", \"scale\": 2}'\n",
			publicURL, demoKey, sampleURL(publicURL, "photo.png"))
		fmt.Fprintf(stdout, "or line art: {\"imageUrl\": \"%s\", \"scale\": 4, \"imageType\": \"anime\"}\n", sampleURL(publicURL, "lineart.png"))
	}

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	case sig := <-signals:
		if sig == syscall.SIGTERM && o.drainDelay > 0 {
			logger.Info("draining: /readyz answers 503 while requests are still served", "for", o.drainDelay)
			handler.Drain()
			select {
			case <-time.After(o.drainDelay):
			case <-signals: // a second signal: stop now
			}
		}
	}
	logger.Info("shutting down: finishing requests in flight")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), srv.WriteTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	// The jobs under way get what is left of the same time; the rest go
	// back to the queue.
	if err := handler.StopJobs(shutdownCtx); err != nil {
		return fmt.Errorf("stop the job workers: %w", err)
	}
	handler.CloseIdleConnections()
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// work is the worker's life: its handler's workers run the queue's jobs
// until a signal, then have the engine's time to finish theirs, after
// which the rest go back to the queue.
func work(ctx context.Context, handler *upscale.Handler, o options, signals <-chan os.Signal, logger *slog.Logger) error {
	select {
	case <-ctx.Done():
	case <-signals:
	}
	logger.Info("stopping: finishing the jobs under way")
	drain, cancel := context.WithTimeout(context.Background(), o.engineTimeout+time.Minute)
	defer cancel()
	return handler.StopJobs(drain)
}

// serveMetrics serves registry's metrics at /metrics on -metrics-addr, a
// listener of its own so that they need not be public, and says where.
func serveMetrics(o options, registry *prometheus.Registry, stdout io.Writer, logger *slog.Logger) (*http.Server, error) {
	ln, err := net.Listen("tcp", o.metricsAddr)
	if err != nil {
		return nil, fmt.Errorf("-metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}))
	srv := newServer(mux, o.engineTimeout, logger)
	go srv.Serve(ln)
	fmt.Fprintf(stdout, "metrics at http://%s/metrics\n", ln.Addr())
	return srv, nil
}

// newServer wraps handler in a server whose every timeout is set, so that
// slow or silent clients cannot hold connections: headers must arrive within
// 10 s and the whole request within 30 s, and the response may take the
// fetch (up to 20 s) plus engineTimeout with a margin.
func newServer(handler http.Handler, engineTimeout time.Duration, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      engineTimeout + time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// loadOrCreateDemoKey returns the demo key kept at path, making it on the
// first start: the demo key stays the same across restarts, as the
// account it opens does.
func loadOrCreateDemoKey(path string) (string, error) {
	if key, err := os.ReadFile(path); err == nil {
		return strings.TrimSpace(string(key)), nil
	}
	key := upscale.NewKey("upk_demo_")
	if err := os.WriteFile(path, []byte(key+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("demo key: %w", err)
	}
	return key, nil
}

// demoConfig is the configuration used without -config: the plans of the
// README's example file and one demo account on the free plan.
func demoConfig(key string) fileConfig {
	return fileConfig{
		FreeTierMaxFileBytes: 5 << 20,
		Plans: map[string]filePlan{
			"free":      {MonthlyImages: 10, MaxFileBytes: 25 << 20},
			"unlimited": {Paid: true, Unlimited: true, MaxFileBytes: 50 << 20},
		},
		Accounts:   []fileAccount{{ID: "demo", Plan: "free"}},
		Keys:       []fileKey{{Key: key, Account: "demo"}},
		ShareBonus: &fileShareBonus{PerSignup: 5, MonthlyCap: 50},
	}
}
