// Package upscale serves a paid image-upscaling API from any Go program:
// POST /api/v1/upscale takes {imageUrl, scale, imageType, denoise} with a
// bearer API key, fetches the image, enlarges it, stores the result behind a
// link that expires, and charges one unit of the key's account. The README
// is the front door; the manual is in docs/, and each section below links
// to its page.
//
// # Mounting
//
// New returns a Handler, and starts nothing: Handler.StartJobs starts the
// job form's workers, Handler.StopJobs stops them. Handler.Middleware puts
// the API (Config.Path, /api/v1/upscale by default, and its jobs,
// Config.Path/jobs/{id}) and the result links in front of the host's own
// handler. Or mount the Handler, a plain http.Handler, on any router, at
// a path and its jobs/ subtree, and the BlobStore too when it serves its
// own links (a LinkServer, as MemoryBlobStore is) under its LinkPath.
// The HTTP contract, headers included: docs/http.md.
//
// # Jobs
//
// A POST with Prefer: respond-async is a job: judged and reserved at
// once, answered 202 with its Location, run by the workers of whichever
// process works the JobQueue, its end posted to its webhookUrl, signed.
// See docs/jobs.md; Idempotency-Key, which both forms honour, is
// docs/idempotency.md.
//
// # Backends
//
// The handler's dependencies are interfaces: KeyStore, QuotaLedger,
// Upscaler and BlobStore are required; IdempotencyStore, RateLimiter,
// JobQueue, WebhookQueue and Metrics are optional. The root package ships
// in-memory defaults; results on local disk are in dirstore, keys, quotas,
// Idempotency-Keys and sessions on SQLite or PostgreSQL in sqlstore,
// results in an S3 bucket in s3store, jobs and webhooks on River in
// riverqueue, and the default Upscaler, on libvips, is in engine/vips (a
// learned one, waifu2x's networks, is in engine/onnx: docs/engines.md),
// so that this package never needs cgo. Every implementation is held to
// one contract by the suites in upscaletest. Several replicas:
// docs/replicas.md.
//
// # Charging
//
// A request reserves one unit before it fetches anything, commits it after
// the result is stored, and releases it on every failure, so failed requests
// are never charged and concurrent requests never spend a unit twice. Which
// pool pays is decided by ChoosePool. A request's path from the host's mux
// to the charge: docs/architecture.md.
//
// # Errors
//
// Every failure is an application/problem+json body with a stable code; the
// sentinel errors of this package are the only errors the handler maps to a
// status, and messages of other errors are logged, never shown. Operating
// it (overload, memory, outages, metrics, health): docs/operating.md;
// hostile callers and sources: docs/security.md.
//
// # Where things are
//
// Each file is named after what it holds, and related files sort beside
// it.
//
// The HTTP entry and the path every request takes, in its order:
//
//   - handler.go: the Handler, New, ServeHTTP, the route table, Middleware.
//   - config.go: Config, its defaults and their checks.
//   - request.go: the body, parsed strictly, and its URL fields' policies.
//   - admit.go: who the caller is: key, rate limit, a place in admission.
//   - auth*.go: keys (KeyStore, the cache, the in-memory store, listing).
//   - ratelimit*.go: RateLimiter and its in-memory default.
//   - admission.go, budget.go: the places and their queue, and memory.
//   - scheduler.go: the engine's slots in two lanes, requests and job
//     runs, and the enlargement of each (enlarge, enlargeForJob).
//   - pipeline.go: fetch, enlarge, store, prepare, commit: the work both
//     forms share (run), and what a fetched source holds.
//   - charge.go: the charging protocol: reserve, commit, release, settle.
//   - quota*.go: what a request costs and which pool pays (the
//     QuotaLedger contract, the in-memory ledger, usage by day, the quota
//     headers).
//   - billing*.go: how payments fill the pools (the BillingLedger
//     contract: grants, reversals and plan terms, each once; its
//     in-memory implementation on MemoryLedger), and what checkouts
//     offered (CheckoutStore, MemoryCheckoutStore).
//   - fetch*.go: the fetch policy (FetchPolicy), its URLs, addresses and
//     downloads.
//   - upscaler.go: the Upscaler and its optional interfaces.
//   - store*.go: results (BlobStore and the in-memory store).
//   - idempotency*.go: Idempotency-Key, its contract and in-memory store.
//   - errors.go, problems.go: the sentinel errors, and the table that maps
//     them to problem codes and statuses.
//
// The job form:
//
//   - job.go: Job, the JobQueue contract and what a run records.
//   - jobsubmit.go: submission: Prefer (respond-async, wait), the checks,
//     the unit held and the source kept, the job queued.
//   - jobresource.go: a job's resource: GET, DELETE, position and
//     estimated start.
//   - jobrun.go: StartJobs and StopJobs, and a job's run: its result
//     stored and its unit charged (workJob, commitJob), and its
//     settlement.
//   - jobmem.go: MemoryJobQueue; workers.go: the worker loop both
//     in-memory queues run.
//   - webhook*.go: the WebhookQueue contract, signing, the in-memory queue
//     and secrets, and delivery (webhookdeliver.go: a job's event, its
//     receiver's checks, each attempt).
//
// Around them: health.go (LiveHandler, ReadyHandler, Pinger), metrics.go
// (the Metrics interface and Load), breaker.go (a store's outage, noticed
// once), sweep.go (sweeps at most once a minute, without a goroutine) and
// doc.go.
package upscale
