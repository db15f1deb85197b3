// Package upscale serves a paid image-upscaling API from any Go program:
// POST /api/v1/upscale takes {imageUrl, scale, imageType, denoise} with a
// bearer API key, fetches the image, enlarges it, stores the result behind a
// link that expires, and charges one unit of the key's account.
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
//
// # Jobs
//
// A POST with Prefer: respond-async is a job: judged and reserved at
// once, answered 202 with its Location, run by the workers of whichever
// process works the JobQueue, its end posted to its webhookUrl, signed.
//
// # Backends
//
// The handler's dependencies are interfaces: KeyStore, QuotaLedger,
// Upscaler and BlobStore are required; IdempotencyStore, RateLimiter and
// Metrics are optional. The root package ships in-memory defaults for the
// stores; results on local disk are in dirstore, keys, quotas and
// Idempotency-Keys on SQLite or PostgreSQL in sqlstore, results in an S3
// bucket in s3store, and the default Upscaler, on libvips, is in
// engine/vips (a learned one, waifu2x's networks on ONNX Runtime, is in
// engine/onnx), so that this package never needs cgo. Every
// implementation is held to one contract by the suites in upscaletest.
//
// # Where things are
//
// Each file is named after what it holds, and related files sort beside
// it: handler.go (the Handler, its route table and the order of a
// request's checks), config.go (Config, its defaults and their checks),
// auth*.go (keys), quota*.go (what a request costs, which pool pays, the
// charging protocol, the quota headers), store*.go (results),
// idempotency*.go, ratelimit*.go, fetch*.go (the fetch policy,
// FetchPolicy, and its URLs, addresses, downloads), admission.go and
// budget.go (the engine's scheduling and memory), upscaler.go (the
// Upscaler and its optional interfaces), errors.go (the sentinel errors)
// and problems.go (every problem code and the table that maps errors to
// them). The job form: job.go (Job, the JobQueue contract and what a run
// records), jobmem.go (MemoryJobQueue and the in-memory worker loop),
// jobserve.go (submission, Prefer, the job's resource and its
// cancellation), jobrun.go (StartJobs and StopJobs, a job's priority, its
// run: where its result is stored and its unit charged, and its
// settlement), jobwebhook.go (a job's webhook: its secret, its event and
// its delivery), webhook*.go (the WebhookQueue contract, signing, the
// in-memory queue and secrets).
//
// # Charging
//
// A request reserves one unit before it fetches anything, commits it after
// the result is stored, and releases it on every failure, so failed requests
// are never charged and concurrent requests never spend a unit twice. Which
// pool pays is decided by ChoosePool.
//
// # Errors
//
// Every failure is an application/problem+json body with a stable code; the
// sentinel errors of this package are the only errors the handler maps to a
// status, and messages of other errors are logged, never shown.
package upscale
