package upscale

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
)

var errMethodNotAllowed = errors.New("method not allowed")

// panicError turns a recovered panic into an error that keeps the stack for
// the log; the caller sees internal_error.
func panicError(v any) error {
	return fmt.Errorf("panic: %v\n%s", v, debug.Stack())
}

// problems maps errors to HTTP status, machine code and the detail shown
// when the error carries no explanation of its own (see Explain). It is the
// only place that decides what a caller sees; the first matching row wins.
var problems = []struct {
	err    error
	status int
	code   string
	detail string
}{
	{errMethodNotAllowed, http.StatusMethodNotAllowed, "method_not_allowed", "Use POST with a JSON body, and GET or DELETE for a job."},
	{errJobNotFound, http.StatusNotFound, "job_not_found", "This account has no job with this ID: it was never submitted with this account's keys, or it expired."},
	{ErrUnauthorized, http.StatusUnauthorized, "unauthorized", "Send a valid API key as \"Authorization: Bearer <key>\"; keys are issued on {dashboard}."},
	{ErrInvalidRequest, http.StatusBadRequest, "invalid_request", "The request body must be one JSON object with imageUrl and optional scale, imageType, denoise and, with Prefer: respond-async, webhookUrl."},
	{ErrInvalidImageURL, http.StatusBadRequest, "invalid_image_url", "imageUrl must be an absolute http or https URL of an image."},
	{ErrInvalidWebhookURL, http.StatusBadRequest, "invalid_webhook_url", "webhookUrl must be an absolute http or https URL on a public address, sent with Prefer: respond-async."},
	{ErrInvalidScale, http.StatusBadRequest, "invalid_scale", "scale must be " + scaleList(false) + "."},
	{ErrInvalidImageType, http.StatusBadRequest, "invalid_image_type", "imageType must be \"photo\" or \"anime\"."},
	{ErrInvalidDenoise, http.StatusBadRequest, "invalid_denoise", "denoise must be \"none\", \"low\", \"mid\", \"high\" or \"max\"."},
	{ErrSourceForbidden, http.StatusBadRequest, "source_forbidden", "The image URL leads to an address or port this service does not fetch from; use a public http or https URL."},
	{ErrSourceUnreachable, http.StatusBadRequest, "source_unreachable", "The image could not be downloaded from its URL; check that it is publicly reachable."},
	{ErrSourceUnavailable, http.StatusBadGateway, "source_unavailable", "The image's server failed to deliver it for now; try again later. Nothing was charged."},
	{ErrUnsupportedImage, http.StatusBadRequest, "unsupported_image", "The file is not a JPEG, PNG, WebP, GIF, HEIC, AVIF or TIFF image that can be decoded."},
	{ErrImageTooLarge, http.StatusBadRequest, "image_too_large", "The image is too large for this service or your plan; send a smaller one."},
	{ErrPaidPlanRequired, http.StatusForbidden, "paid_plan_required", "Scales " + scaleList(true) + ", and files above the free tier's size, need {paid}."},
	{ErrQuotaExhausted, http.StatusTooManyRequests, "quota_exhausted", "This account has no images left; {upgrade}."},
	{ErrRateLimited, http.StatusTooManyRequests, "rate_limited", "This API key sends requests faster than it may; wait for the Retry-After. Nothing was charged."},
	{ErrIdempotencyInFlight, http.StatusConflict, "idempotency_in_flight", "A request with this Idempotency-Key is still running; send it again after the Retry-After to get its answer."},
	{ErrIdempotencyKeyReused, http.StatusUnprocessableEntity, "idempotency_key_reused", "This Idempotency-Key was used for a different request; send a new request with a new key."},
	{ErrResultExpired, http.StatusGone, "result_expired", "This request was carried out and charged already, and its result's link has expired; send it with a new Idempotency-Key to enlarge the image again."},
	{ErrOverloaded, http.StatusServiceUnavailable, "overloaded", "The service is working at capacity; try again in a few seconds."},
	{ErrUnavailable, http.StatusServiceUnavailable, "backend_unavailable", "A service this API depends on cannot be reached at the moment; nothing was charged. Try again in a few seconds."},
	{ErrUpstream, http.StatusBadGateway, "upstream_error", "The upscaling engine failed on this image; retrying is safe."},
	{ErrUpstreamTimeout, http.StatusGatewayTimeout, "upstream_timeout", "The upscaling engine did not finish in time; retrying is safe."},
	{context.DeadlineExceeded, http.StatusGatewayTimeout, "timeout", "The request did not finish in the time it was allowed; nothing was charged. Retrying is safe."},
}

