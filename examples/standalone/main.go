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
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stripe/stripe-go/v84"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/api"
	"github.com/upscalekit/upscale/billing/stripebilling"
	"github.com/upscalekit/upscale/dashboard"
	"github.com/upscalekit/upscale/prommetrics"
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

	p := &process{o: o, worker: worker, logger: logger}
	defer p.close()
	if err := p.openStores(ctx); err != nil {
		return err
	}
	if err := p.buildHandler(ctx); err != nil {
		return err
	}
	if worker {
		return p.work(ctx, signals, stdout)
	}
	dash, err := p.buildDashboard(ctx)
	if err != nil {
		return err
	}
	return p.serve(ctx, dash, signals, stdout)
}

// process is a server or a worker as run's steps put it together: each
// step sets its fields for the steps after it.
type process struct {
	o      options
	worker bool // "standalone worker": no listener, seller or dashboard
	logger *slog.Logger
	// closers close what the steps opened; close calls them.
	closers []func()

	// Set by openStores.
	store     *sqlstore.Store
	cfg       fileConfig // seeded into store
	demoKey   string     // the demo account's key, without -config
	processID string
	jobs      queues
	ln        net.Listener // nil for a worker
	publicURL string
	blobs     resultStore

	// Set by buildHandler.
	engine   upscale.Upscaler
	chosen   engineChoice
	registry *prometheus.Registry
	seller   *stripebilling.Billing // nil when nothing is sold
	keys     upscale.KeyLister
	handler  *upscale.Handler

	// Set by buildDashboard.
	email  *dashboard.EmailOptions // nil without -smtp-url
	signIn *dashboard.SignIn
	front  http.Handler // the storefront, at /
}

// onClose has close call f: what a step opens stays open for the
// process's life, and is closed on the way out whichever step fails.
func (p *process) onClose(f func()) { p.closers = append(p.closers, f) }

// close closes what the steps opened, the last first, as defers would.
func (p *process) close() {
	for _, f := range slices.Backward(p.closers) {
		f()
	}
}

// buildHandler builds the API's handler on the stores, with the engine
// -engine names and the registry /metrics serves, for a server with the
// built-in samples and the seller's wording too, and starts its job
// workers.
func (p *process) buildHandler(ctx context.Context) error {
	engine, chosen, err := p.o.openEngine(ctx, p.cfg, p.logger)
	if err != nil {
		return err
	}
	p.engine, p.chosen = engine, chosen
	p.registry = prometheus.NewRegistry()
	p.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), chosen.info())
	metrics, err := prommetrics.New(p.registry)
	if err != nil {
		return err
	}
	var builtin map[string][]byte
	var wording upscale.Wording
	// A worker fetches no source (its jobs' are in the BlobStore), and
	// the API processes sell.
	if !p.worker {
		if builtin, err = builtinSamples(p.publicURL); err != nil {
			return err
		}
		if wording, err = p.sell(); err != nil {
			return err
		}
	}
	p.keys = p.store
	if p.o.keyCacheTTL > 0 {
		cached := upscale.NewCachedKeyStore(p.store, upscale.CachedKeyStoreOptions{TTL: p.o.keyCacheTTL})
		p.onClose(func() { cached.Close() })
		p.keys = cached
	}
	p.handler, err = upscale.New(upscale.Config{
		Keys:                 p.keys,
		Ledger:               p.store,
		Idempotency:          p.store,
		Upscaler:             engine,
		Blobs:                p.blobs,
		Jobs:                 p.jobs,
		History:              p.store,
		WebhookLog:           p.store,
		JobWorkers:           p.o.jobWorkers,
		Webhooks:             p.jobs,
		WebhookSecrets:       p.store,
		LinkTTL:              p.o.linkTTL,
		EngineTimeout:        p.o.engineTimeout,
		ChargeTimeout:        chargeTimeout,
		FreeTierMaxFileBytes: p.cfg.FreeTierMaxFileBytes,
		Capacity:             upscale.Capacity{QueueLength: p.o.queueLength, AccountShare: p.o.accountShare, MemoryBudget: p.o.memoryBudget},
		Fetch:                upscale.FetchPolicy{BuiltinSources: builtin, AllowPrivateNetworks: p.o.allowPrivateSources},
		Wording:              wording,
		Metrics:              metrics,
		Logger:               p.logger,
	})
	if err != nil {
		return err
	}
	return p.handler.StartJobs(ctx)
}

