package upscale

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path"
	"runtime"
	"strings"
	"time"
)

// Config configures a Handler. The four stores are required; every other
// field's zero value means the default given beside it.
type Config struct {
	Keys     KeyStore    // resolves API keys to accounts; required
	Ledger   QuotaLedger // charges accounts; required
	Upscaler Upscaler    // enlarges images, e.g. engine/vips; required
	Blobs    BlobStore   // keeps results behind expiring links; required

	// Idempotency keeps the answers of requests sent with an
	// Idempotency-Key header, so that a retry of a request whose answer
	// was lost gets that answer again and is not charged twice (see
	// IdempotencyStore). Nil means a MemoryIdempotencyStore, which holds
	// for one process only: replicas share sqlstore.Store instead.
	Idempotency IdempotencyStore
	// IdempotencyTTL is how long a key and its answer are kept. Zero means
	// 24 hours, which is also the most (CommitMemory).
	IdempotencyTTL time.Duration
	// Jobs keeps the jobs of the job form (a POST with Prefer:
	// respond-async, docs/jobs.md) and hands them to workers. Nil means
	// a MemoryJobQueue, for one process. The job form needs Blobs to be a
	// BlobReader (a job's source waits there for its worker) and Ledger a
	// ReservationHolder (a job's unit is held for its life): with Jobs
	// nil and stores without them, every request is answered as it runs,
	// whatever it prefers; with Jobs set, New refuses such stores.
	Jobs JobQueue
	// JobTTL is how long a job, its source and its unit's hold last from
	// its submission: a job not finished by then never runs, and is
	// forgotten. Zero means 24 hours, which is also the most
	// (CommitMemory).
	JobTTL time.Duration
	// JobWorkers is how many jobs this Handler runs at once, from
	// StartJobs until StopJobs. Zero means Capacity.EngineConcurrency;
	// negative runs none, for API replicas beside processes that only
	// work.
	JobWorkers int
	// JobShare is how many jobs of one account are queued or running
	// before its next ones wait behind other accounts' (Job.Priority):
	// an account that sends many jobs at once has JobShare of them in
	// turn with everyone else's first ones, the next JobShare behind
	// those, and so on. Zero means half of Capacity.EngineConcurrency, at
	// least 1. It needs a JobQueue that is a JobCounter.
	JobShare int
	// Webhooks keeps the webhooks of ended jobs (a job's webhookUrl)
	// until they are delivered, by the processes that run jobs
	// (JobWorkers), under the Fetch policy. Nil means a
	// MemoryWebhookQueue, for one process.
	Webhooks WebhookQueue
	// WebhookSecrets keeps the secrets that sign each account's webhooks;
	// an account's first webhookUrl makes its first one. Nil means a
	// MemoryWebhookSecrets, for one process.
	WebhookSecrets WebhookSecrets
	// History, when set, keeps each account's calls, requests and jobs,
	// for its own pages (the dashboard's History). MemoryCallHistory keeps
	// them in one process; sqlstore.Store in its database. Nil means none
	// is kept.
	History CallHistory
	// WebhookLog, when set, keeps each webhook's delivery attempts for
	// its account's pages (the dashboard's Webhooks): MemoryWebhookLog in
	// one process, sqlstore.Store in its database. Nil means none.
	WebhookLog WebhookLog
	// RateLimiter limits how often each API key may call, on top of its
	// account's quota; refusals are 429 rate_limited with a Retry-After.
	// MemoryRateLimiter limits within one process. Nil means no limit.
	RateLimiter RateLimiter
	// Path is the API's path: the Handler answers POST Path, and GET and
	// DELETE Path/jobs/{id}, a job's resource, and Middleware routes those
	// paths to the Handler. A host that mounts the Handler itself may
	// mount it at Path and Path/jobs/, or at a path of its own and that
	// path's jobs/ (see Handler), with or without a prefix it strips: a
	// job's Location is always the path the caller sent its POST to, then
	// /jobs/ and the job's ID. Zero means "/api/v1/upscale". It is a clean
	// absolute path without a trailing slash, braces or spaces.
	Path string
	// LinkTTL is how long a result's link works. Zero means one hour. New
	// refuses one longer than the BlobStore's links can last
	// (ExpiryLimiter).
	LinkTTL time.Duration
	// EngineTimeout bounds the Upscaler's work on one request, queueing
	// included; past it the caller gets 504. Zero means 60 seconds.
	EngineTimeout time.Duration
	// ChargeTimeout bounds how long the handler keeps trying to commit the
	// charge of a finished image, or to give back an unused unit, while the
	// ledger is unavailable, retrying with backoff. A result whose charge
	// cannot be committed in that time is deleted, never given away. Zero
	// means 15 seconds. New refuses a QuotaLedger (ReservationExpirer)
	// whose reservations do not outlive the longest request, twice
	// Fetch.Timeout, EngineTimeout and ChargeTimeout.
	ChargeTimeout time.Duration
	// FreeTierMaxFileBytes is the largest source file a request may have
	// without needing paid capability. Zero means 5 MiB. A plan whose
	// MaxFileBytes is zero accepts files up to this size.
	FreeTierMaxFileBytes int64
	// Capacity bounds the work the handler takes on at once.
	Capacity Capacity
	// Fetch is where and how source images are downloaded.
	Fetch FetchPolicy
	// Wording names the host's own places and offers in the sentences
	// callers read.
	Wording Wording
	// Metrics receives request counts, step durations and sizes, and reads
	// the handler's load; see package prommetrics. Nil means none.
	Metrics Metrics
	// Logger receives every failure in full. Nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
}

