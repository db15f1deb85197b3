package upscale

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
)

// jobForm is the job form's machinery, when the stores allow it: the
// BlobStore keeps each job's source for its worker, and the ledger holds
// its unit for its life.
type jobForm struct {
	sources BlobReader
	holds   ReservationHolder
	// The job workers' and the webhook deliverers' stops, nil when none
	// run.
	stopWorkers, stopDeliverers func(drain context.Context) error
}

// startJobs enables the job form when the stores allow it, and starts the
// handler's workers.
func (h *Handler) startJobs() error {
	sources, ok := h.cfg.Blobs.(BlobReader)
	holds, ok2 := h.cfg.Ledger.(ReservationHolder)
	if !ok || !ok2 {
		return nil
	}
	h.jobs = &jobForm{sources: sources, holds: holds}
	if h.cfg.JobWorkers < 0 {
		return nil
	}
	stopWorkers, err := h.cfg.Jobs.Work(context.Background(), h.cfg.JobWorkers, h.runJob)
	if err != nil {
		return fmt.Errorf("upscale: start the job workers: %w", err)
	}
	stopDeliverers, err := h.cfg.Webhooks.Deliver(context.Background(), webhookConcurrency, h.deliverWebhook)
	if err != nil {
		stopWorkers(context.Background())
		return fmt.Errorf("upscale: start the webhook deliverers: %w", err)
	}
	h.jobs.stopWorkers, h.jobs.stopDeliverers = stopWorkers, stopDeliverers
	return nil
}

// StopJobs stops this Handler's job workers (Config.JobWorkers), then its
// webhook deliverers: they take no new work, what they run has until
// drain is done to finish, and the rest is given back to the queues, for
// another process, or this one after a restart, to run. A host calls it
// on shutdown, after Drain and after its server has stopped taking
// requests.
func (h *Handler) StopJobs(drain context.Context) error {
	if h.jobs == nil || h.jobs.stopWorkers == nil {
		return nil
	}
	return errors.Join(h.jobs.stopWorkers(drain), h.jobs.stopDeliverers(drain))
}

// submitJob does at submission what can be judged then, as run does for a
// request: the unit reserved and the source downloaded (fetchSource), the
// source read as the engine will read it, then the source kept for the
// worker, the unit held for the job's life, and the job queued. A job is
// created only for work that can run; on every failure nothing is left
// held or stored. When the queue keeps a job of submission already
// (Job.Submission), that job is returned, and the unit and source taken
// here are given back.
func (h *Handler) submitJob(ctx context.Context, accountID string, req request, submission string) (Job, error) {
	webhook, err := h.checkWebhook(ctx, accountID, req.webhook)
	if err != nil {
		return Job{}, err
	}
	hold, src, memory, err := h.fetchSource(ctx, accountID, req)
	if err != nil {
		return Job{}, err
	}
	defer memory.done()
	settled := false
	defer func() {
		if !settled {
			h.release(ctx, hold)
		}
	}()
	if err := h.checkSource(src, req.Params); err != nil {
		return Job{}, err
	}
	now := h.cfg.Now()
	job := Job{
		AccountID: accountID, Params: req.Params, Reservation: hold.ID, Pool: hold.Pool, Submission: submission, Webhook: webhook,
		Created: now, Expires: now.Add(h.cfg.JobTTL), Source: strings.ToLower(rand.Text()) + ".source",
	}
	source := job.Source
	err = h.blobs.call(func() error {
		_, err := h.cfg.Blobs.Put(ctx, job.Source, src, "application/octet-stream", job.Expires)
		return err
	})
	if err != nil {
		return Job{}, fmt.Errorf("keep the job's source: %w", err)
	}
	expires := job.Expires
	err = h.ledger.call(func() error { return h.jobs.holds.Hold(ctx, hold.ID, expires) })
	if err == nil {
		job, err = h.cfg.Jobs.Submit(ctx, job)
	}
	if err != nil || job.Reservation != hold.ID {
		h.deleteBlob(ctx, "job source", source, expires)
	}
	if err != nil {
		return Job{}, fmt.Errorf("queue the job: %w", err)
	}
	settled = job.Reservation == hold.ID
	return job, nil
}

// checkSource reads src's header as the engine will (a MemoryEstimator),
// so that a file the engine refuses, or whose working memory would not fit
// the whole budget, is refused at submission as the request would be.
func (h *Handler) checkSource(src []byte, params Params) error {
	estimator, ok := h.cfg.Upscaler.(MemoryEstimator)
	if !ok {
		return nil
	}
	need, err := estimator.EstimateMemory(src, params)
	if err != nil {
		return err
	}
	if need+int64(cap(src)) > h.budget.total {
		return Explain(ErrImageTooLarge, msgNeedsMoreMemory, (need+int64(cap(src)))>>20, h.budget.total>>20)
	}
	return nil
}