// ProblemCodes returns every machine code a problem answer of the handler
// may carry, internal_error included: the list a contract or a client
// switches on.
func ProblemCodes() []string {
	codes := []string{"internal_error"}
	for _, row := range problems {
		if !slices.Contains(codes, row.code) {
			codes = append(codes, row.code)
		}
	}
	return codes
}

// Problem is the application/problem+json body (RFC 9457) of every error.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	// Code is the stable machine-readable name of the error.
	Code string `json:"code"`
	// BuyURL is where the caller buys credits or a plan, on a 429
	// quota_exhausted and a 403 paid_plan_required when the host sells
	// (Wording.BuyURL); empty otherwise.
	BuyURL string `json:"buyUrl,omitempty"`
}

// problemFor is the problem err is answered with, its detail's places
// for the host's words (see Wording) still unfilled.
func problemFor(err error) Problem {
	p := Problem{
		Status: http.StatusInternalServerError,
		Code:   "internal_error",
		Detail: "Something went wrong on our side; try again later.",
	}
	for _, row := range problems {
		if errors.Is(err, row.err) {
			p.Status, p.Code, p.Detail = row.status, row.code, row.detail
			break
		}
	}
	if ce, ok := errors.AsType[*callerError](err); ok && p.Status != http.StatusInternalServerError {
		p.Detail = ce.detail
	}
	p.Type = "urn:upscale:error:" + p.Code
	p.Title = http.StatusText(p.Status)
	return p
}

// problem is the problem err is answered with, in the host's words.
func (h *Handler) problem(err error) Problem {
	p := problemFor(err)
	p.Detail = h.wording.Replace(p.Detail)
	if p.Code == "quota_exhausted" || p.Code == "paid_plan_required" {
		p.BuyURL = h.cfg.Wording.BuyURL
	}
	return p
}

// fail answers err as a problem and returns its code, or "caller_gone"
// when there is nobody left to answer.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) (code string) {
	// Only a caller that went away gets nothing; a deadline the host set
	// on the request (a timeout middleware) still gets its answer.
	if callerGone(r, err) {
		h.cfg.Logger.Debug("upscale: caller went away", "err", err)
		return "caller_gone"
	}
	p := h.problem(err)
	h.cfg.Logger.Log(r.Context(), logLevel(err, p), "upscale: request failed", "status", p.Status, "code", p.Code, "request_id", servedOf(r).requestID, "err", err)
	hdr := w.Header()
	if p.Status == http.StatusUnauthorized {
		hdr.Set("WWW-Authenticate", `Bearer realm="upscale"`)
	}
	if p.BuyURL != "" {
		hdr.Set("Link", "<"+p.BuyURL+`>; rel="payment"`)
	}
	if ra, ok := errors.AsType[*retryAfterError](err); ok {
		hdr.Set("Retry-After", strconv.FormatInt(seconds(ra.after), 10))
	}
	writeJSON(w, p.Status, jsonBody(p))
	return p.Code
}

// isExplained reports whether err already says what went wrong to the
// caller (an Explain'd error, such as the memory budget's refusals).
func isExplained(err error) bool {
	_, ok := errors.AsType[*callerError](err)
	return ok
}

// callerGone reports whether the caller of r, which ended with err, went
// away, so that nothing is answered or recorded for it: its context was
// canceled, but not by an upload's read deadline (net/http cancels the
// context of a request whose body it cannot read, and the caller of an
// upload cut off is still there to be told).
func callerGone(r *http.Request, err error) bool {
	return errors.Is(r.Context().Err(), context.Canceled) && !errors.Is(err, os.ErrDeadlineExceeded)
}