// Capacity bounds the work a Handler takes on at once (docs/operating.md,
// "Overload" and "Memory").
type Capacity struct {
	// EngineConcurrency is how many images (requests and job runs) the
	// handler lets the Upscaler work on at once. Zero means the Upscaler's own Concurrency when it is
	// a ConcurrentUpscaler, else the number of CPUs.
	EngineConcurrency int
	// QueueLength is how many more requests may be admitted beyond those in
	// the engine: fetching their source or waiting for the engine. A request
	// that finds the queue full, or whose expected wait for the engine
	// already passes EngineTimeout, is refused at once with 503
	// overloaded and a Retry-After, before anything is reserved or fetched.
	// Zero means 4 × EngineConcurrency.
	QueueLength int
	// AccountShare is how many of the EngineConcurrency + QueueLength
	// places the requests of one account (all its keys together) may hold
	// at once, so that one account's slow sources or floods cannot refuse
	// other accounts. A request beyond it is refused with 429 rate_limited
	// and a Retry-After, before anything is reserved or fetched. Zero
	// means half of the places, at least one.
	AccountShare int
	// JobSlots is how many of the EngineConcurrency slots job runs may
	// hold at once; the others are kept for requests, which also take a
	// free slot ahead of every job run waiting. Zero means all but one
	// when EngineConcurrency is more than one, else the one (requests
	// behind a job run then see it in their expected wait, and are
	// refused at once with 503 overloaded when it is too long).
	JobSlots int
	// MemoryBudget bounds the memory images (requests and job runs) hold
	// at once: source bytes while downloading and held, and the engine's
	// working memory as its MemoryEstimator reads it from the source's
	// header (a job run takes its share only when no request waits). A
	// request waits
	// for its share within its deadlines (Fetch.Timeout for the download,
	// EngineTimeout for the engine) or is refused with 503 overloaded; one
	// that needs more than the whole budget is image_too_large. Zero means
	// 1 GiB. The process needs a constant on top (the Go runtime,
	// libvips' caches and threads, connection buffers; see
	// docs/operating.md, "Memory").
	MemoryBudget int64
	// IdleRelease is how long the handler waits, once no request is in
	// flight, before it gives memory back to the system: a garbage
	// collection that returns the Go heap's free pages
	// (debug.FreeOSMemory), and the Upscaler's own ReleaseMemory when it
	// is a MemoryReleaser. Without it a burst of large images leaves the
	// process holding its peak (docs/operating.md, "Memory"). Zero means
	// 5 seconds; negative turns it off, for hosts that manage memory
	// themselves.
	IdleRelease time.Duration
}

// refuseOldMethods refuses a backend written against an optional
// interface's earlier methods: it compiles, and without this it would lose
// what the interface gives without a word (CHANGELOG.md).
func (cfg Config) refuseOldMethods() error {
	_, oldSizer := cfg.Upscaler.(interface {
		SourceSize([]byte) (int, int, error)
	})
	if _, sizer := cfg.Upscaler.(SizeReader); oldSizer && !sizer {
		return errors.New("upscale: Config.Upscaler has SourceSize(src) (width, height, err), which SizeReader no longer reads: rename it SourcePixels(src) (int64, error) and return width × height × frames, so that its queued jobs' work is counted")
	}
	_, oldCount := cfg.Jobs.(interface {
		CountJobs(context.Context) (int, int, error)
	})
	_, newCount := cfg.Jobs.(interface {
		CountJobs(context.Context) (JobCounts, error)
	})
	if _, counter := cfg.Jobs.(JobCounter); (oldCount || newCount) && !counter {
		return errors.New("upscale: Config.Jobs has CountJobs but is no JobCounter: a JobCounter's CountJobs(ctx) returns a JobCounts, and it has CountAccountJobs(ctx, accountID) (int, error); without both the queue's gauges read -1 and each account's share of the workers (Config.JobShare) is not kept")
	}
	return nil
}

