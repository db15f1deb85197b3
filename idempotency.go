package upscale

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// IdempotencyStore keeps the answers of requests sent with an
// Idempotency-Key header (draft-ietf-httpapi-idempotency-key-header-07),
// so that a caller who retries a request whose answer it never got
// receives that answer again instead of a second charge. Keys belong to an
// account: two accounts may use the same key independently.
// MemoryIdempotencyStore is the default, for one process; sqlstore.Store
// shares the keys between replicas. upscaletest.TestIdempotencyStore holds
// every implementation to this contract. Every method returns an error
// wrapping ErrUnavailable when the store's server cannot be reached.
type IdempotencyStore interface {
	// Claim records that claim's request is starting. It returns nil, nil
	// when the caller is to run the request, and must then call Keep or
	// Forget: the key was unused, its answer has been kept for longer
	// than claim.TTL, or its last claim ended unfinished and unprepared
	// more than its lease ago (its request died with its process before
	// it could have been charged). It returns the kept answer when the
	// key's request with the same fingerprint has finished.
	//
	// A claim whose request prepared its answer (Prepare) but never kept
	// it, and whose lease has ended, is taken over: claim replaces it,
	// with a new lease, and Claim returns the prepared answer, whose
	// Reservation is set. The caller then finds out from the ledger
	// whether that request was charged, and calls Keep or Forget.
	//
	// It returns an *InFlightError (wrapping ErrIdempotencyInFlight) when
	// the key's request is still running, and an error wrapping
	// ErrIdempotencyKeyReused when the key was used for a request with
	// another fingerprint. Of concurrent claims of one key, exactly one
	// gets nil, nil or the prepared answer.
	Claim(ctx context.Context, claim IdempotencyClaim) (*IdempotentAnswer, error)
	// Prepare records, before the request's charge is committed, the
	// answer it will get and, in answer.Reservation, the reservation that
	// pays for it, so that whoever takes the claim over after a crash can
	// tell whether it was charged. The lease is unchanged. It returns an
	// error wrapping ErrNotFound when claim no longer holds the key (its
	// Token was taken over) or the answer was kept already.
	Prepare(ctx context.Context, claim IdempotencyClaim, answer IdempotentAnswer) error
	// Keep keeps answer (its Reservation empty) for the claimed key until
	// claim.TTL after the claim, in place of a prepared answer if there is
	// one. It returns an error wrapping ErrNotFound when claim no longer
	// holds the key or its answer was kept already.
	Keep(ctx context.Context, claim IdempotencyClaim, answer IdempotentAnswer) error
	// Forget forgets a claimed key whose request ended without an answer
	// worth keeping (a failure that is safe to retry, and never charged),
	// so that the next request with the key runs. Forgetting a key that
	// claim does not hold, or whose answer is kept, does nothing and is not
	// an error.
	Forget(ctx context.Context, claim IdempotencyClaim) error
}

// IdempotencyClaim is one request's claim of an Idempotency-Key.
type IdempotencyClaim struct {
	AccountID, Key string
	// Fingerprint identifies the request: the same key with another
	// fingerprint is refused.
	Fingerprint [sha256.Size]byte
	// Token identifies this claim among the key's claims over time: a
	// store's Prepare, Keep and Forget act only while the key's claim is
	// still this one, so a request whose claim was taken over cannot
	// overwrite its successor's answer.
	Token string
	// Lease is how long an unfinished claim holds the key.
	Lease time.Duration
	// TTL is how long the key and its answer are kept.
	TTL time.Duration
}

// IdempotentAnswer is the kept answer of a request: its status and the
// JSON body it was sent with.
type IdempotentAnswer struct {
	Status int
	Body   []byte
	// LinkExpires is, for a 200, when the result's link stops working.
	LinkExpires time.Time
	// Reservation is set on a prepared answer: the reservation whose
	// commit decides whether the request was charged.
	Reservation string
}

