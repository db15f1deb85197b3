package upscale

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// jobForm is the job form's machinery, when the stores allow it: the
// BlobStore keeps each job's source for its worker, and the ledger holds
// its unit for its life.
type jobForm struct {
	sources BlobReader
	holds   ReservationHolder

	mu sync.Mutex
	// The job workers' and the webhook deliverers' stops, nil while none
	// run (before StartJobs, after StopJobs).
	stopWorkers, stopDeliverers func(drain context.Context) error
	// started is whether StartJobs ever started them; unstarted warns,
	// once, of a job queued by a Handler meant to run jobs (JobWorkers
	// not negative) that never was.
	started   atomic.Bool
	unstarted sync.Once
}

// jobFormFor returns the job form's machinery when cfg's stores allow it,
// and nil otherwise.
func jobFormFor(cfg Config) *jobForm {
	sources, ok := cfg.Blobs.(BlobReader)
	holds, ok2 := cfg.Ledger.(ReservationHolder)
	if !ok || !ok2 {
		return nil
	}
	return &jobForm{sources: sources, holds: holds}
}

// StartJobs starts this Handler's job workers (Config.JobWorkers of them)
// and its webhook deliverers, which run until StopJobs: New starts
// nothing, so that a Handler that is built and dropped (a test, a failed
// start-up) leaves no goroutine behind. ctx serves the start only. A
// Handler without the job form, or with JobWorkers negative, starts
// nothing. It returns an error when the workers are running already, or
// the queues cannot start them.
func (h *Handler) StartJobs(ctx context.Context) error {
	if h.jobs == nil || h.cfg.JobWorkers < 0 {
		return nil
	}
	h.jobs.mu.Lock()
	defer h.jobs.mu.Unlock()
	if h.jobs.stopWorkers != nil {
		return errors.New("upscale: StartJobs: the job workers run already")
	}
	ctx = context.WithoutCancel(ctx)
	stopWorkers, err := h.cfg.Jobs.Work(ctx, h.cfg.JobWorkers, JobWorker{Run: h.runJob, Settle: h.settleJob})
	if err != nil {
		return fmt.Errorf("upscale: start the job workers: %w", err)
	}
	stopDeliverers, err := h.cfg.Webhooks.Deliver(ctx, webhookConcurrency, h.deliverWebhook)
	if err != nil {
		stopWorkers(ctx)
		return fmt.Errorf("upscale: start the webhook deliverers: %w", err)
	}
	h.jobs.stopWorkers, h.jobs.stopDeliverers = stopWorkers, stopDeliverers
	h.jobs.started.Store(true)
	return nil
}

// StopJobs stops what StartJobs started: first the job workers, then the
// webhook deliverers. They take no new work, what they run has until
// drain is done to finish, and the rest is given back to the queues, for
// another process, or this one after a restart, to run. A host calls it
// on shutdown, after Drain and after its server has stopped taking
// requests. StartJobs may start them again.
func (h *Handler) StopJobs(drain context.Context) error {
	if h.jobs == nil {
		return nil
	}
	h.jobs.mu.Lock()
	stopWorkers, stopDeliverers := h.jobs.stopWorkers, h.jobs.stopDeliverers
	h.jobs.stopWorkers, h.jobs.stopDeliverers = nil, nil
	h.jobs.mu.Unlock()
	if stopWorkers == nil {
		return nil
	}
	return errors.Join(stopWorkers(drain), stopDeliverers(drain))
}

// warnIfUnstarted logs, once, that a job was queued although this
// Handler, meant to run jobs, was never started: it waits for a worker of
// another process, if there is one.
func (h *Handler) warnIfUnstarted() {
	if h.cfg.JobWorkers >= 0 && !h.jobs.started.Load() {
		h.jobs.unstarted.Do(func() {
			h.cfg.Logger.Warn("upscale: a job was queued, but this Handler's workers were never started (Handler.StartJobs); it waits for another process's workers, or set Config.JobWorkers to -1 if that is meant")
		})
	}
}

