// Package upscale serves a paid image-upscaling API from any Go program:
// POST /api/v1/upscale takes {imageUrl, scale, imageType, denoise} with a
// bearer API key, fetches the image, enlarges it, stores the result behind a
// link that expires, and charges one unit of the key's account.
//
// # Mounting
//
// New returns a Handler. Handler.Middleware puts the API (Config.Path,
// /api/v1/upscale by default) and the result links in front of the host's
// own handler. Or mount the Handler, a plain http.Handler, on any router,
// and the BlobStore too when it serves its own links (a LinkServer, as
// MemoryBlobStore is) under its LinkPath.
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
// it: handler.go (the Handler and the order of a request's checks),
// config.go (Config, its defaults and their checks), auth*.go (keys),
// quota*.go (what a request costs, which pool pays, the charging
// protocol, the quota headers), store*.go (results), idempotency*.go,
// ratelimit*.go, fetch*.go (the fetch policy, FetchPolicy, and its URLs, addresses,
// downloads), admission.go and budget.go (the engine's scheduling and
// memory), upscaler.go (the Upscaler and its optional interfaces),
// errors.go (the sentinel errors) and problems.go (every problem code and
// the table that maps errors to them).
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