// work is the worker's life: it says so and serves /metrics, then its
// handler's workers run the queue's jobs until a signal, then have the
// engine's time to finish theirs, after which the rest go back to the
// queue; or until a live twin displaced the process, which stopped them.
func (p *process) work(ctx context.Context, signals <-chan os.Signal, stdout io.Writer) error {
	fmt.Fprintf(stdout, "upscale standalone worker: jobs from the queue in the database (engine %s)\n", p.o.engine)
	if err := p.serveMetrics(stdout); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-signals:
	case <-p.jobs.Displaced(): // stopJobs says why
	}
	p.logger.Info("stopping: finishing the jobs under way")
	drain, cancel := context.WithTimeout(context.Background(), p.o.engineTimeout+time.Minute)
	defer cancel()
	return p.stopJobs(drain)
}

// serve says where the server is (and with the demo, how to try it) and
// serves the API and dash on the listener until it fails, ctx is done, a
// live twin displaces the process or a signal comes; after a SIGTERM,
// /readyz fails for -drain-delay (or until a second signal) first. Then
// it shuts down.
func (p *process) serve(ctx context.Context, dash http.Handler, signals <-chan os.Signal, stdout io.Writer) error {
	// The middleware form: the API and the result links (when the
	// directory store serves them) in front of the server's own routes.
	srv := newServer(p.handler.Middleware(p.routes(dash)), p.o.engineTimeout, p.logger)
	p.printBanner(stdout)
	if err := p.serveMetrics(stdout); err != nil {
		return err
	}
	if err := p.printDemo(stdout); err != nil {
		return err
	}

	served := make(chan error, 1)
	go func() { served <- srv.Serve(p.ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	case <-p.jobs.Displaced(): // stopJobs says why
	case sig := <-signals:
		if sig == syscall.SIGTERM && p.o.drainDelay > 0 {
			p.logger.Info("draining: /readyz answers 503 while requests are still served", "for", p.o.drainDelay)
			p.handler.Drain()
			select {
			case <-time.After(p.o.drainDelay):
			case <-signals: // a second signal: stop now
			}
		}
	}
	return p.shutdown(srv, served)
}

// shutdown stops srv, whose Serve reports to served: the requests in
// flight finish, then the jobs under way, within the server's write
// timeout.
func (p *process) shutdown(srv *http.Server, served <-chan error) error {
	p.logger.Info("shutting down: finishing requests in flight")
	ctx, cancel := context.WithTimeout(context.Background(), srv.WriteTimeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	// The jobs under way get what is left of the same time; the rest go
	// back to the queue.
	if err := p.stopJobs(ctx); err != nil {
		return err
	}
	p.handler.CloseIdleConnections()
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// routes are the server's own routes: the probes, the samples and the
// showcase's result, the API's description, the seller's webhook, the
// dashboard dash and the storefront.
func (p *process) routes(dash http.Handler) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /livez", p.handler.LiveHandler())
	mux.Handle("GET /readyz", p.handler.ReadyHandler())
	mux.Handle("GET /samples/", sampleHandler())
	mux.HandleFunc("GET /openapi.yaml", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		w.Write(api.OpenAPI)
	})
	if p.seller != nil {
		mux.Handle("POST "+webhookPath, p.seller.Webhook())
	}
	mux.Handle("/dashboard/", http.StripPrefix("/dashboard", dash))
	mux.Handle("GET "+showcasePath, p.showcase())
	mux.Handle("GET /{$}", p.front)
	return mux
}

// printBanner says what the server sells, how people sign in and where
// it listens.
func (p *process) printBanner(stdout io.Writer) {
	if p.seller != nil {
		fmt.Fprintf(stdout, "selling through Stripe: register the webhook endpoint %s%s (API version %s) for: %s\n",
			p.publicURL, webhookPath, stripe.APIVersion, strings.Join(stripebilling.Events, ", "))
	}
	if p.email != nil {
		fmt.Fprintf(stdout, "sign-in by email at %s/dashboard/signin: sign-ups %s", p.publicURL, p.o.signUps)
		if p.email.SignUps {
			fmt.Fprintf(stdout, " (accounts open on the plan %q)", p.email.Plan.Name)
		}
		fmt.Fprintln(stdout)
	}
	fmt.Fprintf(stdout, "upscale standalone listening on %s (engine %s)\n", p.publicURL, p.o.engine)
}

// printDemo, without -config, prints the demo account's key, a link
// that signs in to its dashboard and how to try the API.
func (p *process) printDemo(stdout io.Writer) error {
	if p.demoKey == "" {
		return nil
	}
	fmt.Fprintf(stdout, "demo account %q on the plan %q (%d images a month)\n", "demo", "demo", p.cfg.Plans["demo"].MonthlyImages)
	fmt.Fprintf(stdout, "API key: %s\n", p.demoKey)
	link, err := p.signIn.Link("demo")
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "dashboard (this link signs in once, within 15 minutes; standalone dashboard link makes more): %s\n", link)
	curl := func(body string) string {
		return fmt.Sprintf("  curl -sS -X POST %s/api/v1/upscale -H 'Authorization: Bearer %s' %s\n", p.publicURL, p.demoKey, body)
	}
	json := func(body string) string { return curl("-H 'Content-Type: application/json' -d '" + body + "'") }
	fmt.Fprint(stdout, "try (the samples are served by this server, so no internet access is needed):\n",
		json(fmt.Sprintf(`{"imageUrl": "%s", "scale": 2}`, sampleURL(p.publicURL, "photo.png"))), "or line art:\n",
		json(fmt.Sprintf(`{"imageUrl": "%s", "scale": 4, "imageType": "anime"}`, sampleURL(p.publicURL, "lineart.png"))),
		"or a file of your own, as WebP:\n", curl("-F image=@photo.jpg -F scale=2 -F format=webp"))
	return nil
}

