package upscale

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"
)

// caller is who a request turned out to come from, once its key and its
// account's share of the places have been checked.
type caller struct {
	accountID string
	keyID     string        // KeyID of its key; "" for a signed-in account (ForAccount)
	burst     *RateDecision // the key's RateLimiter decision, if there is a RateLimiter
	params    Params        // what it asked for, once its body was read whole
}

// admitRequest takes a POST through admission, authentication and
// validation, and fills in who the caller is. l is the lane the request
// will want the engine in: a request is refused when it could not get a
// slot in time, a job's submission (jobLane) only when the places are
// full, as it waits for nothing. leave gives back the places it holds;
// the caller calls it, on every path, once the request is done.
func (h *Handler) admitRequest(w http.ResponseWriter, r *http.Request, who *caller, l lane) (req request, leave func(), err error) {
	var leaving []func()
	leave = func() {
		for _, l := range slices.Backward(leaving) {
			l()
		}
	}
	ctx := r.Context()
	if err := h.admission.refusing(l); err != nil {
		return request{}, leave, err
	}
	accountID, _ := ctx.Value(signedInAccount{}).(string)
	signedIn := accountID != ""
	key, ok := bearerKey(r.Header)
	if !ok && !signedIn {
		return request{}, leave, ErrUnauthorized
	}
	// A JSON body is read before a place is taken, so that a caller
	// sending it slowly holds none, and judged after the key, so that a
	// refused key gets the same answer whatever it sent. An upload's is
	// read once the account is known (receiveUpload).
	req, invalid := decodeRequest(w, r)
	if err := h.blobs.refusing(); err != nil {
		return request{}, leave, err // the result could not be stored anyway
	}
	// The key's lookup is work for the KeyStore's server, so it comes
	// after admission: a burst of callers costs it at most as many
	// lookups at once as there are places, and the rest are refused
	// before any reservation or download. A key that holds its share of
	// the places already is refused before it takes one. A signed-in
	// account (ForAccount) has no key to look up or to limit.
	digest := DigestKey(key)
	takes := []func() (func(), error){func() (func(), error) { return h.admission.admit(l) }}
	if !signedIn {
		takes = slices.Insert(takes, 0, func() (func(), error) { return h.admission.takeShare(sharer{key: digest}) })
	}
	for _, take := range takes {
		left, err := take()
		if err != nil {
			return request{}, leave, err
		}
		leaving = append(leaving, left)
	}
	if !signedIn {
		var err error
		if accountID, err = h.authenticate(ctx, key); err != nil {
			return request{}, leave, err
		}
	}
	leaveShare, err := h.admission.takeShare(sharer{account: accountID})
	if err != nil {
		return request{}, leave, err
	}
	leaving = append(leaving, leaveShare)
	who.accountID = accountID
	if !signedIn {
		who.keyID = KeyID(key)
		if who.burst, err = h.allowRate(ctx, digest); err != nil {
			return request{}, leave, err
		}
	}
	if invalid == nil && req.boundary != "" {
		// An upload is read on a place, which a slow one holds for
		// Fetch.Timeout at most, as a slow download does; never on an
		// engine slot.
		req, invalid = h.receiveUpload(ctx, w, r, accountID, req.boundary)
		if req.upload != nil {
			leaving = append(leaving, req.upload.memory.Done)
		}
	}
	if invalid == nil {
		who.params = req.Params
		invalid = h.checkModel(req.Params)
	}
	return req, leave, invalid
}

// authenticate returns key's account, through the KeyStore's breaker:
// ErrUnauthorized for every refused key, whatever the store said.
func (h *Handler) authenticate(ctx context.Context, key string) (string, error) {
	var accountID string
	err := h.keys.call(func() (err error) {
		accountID, err = h.cfg.Keys.Authenticate(ctx, key)
		return err
	})
	if errors.Is(err, ErrUnauthorized) {
		return "", ErrUnauthorized
	}
	return accountID, err
}

// allowRate asks the RateLimiter, if there is one, whether the key with
// digest may call now: its decision, and ErrRateLimited with a
// Retry-After when it may not.
func (h *Handler) allowRate(ctx context.Context, digest KeyDigest) (*RateDecision, error) {
	if h.cfg.RateLimiter == nil {
		return nil, nil
	}
	d, err := h.cfg.RateLimiter.Allow(ctx, digest)
	if err != nil {
		return nil, err
	}
	if !d.Allowed {
		return &d, &retryAfterError{
			err:   Explain(ErrRateLimited, msgKeyRate, d.Burst, d.Window/time.Duration(max(d.Burst, 1))),
			after: d.RetryAfter,
		}
	}
	return &d, nil
}
