package upscale

import (
	"errors"
	"fmt"
	"time"
)

// The sentinel errors below are the whole error vocabulary of the package.
// Implementations of the package's interfaces (the stores, the queues,
// the Upscaler) wrap them with %w; the handler
// recognises them with errors.Is and maps each to one HTTP status and machine
// code in the table in problems.go. Only the engine's own deadline
// (Config.EngineTimeout) is ErrUpstreamTimeout; any other
// context.DeadlineExceeded, a store's or the host's deadline for the
// request, is answered 504 timeout.
var (
	// ErrInvalidRequest means the body is not one JSON object of the
	// documented shape (bad JSON, unknown field, wrong type, too large).
	ErrInvalidRequest = errors.New("invalid request")
	// ErrInvalidImageURL means imageUrl is missing or not an absolute
	// http/https URL the service will fetch.
	ErrInvalidImageURL = errors.New("invalid image url")
	// ErrInvalidWebhookURL means webhookUrl is not an absolute http/https
	// URL the service will call, on an address and port the fetch policy
	// allows; or it was sent without Prefer: respond-async.
	ErrInvalidWebhookURL = errors.New("invalid webhook url")
	// ErrInvalidScale means scale is not one of Scales().
	ErrInvalidScale = errors.New("invalid scale")
	// ErrInvalidImageType means imageType is not "photo" or "anime".
	ErrInvalidImageType = errors.New("invalid image type")
	// ErrInvalidDenoise means denoise is not one of the documented levels.
	ErrInvalidDenoise = errors.New("invalid denoise")
	// ErrSourceForbidden means imageUrl points, directly or through a
	// redirect, at an address or port the fetch policy refuses.
	ErrSourceForbidden = errors.New("source forbidden")
	// ErrSourceUnreachable means the image could not be downloaded for a
	// reason retrying will not cure: an unknown host name, a 4xx answer,
	// too many redirects, or the fetch's own deadline (Config.Fetch.Timeout).
	ErrSourceUnreachable = errors.New("source unreachable")
	// ErrSourceUnavailable means the source's server failed in a way that
	// may pass: it answered 5xx, 408 or 429, refused or broke off the
	// connection, or its name's DNS server failed. The caller gets 502
	// source_unavailable, retrying later is safe, and an Idempotency-Key
	// does not keep it.
	ErrSourceUnavailable = errors.New("source unavailable")
	// ErrUnsupportedImage means the bytes are not an image of a format
	// the Upscaler reads (engine/vips: JPEG, PNG, WebP, GIF, HEIC, AVIF,
	// TIFF) that can be decoded.
	ErrUnsupportedImage = errors.New("unsupported image")
	// ErrImageTooLarge means the file or its pixel dimensions exceed a limit.
	ErrImageTooLarge = errors.New("image too large")
	// ErrUnauthorized means the API key is missing, malformed, unknown or
	// revoked.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrPaidPlanRequired means the request needs paid capability (scale 8
	// or 16, or a file above the free tier's size) and the account has
	// neither a paid plan nor credits.
	ErrPaidPlanRequired = errors.New("paid plan required")
	// ErrQuotaExhausted means no pool that may pay for the request has a
	// unit left.
	ErrQuotaExhausted = errors.New("quota exhausted")
	// ErrOverloaded means the service refused the request without starting
	// it, because it is working at capacity (Config.Capacity.QueueLength); retrying
	// after the Retry-After it was given is safe. Nothing was reserved or
	// fetched.
	ErrOverloaded = errors.New("overloaded")
	// ErrUnavailable means a store could not reach its server (a database,
	// object storage) or the server refused work for the moment. Stores
	// wrap it for failures that retrying later may cure, and only for those:
	// the handler answers 503 backend_unavailable with a Retry-After, and
	// calls that store for new requests at most once a second until it
	// answers again (see Handler). Nothing is charged.
	ErrUnavailable = errors.New("backend unavailable")
	// ErrUpstream means the upscaling engine failed; retrying is safe.
	ErrUpstream = errors.New("upstream error")
	// ErrUpstreamTimeout means the engine did not finish before
	// Config.EngineTimeout; retrying is safe.
	ErrUpstreamTimeout = errors.New("upstream timeout")
	// ErrRateLimited means the API key sent requests faster than
	// Config.RateLimiter allows; the caller gets 429 rate_limited with a
	// Retry-After. A RateLimiter's own outage is ErrUnavailable.
	ErrRateLimited = errors.New("rate limited")
	// ErrIdempotencyInFlight means a request with the same Idempotency-Key
	// is still running; the caller gets 409 and a Retry-After.
	ErrIdempotencyInFlight = errors.New("idempotency key in flight")
	// ErrIdempotencyKeyReused means the Idempotency-Key was used for a
	// different request; the caller gets 422.
	ErrIdempotencyKeyReused = errors.New("idempotency key reused")
	// ErrResultExpired means a request was replayed for its
	// Idempotency-Key after its result's link had expired; the caller gets
	// 410 and should send a new key to enlarge the image again.
	ErrResultExpired = errors.New("result expired")
	// ErrKeyConflict means KeyAdmin.AddKey was given a key that belongs to
	// another account or was revoked. It never reaches an API caller.
	ErrKeyConflict = errors.New("key conflict")
	// ErrNotFound means a reservation, account or stored item does not
	// exist (or no longer does). It never reaches an API caller as such.
	ErrNotFound = errors.New("not found")
	// ErrWebhookGone is what a WebhookQueue's deliver returns when the
	// receiver answered 410 Gone: it wants no more of that webhook, which
	// is not tried again. It never reaches an API caller.
	ErrWebhookGone = errors.New("webhook receiver gone")
	// ErrJobCanceled is the cause (context.Cause) a JobQueue gives a
	// run's context when its job is canceled, as against its worker
	// stopping: the run gives the job's unit back, where a stopped run
	// keeps it held for the run that takes the job over. It never
	// reaches an API caller.
	ErrJobCanceled = errors.New("job canceled")
)

// retryAfterError is an error that tells the caller when to try again:
// the handler sends after as Retry-After, in whole seconds.
type retryAfterError struct {
	err   error
	after time.Duration
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

// callerError is an error whose message was written for the API caller. The
// handler shows the message as the problem detail; the message of any other
// error is logged, never shown, because it may carry paths, addresses or keys.
type callerError struct {
	sentinel error
	detail   string
}

func (e *callerError) Error() string { return e.detail }
func (e *callerError) Unwrap() error { return e.sentinel }

// Explain returns an error that wraps sentinel (one of the Err values of
// this package) and whose message the handler shows to the API caller as the
// problem detail. Use it only for sentences that are safe and useful to show,
// such as a limit the caller exceeded.
func Explain(sentinel error, format string, args ...any) error {
	return &callerError{sentinel: sentinel, detail: fmt.Sprintf(format, args...)}
}
