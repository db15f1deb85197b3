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
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stripe/stripe-go/v84"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/accounts"
	"github.com/upscalekit/upscale/api"
	"github.com/upscalekit/upscale/billing/stripebilling"
	"github.com/upscalekit/upscale/dashboard"
	"github.com/upscalekit/upscale/internal/periodic"
	"github.com/upscalekit/upscale/prommetrics"
	"github.com/upscalekit/upscale/riverqueue"
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
			registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "upscale_billing_double_subscriptions_total",
				Help: "Times a subscription's state was applied while its account had another live subscription at Stripe, each billed: cancel and refund all but one (standalone billing doubles).",
			}, func() float64 { return float64(seller.Stats().DoubleSubscriptions) }), prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "upscale_billing_refused_events_total",
				Help: "Stripe webhook events refused because their signature does not verify: forged, replayed, or signed with another webhook secret.",
			}, func() float64 { return float64(seller.Stats().RefusedEvents) }))
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
		ChargeTimeout:        chargeTimeout,
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
		return work(ctx, handler, o, signals, jobs.Displaced(), processID, logger)
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
	signIn, err := newSignIn(ctx, store, publicURL, email, o.trustedProxies)
	if err != nil {
		return err
	}
	if email != nil {
		registry.MustRegister(mailCounters(signIn)...)
	}
	dashboardCfg := dashboard.Config{
		SignIn: signIn, Keys: keys, Ledger: store, WebhookSecrets: store, Logger: logger,
		API: handler, APIURL: publicURL + "/api/v1/upscale",
		Samples: []dashboard.Sample{{Name: "A photo (256×256)", URL: sampleURL(publicURL, "photo.png")}, {Name: "Line art (250×361)", URL: sampleURL(publicURL, "lineart.png")}},
	}
	if cfg.ShareBonus != nil && email != nil && email.SignUps {
		bonus, err := accounts.NewShareBonus(accounts.ShareBonusOptions{Directory: store, Ledger: store, PerSignup: cfg.ShareBonus.PerSignup, MonthlyCap: cfg.ShareBonus.MonthlyCap})
		if err != nil {
			return fmt.Errorf("the config's shareBonus: %w", err)
		}
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
	case <-jobs.Displaced(): // stopJobs says why
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
	if err := stopJobs(shutdownCtx, handler, jobs.Displaced(), processID); err != nil {
		return err
	}
	handler.CloseIdleConnections()
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// work is the worker's life: its handler's workers run the queue's jobs
// until a signal, then have the engine's time to finish theirs, after
// which the rest go back to the queue; or until a live twin displaced
// the process, which stopped them.
func work(ctx context.Context, handler *upscale.Handler, o options, signals <-chan os.Signal, displaced <-chan struct{}, processID string, logger *slog.Logger) error {
	select {
	case <-ctx.Done():
	case <-signals:
	case <-displaced: // stopJobs says why
	}
	logger.Info("stopping: finishing the jobs under way")
	drain, cancel := context.WithTimeout(context.Background(), o.engineTimeout+time.Minute)
	defer cancel()
	return stopJobs(drain, handler, displaced, processID)
}

// stopJobs stops the handler's job workers. Those of a process that a
// live twin displaced (it was paused while the twin started under its
// -process-id) stopped already: its error says so, for the process to
// exit non-zero and its supervisor to start it again. It asks displaced,
// not the stop's error: a server with no job workers holds the ID by its
// mail sender alone, and its handler's stop has nothing to report.
func stopJobs(drain context.Context, handler *upscale.Handler, displaced <-chan struct{}, processID string) error {
	err := handler.StopJobs(drain)
	select {
	case <-displaced:
		return fmt.Errorf("process ID %q is now held by another live process; exiting so that a supervisor restarts this one under its own ID", processID)
	default:
	}
	if err != nil {
		return fmt.Errorf("stop the job workers: %w", err)
	}
	return nil
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
