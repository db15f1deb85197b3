package riverqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/accounts"
	"github.com/upscalekit/upscale/internal/periodic"
)

// Work implements upscale.JobQueue: a River client of its own, with
// concurrency workers on the queue "upscale", this process's beat, and a
// sweep, every SettleInterval, of the jobs River ended without a run to
// settle them. The run of a process that died is handed back within
// Lapse: to run again, or ended canceled, when a cancel was asked of it
// meanwhile, or discarded, after upscale.MaxJobAttempts; each ended one is
// settled (worker.Settle), and its outcome recorded. It returns an error wrapping ErrProcessIDInUse while another
// live process beats under Options.ProcessID.
func (q *Queue[TTx]) Work(ctx context.Context, concurrency int, worker upscale.JobWorker) (func(drain context.Context) error, error) {
	if worker.Run == nil || worker.Settle == nil {
		return nil, errors.New("riverqueue: Work: the JobWorker needs both Run and Settle")
	}
	stop, err := q.work(ctx, handlers{run: worker.Run}, queueName, concurrency)
	if err != nil {
		return nil, err
	}
	sweep := func() {
		if err := q.settleLeft(context.WithoutCancel(ctx), worker.Settle); err != nil {
			q.opts.Logger.Warn("riverqueue: settle the jobs River ended; tried again later", "err", err)
		}
	}
	// The first sweep runs now, beside the workers, rather than after
	// one SettleInterval; Work does not wait for it.
	first := make(chan struct{})
	go func() {
		defer close(first)
		sweep()
	}()
	sweeper := periodic.Start(q.opts.SettleInterval, sweep)
	return func(drain context.Context) error {
		sweeper.Stop()
		<-first
		return stop(drain)
	}, nil
}

// settleBatch is how many ended jobs one sweep settles at the most.
const settleBatch = 100

// settleLeft settles the jobs River ended without a run to settle them,
// oldest first, why ErrJobCanceled (cancelled) or ErrJobGivenUp
// (discarded), and records each outcome as settled. A settlement that
// asks to Retry is tried at the next sweep. Processes that sweep at once
// may settle a job twice, which the settlement allows.
func (q *Queue[TTx]) settleLeft(ctx context.Context, settle func(context.Context, upscale.Job, error) upscale.JobOutcome) error {
	list, err := q.client.JobList(ctx, river.NewJobListParams().Kinds(jobArgs{}.Kind()).
		States(rivertype.JobStateCancelled, rivertype.JobStateDiscarded).
		Where(`(metadata -> 'output' ->> 'settled') IS NULL`).First(settleBatch))
	if err != nil {
		return classify(ctx, fmt.Errorf("riverqueue: list the ended jobs: %w", err))
	}
	for _, row := range list.Jobs {
		out := output{Settled: true}
		if job, err := q.job(row); err != nil {
			// No run could read it either: nothing can be settled, and
			// its unit goes back when its hold ends.
			q.opts.Logger.Error("riverqueue: an ended job cannot be read to settle it", "river_id", row.ID, "err", err)
		} else {
			why := upscale.ErrJobCanceled
			if row.State == rivertype.JobStateDiscarded {
				why = upscale.ErrJobGivenUp
			}
			outcome := settle(ctx, job, why)
			if outcome.Retry {
				continue
			}
			out.Result, out.Engine, out.Problem = outcome.Result, outcome.Engine, outcome.Problem
		}
		if _, err := q.client.JobUpdate(ctx, row.ID, &river.JobUpdateParams{Output: out}); err != nil {
			return classify(ctx, fmt.Errorf("riverqueue: record River job %d settled: %w", row.ID, err))
		}
	}
	return nil
}

// handlers are what a River client of this package does with each kind
// of job: run the upscale jobs, deliver the webhooks, send the mail; a
// client has the one of the queue it works.
type handlers struct {
	run     func(context.Context, upscale.Job) upscale.JobOutcome
	deliver func(context.Context, upscale.Webhook) error
	send    accounts.Mailer
}

// work starts a River client that works queue, at most concurrency jobs
// at once, with h, and returns its stop: it waits for the runs until
// drain is done, then cancels the rest, which River gives back. A live
// twin's displacing the process stops the client at once, as
// StopAndCancel would (its runs were stopped already); the stop then
// returns an error wrapping ErrProcessIDInUse.
//
// The client knows every kind of job whichever queue it works: River
// elects one client of all those on the database to rescue the jobs of
// workers that died, and that client discards a job of a kind it does
// not know. The kinds it does not work are never run there, as their
// queues are not in the client's Queues.
func (q *Queue[TTx]) work(ctx context.Context, h handlers, queue string, concurrency int) (func(drain context.Context) error, error) {
	if concurrency < 1 {
		return nil, fmt.Errorf("riverqueue: work on %d jobs at once: want at least 1", concurrency)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &worker{job: q.job, now: q.opts.Now, run: h.run, fence: q.live.currentFence})
	river.AddWorker(workers, &webhookWorker{
		now: q.opts.Now, backoff: q.opts.WebhookBackoff, deliver: h.deliver,
		share: upscale.WebhookAccountShare(concurrency), inFlight: map[string]int{},
	})
	river.AddWorker(workers, &mailWorker{send: h.send, now: q.opts.Now})
	client, err := river.NewClient(q.driver, q.config(workers, queue, concurrency))
	if err != nil {
		return nil, fmt.Errorf("riverqueue: %w", err)
	}
	if err := q.live.join(ctx, client); err != nil {
		return nil, err
	}
	running, cancel := context.WithCancelCause(ctx)
	unhook := context.AfterFunc(q.live.displaced, func() { cancel(context.Cause(q.live.displaced)) })
	if err := client.Start(running); err != nil {
		unhook()
		cancel(nil)
		q.live.leave(ctx, client)
		return nil, fmt.Errorf("riverqueue: start the workers: %w", err)
	}
	var once sync.Once
	var stopErr error
	return func(drain context.Context) error {
		once.Do(func() {
			defer cancel(nil)
			defer unhook()
			if err := client.Stop(drain); err != nil && drain.Err() == nil {
				stopErr = err
			} else if drain.Err() != nil {
				cancelled, cancel := context.WithTimeout(context.WithoutCancel(drain), time.Minute)
				defer cancel()
				stopErr = client.StopAndCancel(cancelled)
			}
			if stopErr == nil {
				q.live.leave(drain, client)
				stopErr = context.Cause(q.live.displaced)
			} // else runs may still be under way: the process beats on for them
		})
		return stopErr
	}, nil
}