// runJob is the handler's JobWorker.Run: the request's engine, store and
// charge steps, on the source kept at submission, then the job's end
// (endJob). A run its worker's stop cuts short leaves the unit held and
// the source kept for the run that takes the job over; a run canceled
// ends the job canceled.
func (h *Handler) runJob(ctx context.Context, job Job) JobOutcome {
	resp, err := h.workJob(ctx, job)
	why := context.Cause(ctx) // nil while the run was not cut short
	if err != nil && why != nil && !errors.Is(why, ErrJobCanceled) && !errors.Is(err, errChargeUnknown) {
		return JobOutcome{} // its worker stopped, or its process's beat lapsed
	}
	return h.endJob(ctx, job, resp, err, why)
}

// settleJob is the handler's JobWorker.Settle: a job that ended without a
// run that settled it delivers the result an earlier run prepared, if its
// link still works, and else ends as why says (canceled, or given up),
// with no other work.
func (h *Handler) settleJob(ctx context.Context, job Job, why error) JobOutcome {
	resp, prepared, err := h.deliverPrepared(ctx, job)
	if !prepared {
		err = why
	}
	return h.endJob(ctx, job, resp, err, why)
}

// endJob settles a job's run or settlement that made resp or failed with
// err, the job having ended as why says (nil for a run not cut short): a
// job that ends gives its unit back unless charged, its source is
// deleted, and its webhook is queued; a store out of reach, an engine
// busy until the run's deadline, or a charge or settlement whose outcome
// is unknown, has the job run (or settled) again later, whatever else
// ended the run.
func (h *Handler) endJob(ctx context.Context, job Job, resp Response, err, why error) JobOutcome {
	ended := job
	ended.Finished = h.cfg.Now()
	switch {
	case err == nil:
		ended.Status, ended.Result, ended.Engine = JobSucceeded, &resp, resp.engine
	case errors.Is(err, errChargeUnknown):
		// Its result is recorded, maybe charged: the next run delivers
		// it, or settles it if it was not.
		h.cfg.Logger.Warn("upscale: job run again later, to settle its charge", "job", job.ID, "err", err)
		return JobOutcome{Retry: true}
	case errors.Is(why, ErrJobGivenUp):
		ended.Status, ended.Problem = JobFailed, GivenUpProblem()
	case errors.Is(why, ErrJobCanceled):
		ended.Status = JobCanceled
	case errors.Is(err, ErrUnavailable) || errors.Is(err, errEngineBusy):
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
		if ended.Status != JobCanceled {
			h.cfg.Logger.Warn("upscale: job run again later, to queue its webhook", "job", job.ID, "err", err)
			return JobOutcome{Retry: true}
		}
		h.cfg.Logger.Error("upscale: queue a canceled job's webhook; it is not sent", "job", job.ID, "err", err)
	}
	if err := h.settleEnd(ctx, ended); err != nil {
		h.cfg.Logger.Warn("upscale: job run again later, to settle it", "job", job.ID, "err", err)
		return JobOutcome{Retry: true}
	}
	switch ended.Status {
	case JobSucceeded:
		return JobOutcome{Result: ended.Result, Engine: ended.Engine}
	case JobCanceled:
		return JobOutcome{}
	}
	failure := cmp.Or(err, why)
	h.cfg.Logger.Log(ctx, logLevel(failure, *ended.Problem), "upscale: job failed", "job", job.ID, "status", ended.Problem.Status, "code", ended.Problem.Code, "err", failure)
	return JobOutcome{Problem: ended.Problem}
}

// settleEnd settles a job that ended, once its webhook is queued: its
// unit given back unless it succeeded (a success's was charged), its
// source and any result it did not deliver deleted, and its end counted.
// It returns the ledger's error when the unit's release failed, and
// then deletes and counts nothing: the job is settled again later. Every
// step is safe to repeat, and a settlement that did not end the job
// failed or canceled itself counts nothing: a job settled twice, by a
// DELETE and by its queue, is counted once. (A success is counted by each
// run that delivers it, which is one unless two processes settle the
// same job at once.)
func (h *Handler) settleEnd(ctx context.Context, ended Job) error {
	counted := true
	if ended.Status != JobSucceeded {
		err := h.retryUnavailable(context.WithoutCancel(ctx), h.ledger, func(ctx context.Context) error {
			return h.cfg.Ledger.Release(ctx, ended.Reservation)
		})
		counted = !errors.Is(err, ErrNotFound) // someone gave it back already
		if err != nil && counted {
			return fmt.Errorf("release the job's unit: %w", err)
		}
		if p := ended.Prepared; p != nil && p.Key != "" {
			h.deleteBlob(ctx, "uncharged result", p.Key, p.LinkExpires)
		}
	}
	h.deleteBlob(ctx, "job source", ended.Source, ended.Expires)
	if counted {
		waited, ran := ended.Finished.Sub(ended.Created), time.Duration(0)
		if !ended.Started.IsZero() {
			waited, ran = ended.Started.Sub(ended.Created), ended.Finished.Sub(ended.Started)
		}
		h.cfg.Metrics.JobDone(ended.Status, waited, ran)
		h.recordCall(ctx, jobCall(ended))
	}
	return nil
}