// answerContext is the context to finish r's answer in (its quota
// headers, its history): r's own, or, for an upload cut at its read
// deadline, one that net/http's cancellation does not end.
func answerContext(r *http.Request, err error) context.Context {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return context.WithoutCancel(r.Context())
	}
	return r.Context()
}

// logLevel is how loudly a failure, err answered p, is logged: ERROR only
// for faults of the server itself (its engine failed, a bug), so that
// nobody with a key can fill an operator's error alerts; WARN for
// refusals by design under load, stores out of reach and time running
// out; INFO for what the caller or its source caused, a source's server
// failing (502 source_unavailable) included.
func logLevel(err error, p Problem) slog.Level {
	switch {
	case p.Status < http.StatusInternalServerError || errors.Is(err, ErrSourceUnavailable):
		return slog.LevelInfo
	case p.Status == http.StatusServiceUnavailable || p.Status == http.StatusGatewayTimeout:
		return slog.LevelWarn
	}
	return slog.LevelError
}

// Wording names the host's own places and offers in the sentences callers
// read, for a host that sells through its own site: a problem's detail
// says {dashboard}, {upgrade} and {paid} where these go. Every zero field
// means the default beside it.
type Wording struct {
	// Dashboard is where callers get their API keys. Zero means "the
	// account dashboard".
	Dashboard string
	// Upgrade is what lifts an exhausted quota. Zero means "buy credits or
	// subscribe to the unlimited plan" where the host sells (BuyURL), and
	// else none: an exhausted quota's detail then says when it refills,
	// and never to buy.
	Upgrade string
	// Paid is what paid capability takes. Zero means "a paid plan or
	// credits".
	Paid string
	// BuyURL is the absolute URL where callers buy credits or a plan,
	// such as the dashboard's Billing page. When set, a 429
	// quota_exhausted and a 403 paid_plan_required carry it as the
	// problem's buyUrl and in a Link header (rel="payment"), so that a
	// client can send its user there. Empty means neither.
	BuyURL string
}

func (w Wording) withDefaults() Wording {
	w.Dashboard = cmp.Or(w.Dashboard, "the account dashboard")
	if w.BuyURL != "" {
		w.Upgrade = cmp.Or(w.Upgrade, "buy credits or subscribe to the unlimited plan")
	}
	w.Paid = cmp.Or(w.Paid, "a paid plan or credits")
	return w
}

// replacer fills a detail's places for the host's words. Without an
// Upgrade, the clause that holds it goes: the sentence ends with what the
// plans allow.
func (w Wording) replacer() *strings.Replacer {
	upgrade := []string{"{upgrade}", w.Upgrade}
	if w.Upgrade == "" {
		upgrade = []string{"; {upgrade} to go on before then", "", "; {upgrade}", ""}
	}
	return strings.NewReplacer(append(upgrade, "{dashboard}", w.Dashboard, "{paid}", w.Paid)...)
}

// Megabytes writes a size in bytes as the API's messages and the
// dashboard do, in binary units as limits are set: "25 MB" for 25<<20,
// "1.5 MB", "800 KB".
func Megabytes(n int64) string {
	if n < 1<<20-1<<9 { // below what rounds to 1024 KB
		return strconv.FormatInt((n+1<<9)>>10, 10) + " KB"
	}
	mb := strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64)
	return strings.TrimSuffix(mb, ".0") + " MB"
}

