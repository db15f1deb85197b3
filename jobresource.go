package upscale

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"
)

// errJobNotFound answers a job ID that is unknown, expired, or another
// account's, alike.
var errJobNotFound = errors.New("job not found")

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
// run again) is settled here, as its queue settles it (settleJob): its
// webhook, its unit and its source. The queue settles it too, which
// changes and counts nothing more, and finishes what this settlement
// could not; so does a DELETE sent again. A running one is returned once
// its run has stopped (and settled it), or after a few seconds still
// running, to end as its run does.
func (h *Handler) cancelJob(ctx context.Context, job Job) (Job, error) {
	job, err := h.cfg.Jobs.Cancel(ctx, job.AccountID, job.ID)
	if err != nil {
		return Job{}, err
	}
	if job.Status == JobCanceled {
		if outcome := h.settleJob(ctx, job, ErrJobCanceled); outcome.Result != nil {
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

// jobDepth is the queue's latest count of its jobs, taken at most once a
// second of the Handler's clock however often it is read (a metrics
// scrape reads it once per gauge, and every GET of a queued job's
// estimate).
type jobDepth struct {
	mu     sync.Mutex
	at     time.Time
	counts JobCounts
	ok     bool
}

// count returns the queue's counts at now, and false when it cannot
// count or its count fails.
func (d *jobDepth) count(queue JobQueue, now time.Time) (JobCounts, bool) {
	counter, ok := queue.(JobCounter)
	if !ok {
		return JobCounts{}, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if now.Sub(d.at) >= time.Second || now.Before(d.at) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var err error
		d.counts, err = counter.CountJobs(ctx)
		d.ok, d.at = err == nil, now
	}
	return d.counts, d.ok
}

// estimate returns job with its EstimatedStart while it is queued: its
// Position's turn among the workers the queue has running (all busy while
// jobs wait), each taking the engine's measured time per image. Without a
// measured pace, or with no worker running, it gives none.
func (h *Handler) estimate(job Job) Job {
	if job.Status != JobQueued || job.Position == nil {
		return job
	}
	counts, ok := h.jobDepth.count(h.cfg.Jobs, h.cfg.Now())
	perImage := h.admission.imageTime()
	if !ok || counts.Running == 0 || perImage == 0 {
		return job
	}
	rounds := float64(*job.Position+1) / float64(counts.Running)
	job.EstimatedStart = h.cfg.Now().Add(time.Duration(rounds * float64(perImage))).Truncate(time.Second)
	return job
}
