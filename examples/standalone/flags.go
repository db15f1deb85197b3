package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/engine/onnx"
)

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
	signUpsPerDay, mailsPerHour, demoImages   int
	trustedProxies                            []netip.Prefix
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

// chargeTimeout is how long the server keeps trying to make a charge
// (upscale.Config.ChargeTimeout); a job's run keeps that much of its time
// for it.
const chargeTimeout = 15 * time.Second

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("standalone", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.storage.addFlags(fs)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8080", "address to listen on (port 0 picks a free port)")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "address of a second listener serving Prometheus metrics at /metrics, such as 127.0.0.1:9090 (default: no metrics)")
	fs.StringVar(&o.configFile, "config", "", "JSON file of plans, accounts and keys (default: one demo account and key)")
	fs.IntVar(&o.demoImages, "demo-images", 100, "without -config: the demo account's images a month (its plan \"demo\"), room to try the API and the dashboard; accounts opened by email get the plan \"free\" (10)")
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
	fs.DurationVar(&o.jobRunTimeout, "job-run-timeout", upscale.DefaultRunTimeout, "longest one run of a job may take before it is stopped and run again; a job's engine has this less the time its charge may take, for learned passes at every size on slow CPUs (a job whose process died is run again within 30 s of its last beat, whatever this is)")
	fs.StringVar(&o.processID, "process-id", "", "names this process among those that run jobs from the database: keep it across restarts, so that a restarted process runs again at once the jobs it had when it died; two live processes cannot share it (default the host name and the absolute -data directory)")
	fs.DurationVar(&o.drainDelay, "drain-delay", 5*time.Second, "after SIGTERM, how long /readyz answers 503 before the listener closes, so load balancers stop sending requests first (SIGINT skips it)")
	fs.StringVar(&o.onnxRuntime, "onnx-runtime", "auto", "what runs -engine onnx's networks: auto (oneDNN and ONNX Runtime, whichever measures faster at start), onednn (oneDNN's convolutions) or onnxruntime (ONNX Runtime)")
	fs.StringVar(&o.onnxRuntimeLib, "onnxruntime-lib", "", "path of libonnxruntime.so.1 for -onnx-runtime auto or onnxruntime (default: $"+onnx.LibraryEnv+", else where make deps installs it)")
	fs.StringVar(&o.onnxPrecision, "onnx-precision", "", "arithmetic -engine onnx's networks may run in: int8, bf16 or fp32, or several comma-separated (default: any the runtimes offer on this CPU); of several, the fastest measured at start")
	fs.StringVar(&o.smtpURL, "smtp-url", os.Getenv(smtpURLEnv), "smtp://user:password@host:587 (STARTTLS, required but for loopback) or smtps://…: the server that mails sign-in links, which lets people sign in and open accounts by email on the dashboard (default $"+smtpURLEnv+", which keeps the password out of the process list)")
	fs.StringVar(&o.mailFrom, "mail-from", "", "the sender of the sign-in mail, such as 'Upscale <no-reply@example.com>'; required with -smtp-url")
	fs.StringVar(&o.signUps, "signups", "open", "with -smtp-url: open (an address without an account opens one, on the config's signUpPlan) or closed (only addresses that have accounts get sign-in links)")
	fs.IntVar(&o.signUpsPerDay, "signups-per-day", 100, "with -signups open: the most accounts opened by email in a day (UTC); past it a link that would open one answers 429 until the next day (standalone accounts opened lists them); 0 means no cap")
	fs.IntVar(&o.mailsPerHour, "mails-per-hour", 1000, "with -smtp-url: the sign-in links this process may mail, whoever asks and for whatever address: that many at once, refilled at that many an hour (so at most twice it in any one hour); past it the page answers as ever but nothing is mailed (metric upscale_dashboard_mails_over_budget_total, logged once an hour)")
	fs.Func("trusted-proxies", "comma-separated addresses or CIDRs of the reverse proxies in front of this server, such as 10.0.0.0/8,192.0.2.7: only from those is X-Forwarded-For (or Forwarded) read, to name the client for the sign-in limits and the log (default none: every client is its connection's address)", func(v string) error {
		prefixes, err := parsePrefixes(v)
		o.trustedProxies = append(o.trustedProxies, prefixes...)
		return err
	})
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
	if least := o.engineTimeout + chargeTimeout; o.jobRunTimeout <= least {
		return o, fmt.Errorf("-job-run-timeout %v is not above -engine-timeout %v and the %v a charge may take: a run could not use the engine's time, nor give up its turn in time", o.jobRunTimeout, o.engineTimeout, chargeTimeout)
	}
	if o.signUps != "open" && o.signUps != "closed" {
		return o, fmt.Errorf("-signups %q: want open or closed", o.signUps)
	}
	if o.signUpsPerDay < 0 {
		return o, errors.New("-signups-per-day cannot be negative")
	}
	if o.mailsPerHour < 1 {
		return o, errors.New("-mails-per-hour must be at least 1")
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

// parsePrefixes reads comma-separated addresses (one host each) and
// CIDRs.
func parsePrefixes(list string) ([]netip.Prefix, error) {
	var prefixes []netip.Prefix
	for item := range strings.SplitSeq(list, ",") {
		item = strings.TrimSpace(item)
		if p, err := netip.ParsePrefix(item); err == nil {
			prefixes = append(prefixes, p.Masked())
		} else if a, err := netip.ParseAddr(item); err == nil {
			prefixes = append(prefixes, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
		} else {
			return nil, fmt.Errorf("%q is neither an address nor a CIDR such as 10.0.0.0/8", item)
		}
	}
	return prefixes, nil
}
