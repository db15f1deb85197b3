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

// serveSubmit answers a POST that prefers respond-async: 202 Accepted with
// the job and its Location, or, with wait=N and the job ended by then,
// what the request would have answered. An accepted job is not a charge:
// only the pool of an answer that delivers a result is counted as paid.
func (h *Handler) serveSubmit(w http.ResponseWriter, r *http.Request, prefer preference) (code string, pool Pool) {
	start := time.Now()
	var who caller
	job, replay, err := h.submit(w, r, &who)
	if who.accountID != "" {
		h.setQuotaHeaders(answerContext(r, err), w.Header(), who, err)
	}
	if err != nil {
		// A job queued is recorded when it ends; one refused, now.
		h.recordRequest(r, who, true, start, Response{}, err)
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
	req, leave, err := h.admitRequest(w, r, who, jobLane)
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
		job, err := h.submitJob(ctx, *who, req, "")
		return job, nil, err
	}
	return h.submitOnce(ctx, *who, onceKey, req)
}

// submitOnce submits req under the caller's Idempotency-Key: the first
// submission with the key queues its job and keeps its 202 answer; a
// later one gets that job, as it stands now, or the kept refusal. The
// queue keeps one job per key (Job.Submission), so a retry after a crash
// between the job's Submit and the answer's Keep finds the job queued
// then, and gives back the unit and source it took itself.
func (h *Handler) submitOnce(ctx context.Context, who caller, key string, req request) (Job, *IdempotentAnswer, error) {
	claim, kept, err := h.claimKey(ctx, who.accountID, key, req.fingerprint(true))
	switch {
	case err != nil:
		return Job{}, nil, err
	case kept != nil && kept.Status == http.StatusAccepted:
		return h.replayJob(ctx, who.accountID, *kept)
	case kept != nil:
		return Job{}, kept, nil
	}
	job, err := h.submitJob(ctx, who, req, fmt.Sprintf("%x %s", claim.Fingerprint, key))
	h.finishClaim(ctx, claim, IdempotentAnswer{Status: http.StatusAccepted, Body: jsonBody(job)}, err)
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

// submitJob does at submission what can be judged then, as run does for a
// request: the unit reserved and the source downloaded (fetchSource), the
// source read as the engine will read it, then the source kept for the
// worker, the unit held for the job's life, and the job queued. A job is
// created only for work that can run; on every failure nothing is left
// held or stored. When the queue keeps a job of submission already
// (Job.Submission), that job is returned, and the unit and source taken
// here are given back.
func (h *Handler) submitJob(ctx context.Context, who caller, req request, submission string) (Job, error) {
	accountID := who.accountID
	webhook, err := h.checkWebhook(ctx, accountID, req.webhook)
	if err != nil {
		return Job{}, err
	}
	priority, err := h.jobPriority(ctx, accountID)
	if err != nil {
		return Job{}, err
	}
	f, err := h.fetchSource(ctx, accountID, req)
	if err != nil {
		return Job{}, err
	}
	defer h.letGo(ctx, f)
	pixels, err := h.checkSource(f.src, req.Params)
	if err != nil {
		return Job{}, err
	}
	now := h.cfg.Now()
	job := Job{
		AccountID: accountID, KeyID: who.keyID, Params: req.Params, Reservation: f.hold.ID, Pool: f.hold.Pool, Submission: submission, Webhook: webhook,
		Priority: priority, Created: now, Expires: now.Add(h.cfg.JobTTL), Source: newBlobKey(".source"), SourcePixels: pixels,
	}
	source := job.Source
	err = h.blobs.call(func() error {
		_, err := h.cfg.Blobs.Put(ctx, job.Source, f.src, "application/octet-stream", job.Expires)
		return err
	})
	if err != nil {
		return Job{}, fmt.Errorf("keep the job's source: %w", err)
	}
	expires := job.Expires
	err = h.ledger.call(func() error { return h.jobs.holds.Hold(ctx, f.hold.ID, expires) })
	if err == nil {
		job, err = h.cfg.Jobs.Submit(ctx, job)
	}
	if err != nil || job.Reservation != f.hold.ID {
		h.deleteBlob(ctx, "job source", source, expires)
	}
	if err != nil {
		return Job{}, fmt.Errorf("queue the job: %w", err)
	}
	f.kept = job.Reservation == f.hold.ID
	if f.kept {
		h.warnIfUnstarted()
	}
	return h.estimate(job), nil
}

// jobPriority is the Priority of accountID's next job: 1 while the
// account has fewer than Config.JobShare jobs queued or running, and one
// more for each JobShare more, up to JobPriorities. An account that sends
// many jobs at once thus has its share of the workers in turn with every
// other account, and the rest of its jobs wait behind theirs. A queue that
// cannot count (not a JobCounter) runs every job at 1, oldest first.
func (h *Handler) jobPriority(ctx context.Context, accountID string) (int, error) {
	counter, ok := h.cfg.Jobs.(JobCounter)
	if !ok {
		return 1, nil
	}
	n, err := counter.CountAccountJobs(ctx, accountID)
	if err != nil {
		return 0, fmt.Errorf("count the account's jobs: %w", err)
	}
	return 1 + min(n/h.cfg.JobShare, JobPriorities-1), nil
}

// checkSource reads src's header as the engine will (inspectSource), so
// that a file the engine refuses, or whose working memory would not fit
// the whole budget, is refused at submission as the request would be. It
// returns the source's pixels when the Upscaler can read them, 0
// otherwise.
func (h *Handler) checkSource(src []byte, params Params) (pixels int64, err error) {
	report, err := inspectSource(h.cfg.Upscaler, src, params)
	if err != nil {
		return 0, err
	}
	if need := report.Memory + int64(cap(src)); report.Memory > 0 && need > h.budget.Total() {
		return 0, needsMoreMemory(need, h.budget.Total())
	}
	return report.Pixels, nil
}