// runJob is the handler's JobRunner: the request's engine, store and
// charge steps (run), on the source kept at submission. It settles what
// it started: a job that ends gives its unit back unless charged, its
// source is deleted, and its webhook is queued; a run its worker's stop
// cuts short leaves the unit held and the source kept for the run that
// takes the job over; a store out of reach has the job run again later.
func (h *Handler) runJob(ctx context.Context, job Job) JobOutcome {
	resp, err := h.workJob(ctx, job)
	canceled := errors.Is(context.Cause(ctx), ErrJobCanceled)
	ended := job
	ended.Finished = h.cfg.Now()
	switch {
	case err == nil:
		ended.Status, ended.Result = JobSucceeded, &resp
	case ctx.Err() != nil && !canceled:
		return JobOutcome{} // stopped
	case canceled:
		ended.Status = JobCanceled
	case errors.Is(err, ErrUnavailable):
		// Nothing settled: a charge whose outcome is unknown is settled
		// by the next run's commit, which charges nothing more.
		h.cfg.Logger.Warn("upscale: job run again later", "job", job.ID, "err", err)
		return JobOutcome{Retry: true}
	default:
		p := h.problem(err)
		ended.Status, ended.Problem = JobFailed, &p
	}
	// The webhook is queued before anything is settled, so that a run
	// that cannot queue it asks to run again with nothing to undo; the
	// queue keeps one webhook per job however often it runs. A canceled
	// job is not run again for it.
	if err := h.notify(ctx, ended); err != nil {
		if !canceled {
			h.cfg.Logger.Warn("upscale: job run again later, to queue its webhook", "job", job.ID, "err", err)
			return JobOutcome{Retry: true}
		}
		h.cfg.Logger.Error("upscale: queue a canceled job's webhook; it is not sent", "job", job.ID, "err", err)
	}
	if ended.Status != JobSucceeded {
		h.release(ctx, Reservation{ID: job.Reservation, AccountID: job.AccountID})
	}
	h.deleteBlob(ctx, "job source", job.Source, job.Expires)
	h.cfg.Metrics.JobDone(ended.Status, job.Started.Sub(job.Created), ended.Finished.Sub(job.Started))
	switch ended.Status {
	case JobSucceeded:
		return JobOutcome{Result: ended.Result}
	case JobCanceled:
		return JobOutcome{}
	}
	level := slog.LevelInfo
	if ended.Problem.Status >= http.StatusInternalServerError {
		level = slog.LevelError
	}
	h.cfg.Logger.Log(ctx, level, "upscale: job failed", "job", job.ID, "status", ended.Problem.Status, "code", ended.Problem.Code, "err", err)
	return JobOutcome{Problem: ended.Problem}
}

// workJob enlarges a job's source, stores the result, records it with
// the job (JobQueue.Prepare), and charges the job's unit. A result stored
// but not recorded is deleted; a recorded one whose charge's outcome is
// unknown stays for the next run, which charges nothing more and
// delivers it, as it does the result of a run whose worker died.
func (h *Handler) workJob(ctx context.Context, job Job) (Response, error) {
	if job.Prepared != nil && h.cfg.Now().Before(job.PreparedUntil) {
		resp := *job.Prepared
		resp.linkExpires = job.PreparedUntil
		return resp, h.commitJob(ctx, job)
	}
	var src []byte
	err := h.blobs.call(func() (err error) {
		src, err = h.jobs.sources.Get(ctx, job.Source, job.Expires)
		return err
	})
	if err != nil {
		return Response{}, fmt.Errorf("read the job's source: %w", err)
	}
	memory := h.budget.newGrant()
	defer memory.done()
	if err := memory.grow(ctx, int64(cap(src)), h.admission.busy); err != nil {
		return Response{}, err
	}
	resp, blobKey, err := h.makeResult(ctx, src, job.Params, memory, job.Pool)
	if err != nil {
		return Response{}, err
	}
	if err := ctx.Err(); err == nil {
		err = h.cfg.Jobs.Prepare(ctx, job.AccountID, job.ID, resp, resp.linkExpires)
	}
	if err != nil {
		h.deleteBlob(ctx, "uncharged result", blobKey, resp.linkExpires)
		return Response{}, cmp.Or(context.Cause(ctx), fmt.Errorf("record the job's result: %w", err))
	}
	if err := h.commitJob(ctx, job); errors.Is(err, errUnitGone) {
		h.deleteBlob(ctx, "uncharged result", blobKey, resp.linkExpires)
		return Response{}, err
	} else if err != nil {
		return Response{}, err
	}
	return resp, nil
}

// commitJob charges a job's unit: errUnitGone when it went back
// (ErrNotFound), errChargeUnsettled (ErrUnavailable) when the ledger did
// not say whether it charged.
func (h *Handler) commitJob(ctx context.Context, job Job) error {
	err := h.commit(ctx, job.Reservation)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrNotFound):
		return fmt.Errorf("commit the job's unit: %w: %w", errUnitGone, err)
	}
	return fmt.Errorf("commit the job's unit: %w: %w", errChargeUnsettled, err)
}

// jobDepth is the queue's latest count of its jobs, taken at most once a
// second however often Load is read (a metrics scrape reads it once per
// gauge).
type jobDepth struct {
	mu              sync.Mutex
	at              time.Time
	queued, running int
}

// count returns the queue's counts, -1 and -1 when it cannot count or its
// count fails.
func (d *jobDepth) count(queue JobQueue) (queued, running int) {
	counter, ok := queue.(JobCounter)
	if !ok {
		return -1, -1
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if time.Since(d.at) >= time.Second {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var err error
		if d.queued, d.running, err = counter.CountJobs(ctx); err != nil {
			d.queued, d.running = -1, -1
		}
		d.at = time.Now()
	}
	return d.queued, d.running
}
