package upscale

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// errJobNotFound answers a job ID that is unknown, expired, or another
// account's, alike.
var errJobNotFound = errors.New("job not found")

// maxWait bounds how long a submission with Prefer: wait=N is held open
// for its job's end (RFC 7240 lets a server wait less than asked).
const maxWait = 60 * time.Second

// preference is what a request's Prefer headers ask for (RFC 7240):
// respond-async, and how long the caller would wait for the result.
type preference struct {
	async bool
	wait  time.Duration
}

// preferences reads the Prefer headers: comma-separated preferences,
// each a token with an optional value and parameters after semicolons,
// tokens matched case-insensitively; what is not understood is ignored. A
// wait longer than maxWait, however many digits it has, is maxWait.
func preferences(h http.Header) preference {
	var p preference
	for _, header := range h.Values("Prefer") {
		for _, item := range strings.Split(header, ",") {
			token, _, _ := strings.Cut(item, ";")
			name, value, _ := strings.Cut(strings.TrimSpace(token), "=")
			switch strings.ToLower(strings.TrimSpace(name)) {
			case "respond-async":
				p.async = true
			case "wait":
				n, err := strconv.ParseUint(strings.Trim(strings.TrimSpace(value), `"`), 10, 64)
				if errors.Is(err, strconv.ErrRange) || (err == nil && n > uint64(maxWait/time.Second)) {
					n, err = uint64(maxWait/time.Second), nil
				}
				if err == nil && n > 0 {
					p.wait = time.Duration(n) * time.Second
				}
			}
		}
	}
	return p
}

// serveSubmit answers a POST that prefers respond-async: 202 Accepted with
// the job and its Location, or, with wait=N and the job ended by then,
// what the request would have answered. An accepted job is not a charge:
// only the pool of an answer that delivers a result is counted as paid.
func (h *Handler) serveSubmit(w http.ResponseWriter, r *http.Request, prefer preference) (code string, pool Pool) {
	var who caller
	job, replay, err := h.submit(w, r, &who)
	if who.accountID != "" {
		h.setQuotaHeaders(r.Context(), w.Header(), who, err)
	}
	if err != nil {
		return h.fail(w, r, err), ""
	}
	hdr := w.Header()
	if replay != nil {
		hdr.Set("Idempotent-Replayed", "true")
		if job.ID == "" {
			writeJSON(w, replay.Status, replay.Body)
			return "replayed", ""
		}
	}
	hdr.Set("Location", jobLocation(r, job.ID))
	if prefer.wait > 0 && !job.Status.Done() {
		// A waiter holds one of its account's places, as a request in
		// progress does, so that one account's waiters cannot hold the
		// connections other accounts need; one that finds none free is
		// answered at once.
		leave, err := h.admission.takeShare(sharer{account: who.accountID})
		if err != nil {
			prefer.wait = 0
		} else {
			h.jobWaiters.Add(1)
			defer h.jobWaiters.Add(-1)
			defer leave()
		}
	}
	if prefer.wait == 0 {
		// A replay's job may have ended: it is answered as the job
		// resource all the same, as the first answer was.
		hdr.Set("Preference-Applied", "respond-async")
		writeJSON(w, http.StatusAccepted, jsonBody(job))
		return "accepted", ""
	}
	hdr.Set("Preference-Applied", "respond-async, wait="+strconv.Itoa(int(prefer.wait/time.Second)))
	switch job = h.awaitJob(r.Context(), job, prefer.wait); job.Status {
	case JobSucceeded:
		if job.Engine != "" {
			hdr.Set("Upscale-Engine", job.Engine)
		}
		writeJSON(w, http.StatusOK, jsonBody(job.Result))
		return "ok", job.Result.Via
	case JobFailed:
		writeJSON(w, job.Problem.Status, jsonBody(job.Problem))
		return job.Problem.Code, ""
	}
	writeJSON(w, http.StatusAccepted, jsonBody(h.estimate(job)))
	return "accepted", ""
}

// jobLocation is the path of job id's resource as the caller reaches it:
// the path it sent its POST to, as it sent it (RequestURI, which a host's
// http.StripPrefix leaves alone) less a trailing slash, then "/jobs/" and
// the ID.
func jobLocation(r *http.Request, id string) string {
	path := r.URL.EscapedPath()
	if sent, err := url.ParseRequestURI(r.RequestURI); err == nil && r.RequestURI != "" {
		path = sent.EscapedPath()
	}
	return strings.TrimSuffix(path, "/") + "/jobs/" + id
}

// submit admits a request as upscale does and queues it as a job: once
// per Idempotency-Key when the caller sent one, in which case it may
// return the key's kept answer, with the job it names as that job stands
// now.
func (h *Handler) submit(w http.ResponseWriter, r *http.Request, who *caller) (Job, *IdempotentAnswer, error) {
	req, leave, err := h.admitRequest(w, r, who)
	defer leave()
	if err != nil {
		return Job{}, nil, err
	}
	ctx := r.Context()
	onceKey, sent, err := idempotencyKey(r.Header.Values("Idempotency-Key"))
	switch {
	case err != nil:
		return Job{}, nil, err
	case !sent:
		job, err := h.submitJob(ctx, who.accountID, req, "")
		return job, nil, err
	}
	return h.submitOnce(ctx, who.accountID, onceKey, req)
}