// InFlightError is Claim's error while the key's request still runs. The
// handler answers 409 with a Retry-After of the lease left: by then the
// request has answered, or its claim can be taken over.
type InFlightError struct {
	Key       string
	LeaseEnds time.Time
}

// Error names the key and when its lease ends.
func (e *InFlightError) Error() string {
	return fmt.Sprintf("idempotency key %q: %v until %s", e.Key, ErrIdempotencyInFlight, e.LeaseEnds.UTC().Format(time.RFC3339))
}

// Is makes an InFlightError match ErrIdempotencyInFlight.
func (e *InFlightError) Is(target error) bool { return target == ErrIdempotencyInFlight }

// MaxIdempotencyKeyBytes is the longest Idempotency-Key accepted.
const MaxIdempotencyKeyBytes = 255

// idempotencyKey returns the request's Idempotency-Key, if it sent one:
// the draft's structured-field string ("..."), or, as many clients send
// it, the bare value. It refuses several headers, an empty or overlong
// key, and characters outside printable ASCII.
func idempotencyKey(values []string) (key string, sent bool, err error) {
	switch len(values) {
	case 0:
		return "", false, nil
	case 1:
	default:
		return "", true, Explain(ErrInvalidRequest, msgIdempotencyKeyRepeated, len(values))
	}
	key = strings.TrimSpace(values[0])
	if unquoted, ok := strings.CutPrefix(key, `"`); ok {
		if key, ok = strings.CutSuffix(unquoted, `"`); !ok || strings.ContainsAny(key, `"\`) {
			return "", true, Explain(ErrInvalidRequest, msgIdempotencyKeyQuoted)
		}
	}
	if key == "" || len(key) > MaxIdempotencyKeyBytes || strings.IndexFunc(key, func(r rune) bool { return r < ' ' || r > '~' }) >= 0 {
		return "", true, Explain(ErrInvalidRequest, msgIdempotencyKeyShape, MaxIdempotencyKeyBytes)
	}
	return key, true, nil
}

// fingerprint identifies a validated request by what it asks for, so
// that the same request sent with other spacing, field order or defaults
// spelt out has the same fingerprint. Its submission as a job (asJob) has
// another, with its webhookUrl: one key names a request or a job, not
// both.
func (r request) fingerprint(asJob bool) [sha256.Size]byte {
	source := fmt.Sprint(r.source)
	if r.upload != nil {
		source = fmt.Sprintf("upload %x", sha256.Sum256(r.upload.data))
	}
	text := fmt.Appendf(nil, "%s\n%d\n%s\n%s", source, r.Scale, r.ImageType, r.Denoise)
	if r.Format != "" || r.Quality != 0 {
		// Only then, so that a key kept before these fields existed
		// still names the same request.
		text = fmt.Appendf(text, "\n%s\n%d", r.Format, r.Quality)
	}
	if r.Model != "" {
		text = fmt.Appendf(text, "\nmodel %s", r.Model)
	}
	if asJob {
		webhook := ""
		if r.webhook != nil {
			webhook = r.webhook.String()
		}
		text = append([]byte("job\n"+webhook+"\n"), text...)
	}
	return sha256.Sum256(text)
}

// runOnce runs req under the caller's Idempotency-Key. The first request
// with the key runs, and its answer is kept unless retrying could change
// it (see keepable), so that a retry runs again. A later request with the
// key gets the kept answer without running or being charged, or 409 while
// the first still runs, or 422 if it asks for something else.
//
// The charge and the answer are made one for a crash: the answer, with
// the reservation that pays for it, is prepared before the commit and kept
// after it. A retry that finds a prepared answer whose request's lease has
// ended takes the claim over and asks the ledger whether that request was
// charged (takeOver) instead of running it again.
func (h *Handler) runOnce(ctx context.Context, accountID, key string, req request) (Response, *IdempotentAnswer, error) {
	claim, kept, err := h.claimKey(ctx, accountID, key, req.fingerprint(false))
	switch {
	case err != nil:
		return Response{}, nil, err
	case kept != nil && kept.Reservation != "":
		return h.takeOver(ctx, claim, req, *kept)
	case kept != nil:
		return h.replay(*kept)
	}
	return h.runClaimed(ctx, claim, req)
}

// claimKey claims accountID's Idempotency-Key key for the request with
// fingerprint: it returns the claim, and the key's kept answer if it has
// one (IdempotencyStore.Claim), or the error the caller is answered.
func (h *Handler) claimKey(ctx context.Context, accountID, key string, fingerprint [sha256.Size]byte) (IdempotencyClaim, *IdempotentAnswer, error) {
	claim := IdempotencyClaim{
		AccountID: accountID, Key: key, Fingerprint: fingerprint, Token: rand.Text(),
		TTL: h.cfg.IdempotencyTTL, Lease: h.cfg.requestBound(),
	}
	var kept *IdempotentAnswer
	err := h.idempotency.call(func() (err error) {
		kept, err = h.cfg.Idempotency.Claim(ctx, claim)
		return err
	})
	if inFlight, ok := errors.AsType[*InFlightError](err); ok {
		return claim, nil, h.stillRunning(inFlight.LeaseEnds)
	}
	if errors.Is(err, ErrIdempotencyKeyReused) {
		return claim, nil, Explain(ErrIdempotencyKeyReused, msgIdempotencyKeyReused, h.cfg.IdempotencyTTL)
	}
	return claim, kept, err
}

// stillRunning is the 409 for a key whose request runs until leaseEnds at the
// latest: by then it has answered, or its claim can be taken over.
func (h *Handler) stillRunning(leaseEnds time.Time) error {
	return &retryAfterError{
		err:   ErrIdempotencyInFlight, // the table's sentence says it all
		after: max(leaseEnds.Sub(h.cfg.Now()), time.Second),
	}
}

// replay answers with a kept answer, or result_expired once a success's
// link has expired.
func (h *Handler) replay(kept IdempotentAnswer) (Response, *IdempotentAnswer, error) {
	if kept.Status == http.StatusOK && !h.cfg.Now().Before(kept.LinkExpires) {
		return Response{}, nil, Explain(ErrResultExpired, msgResultExpired, kept.LinkExpires.UTC().Format(time.RFC3339))
	}
	return Response{}, &kept, nil
}

// runClaimed runs req under claim and keeps or forgets its answer.
func (h *Handler) runClaimed(ctx context.Context, claim IdempotencyClaim, req request) (Response, *IdempotentAnswer, error) {
	prepare := func(ctx context.Context, resp Response, hold Reservation) error {
		answer := IdempotentAnswer{Status: http.StatusOK, Body: jsonBody(resp), LinkExpires: resp.linkExpires, Reservation: hold.ID}
		err := h.retryUnavailable(ctx, h.idempotency, func(ctx context.Context) error { return h.cfg.Idempotency.Prepare(ctx, claim, answer) })
		if errors.Is(err, ErrNotFound) {
			// The claim was taken over: this request outlived its lease,
			// and the request that took the key over answers for it.
			return h.stillRunning(h.cfg.Now().Add(claim.Lease))
		}
		return err
	}
	resp, err := h.run(ctx, claim.AccountID, req, prepare)
	if errors.Is(err, errChargeUnknown) {
		// Prepared, and charged or not: a retry after the lease finishes it.
		return Response{}, nil, &retryAfterError{err: err, after: claim.Lease}
	}
	h.finishClaim(ctx, claim, IdempotentAnswer{Status: http.StatusOK, Body: jsonBody(resp), LinkExpires: resp.linkExpires}, err)
	if errors.Is(err, errUnitGone) {
		// Stopped past its lease and its reservation: the key is free
		// again (Forget), or taken over by a retry that answers for it.
		h.cfg.Logger.Warn("upscale: a request outlived its reservation; its retry gets the key's answer", "account", claim.AccountID, "err", err)
		return Response{}, nil, h.stillRunning(h.cfg.Now())
	}
	return resp, nil, err
}

// finishClaim ends claim: it keeps answer, or the problem err is answered
// with if it is keepable and the caller is still there, and forgets the
// claim otherwise, so that a retry runs. A success is kept even when the
// caller has gone: its retry is what the key is for.
func (h *Handler) finishClaim(ctx context.Context, claim IdempotencyClaim, answer IdempotentAnswer, err error) {
	if err != nil {
		p := h.problem(err)
		answer = IdempotentAnswer{Status: p.Status, Body: jsonBody(p)}
	}
	finishCtx := context.WithoutCancel(ctx)
	if err == nil || (keepable(err) && ctx.Err() == nil) {
		if err := h.retryUnavailable(finishCtx, h.idempotency, func(ctx context.Context) error { return h.cfg.Idempotency.Keep(ctx, claim, answer) }); err != nil {
			h.cfg.Logger.Error("upscale: keep the answer for an Idempotency-Key; a retry after its lease finishes it", "account", claim.AccountID, "err", err)
		}
	} else if err := h.retryUnavailable(finishCtx, h.idempotency, func(ctx context.Context) error { return h.cfg.Idempotency.Forget(ctx, claim) }); err != nil {
		h.cfg.Logger.Error("upscale: release an Idempotency-Key; retries get 409 until its lease ends", "account", claim.AccountID, "err", err)
	}
}

// keepable reports whether a failure is kept under its Idempotency-Key:
// only one that retrying cannot change. A 5xx or 429, a source that
// failed for now (ErrSourceUnavailable) and a deadline are not kept;
// neither is a failure after the caller went away, which going may have
// caused (a download cut short).
func keepable(err error) bool {
	p := problemFor(err)
	return p.Status < 500 && p.Status != http.StatusTooManyRequests && p.Status != http.StatusConflict &&
		!errors.Is(err, ErrSourceUnavailable) && !errors.Is(err, context.DeadlineExceeded)
}

// takeOver finishes a claim whose request prepared its answer and then died
// (or lost its stores) before keeping it. If that request was charged, its
// answer is kept and given, or result_expired once its link has expired;
// if it never was, req runs again under this claim. A ledger that cannot
// tell now gets 503, and the claim stays prepared for the next retry.
func (h *Handler) takeOver(ctx context.Context, claim IdempotencyClaim, req request, prepared IdempotentAnswer) (Response, *IdempotentAnswer, error) {
	charged, err := h.charged(ctx, prepared.Reservation, h.cfg.Now().Before(prepared.LinkExpires))
	if err != nil {
		return Response{}, nil, err
	}
	if !charged {
		return h.runClaimed(ctx, claim, req)
	}
	prepared.Reservation = ""
	if err := h.retryUnavailable(context.WithoutCancel(ctx), h.idempotency, func(ctx context.Context) error { return h.cfg.Idempotency.Keep(ctx, claim, prepared) }); err != nil {
		h.cfg.Logger.Error("upscale: keep a taken-over answer for an Idempotency-Key; the next retry finishes it again", "account", claim.AccountID, "err", err)
	}
	return h.replay(prepared)
}

// charged finds out whether a reservation whose commit's outcome is
// unknown was committed. When its result can still be delivered, committing
// it now answers the question (Commit is idempotent: a charge made already
// is not made again). Otherwise nothing may be charged that was not: a
// Release that succeeds gives back a unit never charged, and a Commit of a
// reservation that is no longer open succeeds only if it was committed.
func (h *Handler) charged(ctx context.Context, reservationID string, deliverable bool) (bool, error) {
	if deliverable {
		err := h.commit(ctx, reservationID)
		if errors.Is(err, ErrNotFound) {
			return false, nil
		}
		return err == nil, err
	}
	err := h.retryUnavailable(context.WithoutCancel(ctx), h.ledger, func(ctx context.Context) error { return h.cfg.Ledger.Release(ctx, reservationID) })
	if !errors.Is(err, ErrNotFound) {
		return false, err
	}
	err = h.commit(ctx, reservationID)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}
