package upscale

import (
	"context"
	"errors"
	"net/http"
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
// tokens matched case-insensitively; what is not understood is ignored.
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
				if n, err := strconv.Atoi(strings.Trim(strings.TrimSpace(value), `"`)); err == nil && n > 0 {
					p.wait = min(time.Duration(n)*time.Second, maxWait)
				}
			}
		}
	}
	return p
}

// jobID returns the job ID a path names, ".../jobs/{id}".
func jobID(path string) (string, bool) {
	i := strings.LastIndex(path, "/jobs/")
	if i < 0 {
		return "", false
	}
	id := path[i+len("/jobs/"):]
	return id, id != "" && !strings.Contains(id, "/")
}

// serveSubmit answers a POST that prefers respond-async: 202 Accepted with
// the job and its Location, or, with wait=N and the job ended by then,
// what the request would have answered.
func (h *Handler) serveSubmit(w http.ResponseWriter, r *http.Request, prefer preference) (code string, pool Pool) {
	var who caller
	job, err := h.submit(w, r, &who)
	if who.accountID != "" {
		h.setQuotaHeaders(r.Context(), w.Header(), who, err)
	}
	if err != nil {
		return h.fail(w, r, err), ""
	}
	hdr := w.Header()
	hdr.Set("Location", strings.TrimSuffix(r.URL.Path, "/")+"/jobs/"+job.ID)
	applied := "respond-async"
	if prefer.wait > 0 {
		applied += ", wait=" + strconv.Itoa(int(prefer.wait/time.Second))
		job = h.awaitJob(r.Context(), job, prefer.wait)
	}
	hdr.Set("Preference-Applied", applied)
	switch job.Status {
	case JobSucceeded:
		writeJSON(w, http.StatusOK, jsonBody(job.Result))
		return "ok", job.Result.Via
	case JobFailed:
		writeJSON(w, job.Problem.Status, jsonBody(job.Problem))
		return job.Problem.Code, ""
	}
	writeJSON(w, http.StatusAccepted, jsonBody(job))
	return "accepted", job.Pool
}

// submit admits a request as upscale does and queues it as a job.
func (h *Handler) submit(w http.ResponseWriter, r *http.Request, who *caller) (Job, error) {
	req, leave, err := h.admitRequest(w, r, who)
	defer leave()
	if err != nil {
		return Job{}, err
	}
	return h.submitJob(r.Context(), who.accountID, req)
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
func (h *Handler) serveJob(w http.ResponseWriter, r *http.Request, id string) (code string) {
	if r.Method != http.MethodGet && r.Method != http.MethodDelete {
		w.Header().Set("Allow", "GET, DELETE")
		return h.fail(w, r, errMethodNotAllowed)
	}
	job, err := h.jobOfCaller(r, id)
	if err == nil && r.Method == http.MethodDelete {
		job, err = h.cancelJob(r.Context(), job)
	}
	if errors.Is(err, ErrNotFound) || (err == nil && h.jobs == nil) {
		err = errJobNotFound
	}
	if err != nil {
		return h.fail(w, r, err)
	}
	writeJSON(w, http.StatusOK, jsonBody(job))
	return "ok"
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

// cancelJob cancels job and returns it as it stands: a queued job at
// once, its unit given back and its source deleted here, since no run
// will; a running one once its run has stopped (its JobRunner settles
// it), for at most a few seconds, after which the job is returned still
// running and ends as its run does.
func (h *Handler) cancelJob(ctx context.Context, job Job) (Job, error) {
	job, err := h.cfg.Jobs.Cancel(ctx, job.AccountID, job.ID)
	if err != nil {
		return Job{}, err
	}
	if job.Status == JobCanceled && job.Started.IsZero() {
		// A second DELETE finds the unit given back already.
		err := h.settle(context.WithoutCancel(ctx), h.ledger, func(ctx context.Context) error {
			return h.cfg.Ledger.Release(ctx, job.Reservation)
		})
		if err != nil && !errors.Is(err, ErrNotFound) {
			h.cfg.Logger.Error("upscale: release a canceled job's unit; the ledger gives it back when its hold ends", "job", job.ID, "err", err)
		}
		h.deleteBlob(ctx, "job source", job.Source, job.Expires)
		return job, nil
	}
	return h.awaitJob(ctx, job, cancelWait), nil
}

// cancelWait is how long a DELETE waits for a running job's run to stop.
const cancelWait = 5 * time.Second
