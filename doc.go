// Package upscale serves a paid image-upscaling API from any Go program:
// POST /api/v1/upscale takes {imageUrl, scale, imageType, denoise} with a
// bearer API key, fetches the image, enlarges it, stores the result behind a
// link that expires, and charges one unit of the key's account. The README
// is the front door; the manual is in docs/.
//
// A host gives [New] its backends in a [Config] and mounts the [Handler]:
//
//	keys := upscale.NewMemoryKeyStore()
//	keys.AddKey(ctx, "upk_live_...", "acme")
//	ledger := upscale.NewMemoryLedger(upscale.LedgerOptions{})
//	ledger.PutAccount(ctx, upscale.Account{ID: "acme", Plan: upscale.Plan{Name: "free", MonthlyImages: 10, MaxFileBytes: 20 << 20}})
//	blobs, _ := upscale.NewMemoryBlobStore(upscale.MemoryBlobStoreOptions{BaseURL: "https://img.example.com/r"})
//	h, err := upscale.New(upscale.Config{Keys: keys, Ledger: ledger, Upscaler: vips.New(vips.Options{}), Blobs: blobs})
//	if err != nil {
//		log.Fatal(err)
//	}
//	h.StartJobs(ctx) // the job form's workers; h.StopJobs at shutdown
//	http.Handle("/", h.Middleware(mux)) // the API, its jobs and the result links in front of the host's mux
//
// The example of New runs it whole.
//
// # Mounting
//
// New starts nothing: [Handler.StartJobs] starts the job form's workers,
// [Handler.StopJobs] stops them. [Handler.Middleware] puts the API
// (Config.Path, /api/v1/upscale by default, and its jobs,
// Config.Path/jobs/{id}) and the result links in front of the host's own
// handler. Or mount the Handler, a plain http.Handler, on any router, at
// a path and its jobs/ subtree, and the BlobStore too when it serves its
// own links (a [LinkServer], as [MemoryBlobStore] is) under its LinkPath.
// The HTTP contract, headers included: docs/http.md.
//
// # Jobs
//
// A POST with Prefer: respond-async is a [Job]: judged and reserved at
// once, answered 202 with its Location, run by the workers of whichever
// process works the [JobQueue], its end posted to its webhookUrl, signed
// ([WebhookQueue], [WebhookSecrets]). See docs/jobs.md; Idempotency-Key,
// which both forms honour ([IdempotencyStore]), is docs/idempotency.md.
//
// # Backends
//
// The handler's dependencies are interfaces: [KeyStore], [QuotaLedger],
// [Upscaler] and [BlobStore] are required; [IdempotencyStore],
// [RateLimiter], [JobQueue], [WebhookQueue] and [Metrics] are optional.
// The root package ships in-memory defaults; results on local disk are in
// dirstore, keys, quotas, Idempotency-Keys and sessions on SQLite or
// PostgreSQL in sqlstore, results in an S3 bucket in s3store, jobs and
// webhooks on River in riverqueue, and the default Upscaler, on libvips,
// is in engine/vips (a learned one, waifu2x's networks, is in engine/onnx:
// docs/engines.md), so that this package never needs cgo. Every
// implementation is held to one contract by the suites in upscaletest.
// Several replicas: docs/replicas.md. Payments fill the pools through a
// [BillingLedger] (billing/stripebilling sells through Stripe:
// docs/billing.md).
//
// # Charging
//
// A request reserves one unit before it fetches anything, commits it after
// the result is stored, and releases it on every failure, so failed requests
// are never charged and concurrent requests never spend a unit twice. Which
// pool pays is decided by [ChoosePool]. A request's path from the host's
// mux to the charge, and the package's files one by one:
// docs/architecture.md.
//
// # Errors
//
// Every failure is an application/problem+json body with a stable code; the
// sentinel errors of this package ([ErrInvalidRequest] and the rest) are
// the only errors the handler maps to a status, and messages of other
// errors are logged, never shown. Operating it (overload, memory, outages,
// metrics, health): docs/operating.md; hostile callers and sources:
// docs/security.md.
package upscale