// The sentences callers read as a problem's detail, beside the table's
// defaults above: each is a format for Explain with the sentinel named in
// its group. {dashboard}, {upgrade} and {paid} are filled with the
// host's Wording.
const (
	// ErrInvalidRequest
	msgIdempotencyKeyRepeated = "Send one Idempotency-Key header, not %d."
	msgIdempotencyKeyQuoted   = "The Idempotency-Key header is a quoted string without quotes or backslashes inside, such as \"8e03978e-40d5-43e8-bc93-6894a57f9324\"."
	msgIdempotencyKeyShape    = "The Idempotency-Key must be 1 to %d printable ASCII characters, such as a UUID."
	msgBodyTooLarge           = "The request body is larger than %d bytes; a JSON body names the image by imageUrl: to send the file itself, post multipart/form-data with the file in the part \"image\"."
	msgBodyUnreadable         = "The request body could not be read; send it again."
	msgBodyNotUTF8            = "The request body is not valid UTF-8."
	msgBodyShape              = "The request body must be one JSON object, such as {\"imageUrl\": \"https://example.com/a.png\", \"scale\": 2}."
	msgUnknownField           = "Unknown field %q; the fields are imageUrl, scale, imageType, denoise, format, quality, model and webhookUrl (names are case-sensitive)."
	msgQualityRange           = "quality %s must be a whole number from 1 to 100."
	msgQualityLossless        = "quality is for the lossy formats jpeg, webp and avif; png is lossless: leave quality out."
	msgDuplicateField         = "The field %q appears twice; give each field once."
	msgTrailingData           = "The request body has data after the JSON object; send exactly one object."
	msgScaleUnreadable        = "scale %s is not a number this service can read; use %s."
	msgUploadInJSON           = "A JSON body names its image by imageUrl; to send the file itself, post multipart/form-data with the file in the part \"image\" (curl -F image=@photo.jpg)."
	msgFormNoBoundary         = "The Content-Type multipart/form-data needs its boundary parameter; let your HTTP library write the header (curl -F does)."
	msgUnknownPart            = "Unknown form part %q; the parts are image (the file), scale, imageType, denoise, format, quality, model, webhookUrl, and imageUrl in place of image (names are case-sensitive)."
	msgUploadMissing          = "Send the image: a file in the form part \"image\", or its address in imageUrl."
	msgUploadAndURL           = "Send the image once: a file in the part \"image\" or an imageUrl, not both."
	msgUploadEmpty            = "The form part \"image\" is empty; attach the image's file to it."
	msgFormTooLarge           = "The form's fields, part headers and boundaries take more than %d bytes beside the file; send only the API's fields."
	msgFormUnreadable         = "The multipart body is cut short or malformed; send it again, each field as a form-data part and the file in the part \"image\"."
	msgFormNotUTF8            = "The form field %q is not valid UTF-8."
	msgFormNumber             = "The form field %s is a whole number written in digits, such as 2."
	msgModelShape             = "model is the name of one of this server's networks, as a string of at most 64 characters."
	msgModelUnknown           = "model %q is not one of this server's networks; it has %s."
	msgNoModels               = "This server has no networks to ask for by name: leave model out, and it chooses."
	msgModelScale             = "model %q enlarges ×%d a pass: ask a scale it makes, %s."
	msgUploadTimeout          = "The upload took longer than %v to arrive; send it again over a faster connection, or host the image and send its imageUrl."
	// ErrInvalidImageType, ErrInvalidDenoise
	msgNotOneOf = "%s must be one of %s (case-sensitive)."
	// ErrInvalidImageURL
	msgImageURLRefused    = "imageUrl %s."
	msgImageURLUnusable   = "imageUrl could not be turned into a request; check its syntax."
	msgImageURLMissing    = "imageUrl is required: give the http or https URL of a JPEG, PNG, WebP, GIF, HEIC, AVIF or TIFF image as a string."
	msgImageURLTooLong    = "imageUrl is %d bytes long; at most %d are accepted."
	msgImageURLUnparsable = "imageUrl is not a URL; give an absolute http or https URL, such as https://example.com/photo.jpg."
	// ErrInvalidWebhookURL
	msgWebhookRefused      = "webhookUrl %s."
	msgWebhookUnparsable   = "webhookUrl is not a URL; give an absolute http or https URL, such as https://example.com/hooks/upscale."
	msgWebhookTooLong      = "webhookUrl is %d bytes long; at most %d are accepted."
	msgWebhookNeedsJob     = "webhookUrl is for jobs: send it with the header \"Prefer: respond-async\", or leave it out and read the result from this answer."
	msgWebhookNoJobs       = "webhookUrl is for jobs, which this service does not run; leave it out and read the result from this answer."
	msgWebhookPort         = "webhookUrl uses port %s; only ports %v are called."
	msgWebhookAddress      = "webhookUrl leads to %s; only public addresses are called."
	msgWebhookUnresolvable = "webhookUrl's host %q has no address this service can find; check its spelling."
	// ErrInvalidScale
	msgScaleNotNumber = "scale must be the number %s (not a string)."
	// ErrSourceForbidden
	msgAddressUncheckable = "The image URL leads to an address that cannot be checked."
	msgRedirectRefused    = "The image URL redirects to a URL that %s; only such URLs are fetched."
	msgPortRefused        = "The image URL uses port %s; only ports %v are fetched."
	msgAddressRefused     = "The image URL leads to %s; only public addresses are fetched."
	// ErrSourceUnreachable
	msgTooManyRedirects  = "The image URL redirected more than %d times; link to the image itself."
	msgSourceStatus      = "The image URL answered HTTP %d; it must answer 200 with the image."
	msgSourceEncoded     = "The image URL answered with Content-Encoding %q although no compression was asked for; serve the image file as it is."
	msgSourceOverran     = "The image URL sent more bytes than its Content-Length of %d."
	msgFetchTimeout      = "Downloading the image took longer than %v; host it somewhere faster."
	msgUnknownHost       = "The image URL's host name could not be resolved; check the URL."
	msgSourceUnreachable = "The image could not be downloaded from its URL; check that it is publicly reachable."
	// ErrSourceUnavailable
	msgSourceSlow     = "The image's server did not answer in time; try again later. Nothing was charged."
	msgSourceFailing  = "The image URL answered HTTP %d, a failure of its server's that may pass; try again later. Nothing was charged."
	msgDNSFailing     = "The image URL's host name could not be looked up just now; try again later. Nothing was charged."
	msgSourceBrokeOff = "The image's server refused or broke off the download; try again later. Nothing was charged."
	// ErrImageTooLarge
	msgNeedsMoreMemory = "Enlarging this image needs about %s, more than this server ever gives one image (%s); send a smaller image or a lower scale."
	msgLargerThanPlan  = "The image is larger than %s, the most your plan accepts; send a smaller file."
	// ErrPaidPlanRequired
	msgScaleNeedsPaid = "Scale %d needs {paid}; scales below %d are free."
	msgFileNeedsPaid  = "The image is %s; files above %s, the free tier's limit, need {paid}."
	// ErrQuotaExhausted
	msgFreePoolRefills = "This account has no images left this month. The free pool refills with %d images at %s, in %s; {upgrade} to go on before then."
	// ErrRateLimited
	msgShareHeld = "This %s already has %d requests in progress, the most one account may have at once; send this one again when one of them has finished. Nothing was charged."
	msgKeyRate   = "This API key may send %d requests at once and one more every %v; wait for the Retry-After. Nothing was charged."
	// ErrIdempotencyKeyReused
	msgIdempotencyKeyReused = "This Idempotency-Key was used for a different request in the last %v; send a new request with a new key."
	// ErrResultExpired
	msgResultExpired = "This request was carried out and charged already, and its result's link expired at %s; send it with a new Idempotency-Key to enlarge the image again."
	msgJobExpired    = "This request was submitted as a job already, and the job expired at %s with its result; send it with a new Idempotency-Key to enlarge the image again."
	// ErrUpstream
	msgJobGivenUp = "The job was started several times and never finished: its worker stopped or ran out of time each time. It is given up and nothing was charged; submitting it again is safe."
	// ErrOverloaded
	msgOverloaded = "The service is working at capacity and did not start your request; nothing was charged. Try again in a few seconds."
	// ErrUnavailable
	msgChargeUnknown = "A service this API depends on stopped answering while your request was being charged, and whether it was could not be confirmed; its result is kept. Send it again with an Idempotency-Key to be charged at most once, or see your usage on {dashboard}."
	msgUnavailable   = "A service this API depends on cannot be reached at the moment; your request was not started and nothing was charged. Try again in a few seconds."
)