// stopJobs stops the handler's job workers. Those of a process that a
// live twin displaced (it was paused while the twin started under its
// -process-id) stopped already: its error says so, for the process to
// exit non-zero and its supervisor to start it again. It asks Displaced,
// not the stop's error: a server with no job workers holds the ID by its
// mail sender alone, and its handler's stop has nothing to report.
func (p *process) stopJobs(drain context.Context) error {
	err := p.handler.StopJobs(drain)
	select {
	case <-p.jobs.Displaced():
		return fmt.Errorf("process ID %q is now held by another live process; exiting so that a supervisor restarts this one under its own ID", p.processID)
	default:
	}
	if err != nil {
		return fmt.Errorf("stop the job workers: %w", err)
	}
	return nil
}

// serveMetrics, with -metrics-addr, serves the registry's metrics at
// /metrics there, a listener of its own so that they need not be public,
// and says where.
func (p *process) serveMetrics(stdout io.Writer) error {
	if p.o.metricsAddr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", p.o.metricsAddr)
	if err != nil {
		return fmt.Errorf("-metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(p.registry, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(p.logger.Handler(), slog.LevelWarn)}))
	srv := newServer(mux, p.o.engineTimeout, p.logger)
	go srv.Serve(ln)
	p.onClose(func() { srv.Close() })
	fmt.Fprintf(stdout, "metrics at http://%s/metrics\n", ln.Addr())
	return nil
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
// README's example file, and one demo account on a plan as the free one
// but of images a month, so that the banner's commands go on working
// while its holder tries the service.
func demoConfig(key string, images int64) fileConfig {
	return fileConfig{
		FreeTierMaxFileBytes: 5 << 20,
		Plans: map[string]filePlan{
			"free":      {MonthlyImages: 10, MaxFileBytes: 25 << 20},
			"demo":      {MonthlyImages: images, MaxFileBytes: 25 << 20},
			"unlimited": {Paid: true, Unlimited: true, MaxFileBytes: 50 << 20},
		},
		Accounts:   []fileAccount{{ID: "demo", Plan: "demo"}},
		Keys:       []fileKey{{Key: key, Account: "demo"}},
		ShareBonus: &fileShareBonus{PerSignup: 5, MonthlyCap: 50},
	}
}