// refuseHalfAJobForm refuses a Jobs given with stores that cannot carry
// the job form: every Prefer: respond-async would be answered as it runs,
// and the queue the host set up would never see a job.
func (cfg Config) refuseHalfAJobForm() error {
	if cfg.Jobs == nil {
		return nil
	}
	if _, ok := cfg.Blobs.(BlobReader); !ok {
		return errors.New("upscale: Config.Jobs is set but Config.Blobs is no BlobReader: a job's source waits in the BlobStore for its worker; give a BlobStore that reads back (MemoryBlobStore, dirstore, s3store) or leave Jobs nil to answer every request as it runs")
	}
	if _, ok := cfg.Ledger.(ReservationHolder); !ok {
		return errors.New("upscale: Config.Jobs is set but Config.Ledger is no ReservationHolder: a job's unit is held until it ends; give a ledger that holds reservations (MemoryLedger, sqlstore) or leave Jobs nil to answer every request as it runs")
	}
	return nil
}

// withDefaults checks cfg and returns it with every zero field set to its
// default. Each mistake is named by its field.
func (cfg Config) withDefaults() (Config, error) {
	for _, required := range []struct {
		name string
		set  bool
	}{{"Keys", cfg.Keys != nil}, {"Ledger", cfg.Ledger != nil}, {"Upscaler", cfg.Upscaler != nil}, {"Blobs", cfg.Blobs != nil}} {
		if !required.set {
			return cfg, fmt.Errorf("upscale: Config.%s is required", required.name)
		}
	}
	if err := cfg.refuseOldMethods(); err != nil {
		return cfg, err
	}
	if err := cfg.refuseHalfAJobForm(); err != nil {
		return cfg, err
	}
	for _, f := range []struct {
		name     string
		negative bool
	}{
		{"IdempotencyTTL", cfg.IdempotencyTTL < 0}, {"JobTTL", cfg.JobTTL < 0}, {"JobShare", cfg.JobShare < 0}, {"LinkTTL", cfg.LinkTTL < 0}, {"EngineTimeout", cfg.EngineTimeout < 0},
		{"ChargeTimeout", cfg.ChargeTimeout < 0}, {"FreeTierMaxFileBytes", cfg.FreeTierMaxFileBytes < 0},
		{"Capacity.EngineConcurrency", cfg.Capacity.EngineConcurrency < 0}, {"Capacity.QueueLength", cfg.Capacity.QueueLength < 0},
		{"Capacity.AccountShare", cfg.Capacity.AccountShare < 0}, {"Capacity.MemoryBudget", cfg.Capacity.MemoryBudget < 0}, {"Capacity.JobSlots", cfg.Capacity.JobSlots < 0},
		{"Fetch.Timeout", cfg.Fetch.Timeout < 0},
	} {
		if f.negative {
			return cfg, fmt.Errorf("upscale: Config.%s cannot be negative", f.name)
		}
	}
	c := &cfg.Capacity
	if c.EngineConcurrency == 0 {
		c.EngineConcurrency = runtime.NumCPU()
		if u, ok := cfg.Upscaler.(ConcurrentUpscaler); ok {
			c.EngineConcurrency = max(u.Concurrency(), 1)
		}
	}
	if c.JobSlots > c.EngineConcurrency {
		return cfg, fmt.Errorf("upscale: Config.Capacity.JobSlots %d is more than the engine's %d slots", c.JobSlots, c.EngineConcurrency)
	}
	c.JobSlots = cmp.Or(c.JobSlots, max(c.EngineConcurrency-1, 1))
	c.QueueLength = cmp.Or(c.QueueLength, 4*c.EngineConcurrency)
	c.AccountShare = cmp.Or(c.AccountShare, max((c.EngineConcurrency+c.QueueLength)/2, 1))
	c.MemoryBudget = cmp.Or(c.MemoryBudget, 1<<30)
	c.IdleRelease = cmp.Or(c.IdleRelease, 5*time.Second)

	cfg.Path = cmp.Or(cfg.Path, "/api/v1/upscale")
	// A path that escaping changes would not be matched as written.
	if cfg.Path != path.Clean(cfg.Path) || !strings.HasPrefix(cfg.Path, "/") || cfg.Path == "/" ||
		(&url.URL{Path: cfg.Path}).EscapedPath() != cfg.Path || strings.ContainsAny(cfg.Path, "{}") {
		return cfg, fmt.Errorf("upscale: Config.Path %q is not a clean absolute path without a trailing slash, braces, spaces or characters a URL escapes, such as /api/v1/upscale", cfg.Path)
	}
	if buy := cfg.Wording.BuyURL; buy != "" {
		u, err := url.Parse(buy)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || strings.ContainsAny(buy, "<>\" \t\r\n") {
			return cfg, fmt.Errorf("upscale: Config.Wording.BuyURL %q is not an absolute http or https URL without spaces, quotes or angle brackets", buy)
		}
	}
	cfg.IdempotencyTTL = cmp.Or(cfg.IdempotencyTTL, 24*time.Hour)
	if cfg.IdempotencyTTL > CommitMemory {
		return cfg, fmt.Errorf("upscale: Config.IdempotencyTTL is %v, longer than the %v a QuotaLedger is bound to remember a commit (CommitMemory); a takeover after that could not tell a charged request from one never charged", cfg.IdempotencyTTL, CommitMemory)
	}
	cfg.JobTTL = cmp.Or(cfg.JobTTL, 24*time.Hour)
	if cfg.JobTTL > CommitMemory {
		return cfg, fmt.Errorf("upscale: Config.JobTTL is %v, longer than the %v a QuotaLedger is bound to remember a commit (CommitMemory); a job run again after that could be charged twice", cfg.JobTTL, CommitMemory)
	}
	cfg.LinkTTL = cmp.Or(cfg.LinkTTL, time.Hour)
	if limit, ok := cfg.Blobs.(ExpiryLimiter); ok && max(cfg.LinkTTL, cfg.JobTTL) > limit.MaxLinkTTL() {
		return cfg, fmt.Errorf("upscale: Config.LinkTTL is %v and Config.JobTTL %v, but the BlobStore keeps items at most %v", cfg.LinkTTL, cfg.JobTTL, limit.MaxLinkTTL())
	}
	cfg.EngineTimeout = cmp.Or(cfg.EngineTimeout, 60*time.Second)
	cfg.Fetch.Timeout = cmp.Or(cfg.Fetch.Timeout, 20*time.Second)
	cfg.ChargeTimeout = cmp.Or(cfg.ChargeTimeout, 15*time.Second)
	if ttl, ok := cfg.Ledger.(ReservationExpirer); ok && ttl.ReservationTTL() <= cfg.requestBound() {
		return cfg, fmt.Errorf("upscale: Config.ChargeTimeout: the QuotaLedger's reservations last %v, not longer than a request may (%v: twice Fetch.Timeout, EngineTimeout and ChargeTimeout); a reservation must outlive its request, or a result could be delivered uncharged", ttl.ReservationTTL(), cfg.requestBound())
	}
	cfg.FreeTierMaxFileBytes = cmp.Or(cfg.FreeTierMaxFileBytes, 5<<20)
	if cfg.Fetch.AllowedPorts == nil {
		cfg.Fetch.AllowedPorts = []uint16{80, 443}
	}
	cfg.Wording = cfg.Wording.withDefaults()
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Now = clock(cfg.Now)
	if cfg.Metrics == nil {
		cfg.Metrics = noMetrics{}
	}
	if cfg.JobWorkers == 0 {
		cfg.JobWorkers = c.EngineConcurrency
	}
	cfg.JobShare = cmp.Or(cfg.JobShare, max(c.EngineConcurrency/2, 1))
	if cfg.Jobs == nil {
		cfg.Jobs = NewMemoryJobQueue(MemoryJobQueueOptions{Now: cfg.Now})
	}
	if cfg.Idempotency == nil {
		cfg.Idempotency = NewMemoryIdempotencyStore(MemoryIdempotencyStoreOptions{Now: cfg.Now})
	}
	if cfg.Webhooks == nil {
		cfg.Webhooks = NewMemoryWebhookQueue(MemoryWebhookQueueOptions{Now: cfg.Now})
	}
	if cfg.WebhookSecrets == nil {
		cfg.WebhookSecrets = NewMemoryWebhookSecrets(MemoryWebhookSecretsOptions{Now: cfg.Now})
	}
	return cfg, nil
}

// requestBound is longer than any request can take: its download, its
// engine time (queueing included) and its charge (ChargeTimeout), and
// as much again for the stores' calls between them. It is the lease of an
// Idempotency-Key's claim, and a reservation must outlive it.
func (cfg Config) requestBound() time.Duration {
	return 2 * (cfg.Fetch.Timeout + cfg.EngineTimeout + cfg.ChargeTimeout)
}

// clock is now, or time.Now when now is nil: every Now option's default.
func clock(now func() time.Time) func() time.Time {
	if now == nil {
		return time.Now
	}
	return now
}