// submitOnce submits req under the caller's Idempotency-Key: the first
// submission with the key queues its job and keeps its 202 answer; a
// later one gets that job, as it stands now, or the kept refusal. The
// queue keeps one job per key (Job.Submission), so a retry after a crash
// between the job's Submit and the answer's Keep finds the job queued
// then, and gives back the unit and source it took itself.
func (h *Handler) submitOnce(ctx context.Context, accountID, key string, req request) (Job, *IdempotentAnswer, error) {
	claim, kept, err := h.claimKey(ctx, accountID, key, req.fingerprint(true))
	switch {
	case err != nil:
		return Job{}, nil, err
	case kept != nil && kept.Status == http.StatusAccepted:
		return h.replayJob(ctx, accountID, *kept)
	case kept != nil:
		return Job{}, kept, nil
	}
	job, err := h.submitJob(ctx, accountID, req, fmt.Sprintf("%x %s", claim.Fingerprint, key))
	h.settleClaim(ctx, claim, IdempotentAnswer{Status: http.StatusAccepted, Body: jsonBody(job)}, err)
	return job, nil, err
}

// replayJob returns the job a kept 202 answer names, as it stands now:
// result_expired once it has expired, as a request's replay is once its
// link has.
func (h *Handler) replayJob(ctx context.Context, accountID string, kept IdempotentAnswer) (Job, *IdempotentAnswer, error) {
	var answered Job
	if err := json.Unmarshal(kept.Body, &answered); err != nil {
		return Job{}, nil, fmt.Errorf("read a kept job's answer: %w", err)
	}
	job, err := h.cfg.Jobs.Get(ctx, accountID, answered.ID)
	if errors.Is(err, ErrNotFound) {
		return Job{}, nil, Explain(ErrResultExpired, msgJobExpired, answered.Expires.UTC().Format(time.RFC3339))
	}
	return h.estimate(job), &kept, err
}

// awaitJob polls job until it has ended, for at most wait or until ctx is
// done, and returns it as it stands then.
func (h *Handler) awaitJob(ctx context.Context, job Job, wait time.Duration) Job {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for poll := 50 * time.Millisecond; !job.Status.Done(); poll = min(2*poll, time.Second) {
		select {
		case <-ctx.Done():
			return job
		case <-time.After(poll):
		}
		now, err := h.cfg.Jobs.Get(ctx, job.AccountID, job.ID)
		if err != nil {
			return job
		}
		job = now
	}
	return job
}

// serveJob answers GET (the job as it stands) and DELETE (cancel it) of
// one job of the caller's account.
func (h *Handler) serveJob(w http.ResponseWriter, r *http.Request) (code string, pool Pool) {
	job, err := h.jobOfCaller(r, r.PathValue("id"))
	if err == nil && r.Method == http.MethodDelete {
		job, err = h.cancelJob(r.Context(), job)
	}
	if errors.Is(err, ErrNotFound) {
		err = errJobNotFound
	}
	if err != nil {
		return h.fail(w, r, err), ""
	}
	if job.Engine != "" {
		w.Header().Set("Upscale-Engine", job.Engine)
	}
	writeJSON(w, http.StatusOK, jsonBody(h.estimate(job)))
	return "ok", ""
}

// jobOfCaller authenticates the request's key and reads its account's job
// id.
func (h *Handler) jobOfCaller(r *http.Request, id string) (Job, error) {
	ctx := r.Context()
	key, ok := bearerKey(r.Header)
	if !ok {
		return Job{}, ErrUnauthorized
	}
	accountID, err := h.authenticate(ctx, key)
	if err != nil {
		return Job{}, err
	}
	if _, err := h.allowRate(ctx, DigestKey(key)); err != nil {
		return Job{}, err
	}
	if h.jobs == nil {
		return Job{}, errJobNotFound
	}
	return h.cfg.Jobs.Get(ctx, accountID, id)
}

// cancelJob cancels job and returns it as it stands. A job the queue
// cancels at once (one waiting to run, whether it never ran or waits to
// run again) is settled here, by the run its queue would settle it with
// (see JobRunner): its webhook, its unit and its source. The queue settles
// it too, which changes and counts nothing more, and finishes what this
// settlement could not; so does a DELETE sent again. A running one is
// returned once its run has stopped (its JobRunner settles it), or after a
// few seconds still running, to end as its run does.
func (h *Handler) cancelJob(ctx context.Context, job Job) (Job, error) {
	job, err := h.cfg.Jobs.Cancel(ctx, job.AccountID, job.ID)
	if err != nil {
		return Job{}, err
	}
	if job.Status == JobCanceled {
		settling, settle := context.WithCancelCause(ctx)
		settle(ErrJobCanceled)
		if outcome := h.runJob(settling, job); outcome.Result != nil {
			// It had stored its result, and charged for it, before the
			// cancel: the result stands, as it does for the queue.
			job.Status, job.Result, job.Engine = JobSucceeded, outcome.Result, outcome.Engine
		}
		return job, nil
	}
	if job.Status.Done() || job.Status == JobQueued {
		return job, nil // ended before, or its prepared result is on its way
	}
	return h.awaitJob(ctx, job, cancelWait), nil
}

// cancelWait is how long a DELETE waits for a running job's run to stop.
const cancelWait = 5 * time.Second