// worker runs upscale jobs for River.
type worker struct {
	river.WorkerDefaults[jobArgs]
	job func(*rivertype.JobRow) (upscale.Job, error)
	now func() time.Time
	run func(context.Context, upscale.Job) upscale.JobOutcome
	// fence is done once this process's runs may be handed over
	// (liveness).
	fence func() context.Context
}

// errExpired cancels a job a worker takes past its expiry: it never runs.
var errExpired = errors.New("riverqueue: the job expired before it ran")

// Work runs one job: a run ended by the job's cancellation is given the
// cause upscale.ErrJobCanceled, and River's deadline (RunTimeout) is the
// run's. The run's outcome is recorded as the job's output, settled: a
// Result always stands; a canceled run ends the job cancelled, and a
// Problem ends it completed, even when its worker's stop or its deadline
// ended the run (the run settled it). A Retry is snoozed, which River
// does not count as an attempt; a canceled job's Retry (its settlement
// failed) leaves it cancelled and unsettled, with what it prepared, for
// the sweep. A run that overran is an error: River runs the job again, as
// it does one whose worker died, up to upscale.MaxJobAttempts times. A run
// its worker's stop, or its process's lapse, cut short runs again at once,
// and so does a job taken while the process's runs are stopped (a fetch
// under way as a twin displaced it): it is not run here.
func (w *worker) Work(ctx context.Context, rj *river.Job[jobArgs]) error {
	fence := w.fence()
	if fence.Err() != nil {
		return river.JobSnooze(0)
	}
	job, err := w.job(rj.JobRow)
	if err != nil {
		return river.JobCancel(err)
	}
	if !w.now().Before(job.Expires) {
		// Nothing to settle: the unit's hold and the source expire
		// with it.
		if err := river.RecordOutput(ctx, output{Settled: true}); err != nil {
			return err
		}
		return river.JobCancel(errExpired)
	}
	job.Status = upscale.JobRunning
	runCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	if deadline, ok := ctx.Deadline(); ok {
		var cancelDeadline context.CancelFunc
		runCtx, cancelDeadline = context.WithDeadline(runCtx, deadline)
		defer cancelDeadline()
	}
	stop := context.AfterFunc(ctx, func() {
		cause := context.Cause(ctx)
		if errors.Is(cause, rivertype.ErrJobCancelledRemotely) {
			cause = upscale.ErrJobCanceled
		}
		cancel(cause)
	})
	defer stop()
	unfence := context.AfterFunc(fence, func() { cancel(context.Cause(fence)) })
	defer unfence()
	outcome := w.run(runCtx, job)
	cause := context.Cause(runCtx)
	switch {
	case outcome.Result != nil:
		return river.RecordOutput(ctx, output{Result: outcome.Result, Engine: outcome.Engine, Settled: true})
	case errors.Is(cause, upscale.ErrJobCanceled) && outcome.Retry:
		return river.JobCancel(upscale.ErrJobCanceled)
	case errors.Is(cause, upscale.ErrJobCanceled):
		if err := river.RecordOutput(ctx, output{Settled: true}); err != nil {
			return err
		}
		return river.JobCancel(upscale.ErrJobCanceled)
	case outcome.Problem != nil:
		return river.RecordOutput(ctx, output{Problem: outcome.Problem, Settled: true})
	case outcome.Retry:
		return river.JobSnooze(backoff(snoozes(rj.JobRow)))
	case errors.Is(cause, context.DeadlineExceeded):
		return fmt.Errorf("riverqueue: the run overran RunTimeout: %w", cause)
	case runCtx.Err() != nil:
		return river.JobSnooze(0)
	}
	return river.RecordOutput(ctx, output{Problem: upscale.RunnerProblem(), Settled: true})
}

// snoozes is how often River has snoozed the job so far.
func snoozes(row *rivertype.JobRow) int {
	var meta struct {
		Snoozes int `json:"snoozes"`
	}
	json.Unmarshal(row.Metadata, &meta) // no count: none so far
	return meta.Snoozes
}