// workJob enlarges a job's source, stores the result, records it with
// the job (JobQueue.Prepare), and charges the job's unit. The result's
// key is recorded before the result is stored, so that a run that dies
// in between leaves the next run (or the job's settlement) a key to
// delete, not an orphan; a recorded result whose charge's outcome is
// unknown stays for the next run, which charges nothing more and
// delivers it, as it does the result of a run whose worker died.
func (h *Handler) workJob(ctx context.Context, job Job) (Response, error) {
	if resp, prepared, err := h.deliverPrepared(ctx, job); prepared {
		return resp, err
	}
	if ctx.Err() != nil {
		return Response{}, context.Cause(ctx) // canceled before it began
	}
	if p := job.Prepared; p != nil && p.Key != "" {
		h.deleteBlob(ctx, "uncharged result", p.Key, p.LinkExpires) // an earlier run's, not recorded as stored
	}
	var src []byte
	err := h.blobs.call(func() (err error) {
		src, err = h.jobs.sources.Get(ctx, job.Source, job.Expires)
		return err
	})
	if err != nil {
		return Response{}, fmt.Errorf("read the job's source: %w", err)
	}
	memory := h.budget.NewGrant()
	defer memory.Done()
	img, err := h.enlargeForJob(ctx, src, job.Params, memory)
	if err != nil {
		return Response{}, err
	}
	prepared := PreparedResult{Key: newBlobKey(extension(img.ContentType)), LinkExpires: h.cfg.Now().Add(h.cfg.LinkTTL)}
	if err := h.prepareJob(ctx, job, prepared); err != nil {
		return Response{}, err
	}
	resp, err := h.storeResult(ctx, prepared.Key, img, prepared.LinkExpires, job.Pool)
	resp.sourceBytes = int64(len(src))
	if err == nil {
		prepared.Result, prepared.Engine = &resp, img.Engine
		err = h.prepareJob(ctx, job, prepared)
	}
	if err == nil {
		err = h.commitJob(ctx, job)
	}
	if err != nil && !errors.Is(err, errChargeUnknown) {
		h.deleteBlob(ctx, "uncharged result", prepared.Key, prepared.LinkExpires)
		return Response{}, err
	}
	return resp, err
}

// deliverPrepared delivers the result an earlier run of the job stored
// and recorded (Job.Prepared), if its link still works: committing its
// unit again charges nothing more. prepared is false when there is none.
func (h *Handler) deliverPrepared(ctx context.Context, job Job) (resp Response, prepared bool, err error) {
	p := job.Prepared
	if !p.Delivers(h.cfg.Now()) {
		return Response{}, false, nil
	}
	resp = *p.Result
	resp.linkExpires, resp.engine = p.LinkExpires, p.Engine
	return resp, true, h.commitJob(ctx, job)
}

// prepareJob records prepared with the job, unless its run was cut short.
func (h *Handler) prepareJob(ctx context.Context, job Job, prepared PreparedResult) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if err := h.cfg.Jobs.Prepare(ctx, job.AccountID, job.ID, prepared); err != nil {
		return fmt.Errorf("record the job's result: %w", err)
	}
	return nil
}

// commitJob charges a job's unit: errUnitGone when it went back
// (ErrNotFound), errChargeUnknown (ErrUnavailable) when the ledger did
// not say whether it charged.
func (h *Handler) commitJob(ctx context.Context, job Job) error {
	err := h.commit(ctx, job.Reservation)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrNotFound):
		return fmt.Errorf("commit the job's unit: %w: %w", errUnitGone, err)
	}
	return fmt.Errorf("commit the job's unit: %w: %w", errChargeUnknown, err)
}
