package upscale

import (
	"context"
	"errors"
	"time"

	"github.com/upscalekit/upscale/internal/membudget"
)

// errEngineBusy is why a job's run gave up waiting for the engine: the
// rest of its deadline would not have covered the enlargement. The job
// runs again later; it is not failed.
var errEngineBusy = errors.New("the engine stayed busy until the run's deadline")

// enlarge runs the Upscaler for a request, under EngineTimeout, once the
// engine's working memory is granted and one of its slots is free: the
// deadline covers that wait too, since the caller is waiting. It answers
// at the deadline even if the Upscaler does not, so a stuck engine cannot
// hold the request; the slot and the memory stay taken until the
// Upscaler returns.
func (h *Handler) enlarge(ctx context.Context, src []byte, params Params, memory *membudget.Grant) (Image, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, h.cfg.EngineTimeout, ErrUpstreamTimeout)
	defer cancel()
	report, err := inspectSource(h.cfg.Upscaler, src, params)
	if err != nil {
		return Image{}, err
	}
	slot, err := h.waitForEngine(ctx, src, report.Memory, memory, requestLane, time.Time{})
	if err != nil {
		return Image{}, engineTimeout(ctx, err)
	}
	img, err := h.runUpscaler(ctx, slot, src, params, memory)
	return img, engineTimeout(ctx, err)
}

// enlargeForJob runs the Upscaler for a job's run, which is no request:
// it waits its turn for the source's and the engine's memory and for a
// slot behind the requests before it (jobTurn), and only the Upscaler's
// own work is under EngineTimeout. A run whose turn does not come while
// its deadline still covers the enlargement returns errEngineBusy, for
// the job to run again later rather than fail.
func (h *Handler) enlargeForJob(ctx context.Context, src []byte, params Params, memory *membudget.Grant) (Image, error) {
	report, err := inspectSource(h.cfg.Upscaler, src, params)
	if err != nil {
		return Image{}, err
	}
	turn, cancelTurn := h.jobTurn(ctx)
	defer cancelTurn()
	until, _ := ctx.Deadline()
	slot, err := h.waitForEngine(turn, src, report.Memory, memory, jobLane, until)
	if err != nil {
		if errors.Is(context.Cause(turn), errEngineBusy) && ctx.Err() == nil {
			return Image{}, errEngineBusy
		}
		return Image{}, err
	}
	ctx, cancel := h.jobEngineDeadline(ctx, report.Duration)
	defer cancel()
	img, err := h.runUpscaler(ctx, slot, src, params, memory)
	return img, engineTimeout(ctx, err)
}

// jobHeadroom is how many times its expected time a job's enlargement has
// before it is cut: paces move with the machine's load, and the learned
// engine makes a pass only when it fits well within the time left.
const jobHeadroom = 3

// jobEngineDeadline is the context a job's enlargement runs in: a job has
// no gateway to answer in time, so its engine has what is left of its
// run's time (the queue's RunTimeout) but ChargeTimeout, for storing and
// charging the result; an engine that decides by its deadline (learned
// passes or classical) enlarges a job wholly learned where a request's
// EngineTimeout would not allow it. An Upscaler that can tell how long
// the job takes (expected, not zero) has jobHeadroom times that, at least
// EngineTimeout, within the same bound, so that a stuck run is cut in
// proportion to its work rather than after the whole RunTimeout. A run
// without a deadline gives the engine EngineTimeout; a run too short to
// keep ChargeTimeout gives it all it has.
func (h *Handler) jobEngineDeadline(ctx context.Context, expected time.Duration) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return context.WithTimeoutCause(ctx, h.cfg.EngineTimeout, ErrUpstreamTimeout)
	}
	now := time.Now()
	if engineEnds := deadline.Add(-h.cfg.ChargeTimeout); engineEnds.After(now) {
		deadline = engineEnds
	}
	if expected > 0 {
		if cut := now.Add(max(h.cfg.EngineTimeout, jobHeadroom*expected)); cut.Before(deadline) {
			deadline = cut
		}
	}
	return context.WithDeadlineCause(ctx, deadline, ErrUpstreamTimeout)
}

// engineTimeout is err as the caller is answered: ErrUpstreamTimeout for
// the engine's own deadline (ctx's cause), not the request's.
func engineTimeout(ctx context.Context, err error) error {
	if errors.Is(err, context.DeadlineExceeded) && errors.Is(context.Cause(ctx), ErrUpstreamTimeout) {
		return ErrUpstreamTimeout
	}
	return err
}

// runUpscaler runs the Upscaler in slot, until ctx ends.
func (h *Handler) runUpscaler(ctx context.Context, slot *slot, src []byte, params Params, memory *membudget.Grant) (Image, error) {
	type result struct {
		img Image
		err error
	}
	done := make(chan result, 1) // buffered: a late Upscaler must not block forever
	memory.Share()
	go func() {
		engineStart := time.Now()
		var res result
		func() {
			defer func() {
				if v := recover(); v != nil { // on this goroutine a panic would end the process
					res = result{err: panicError(v)}
				}
			}()
			res.img, res.err = h.cfg.Upscaler.Upscale(ctx, src, params)
		}()
		h.cfg.Metrics.StepDone(StepEngine, time.Since(engineStart))
		// The slot and the memory go back before the answer, so that
		// whoever has the answer sees them back (Handler.Load).
		slot.done()
		memory.Done()
		done <- res
	}()
	select {
	case res := <-done:
		if res.err == nil {
			h.cfg.Metrics.ImageDone(len(src), len(res.img.Data))
		}
		return res.img, res.err
	case <-ctx.Done():
		slot.abandon()
		return Image{}, ctx.Err()
	}
}

// waitForEngine takes one of the engine's slots in lane l and need, the
// engine's working memory for src (0 when the Upscaler cannot tell),
// while ctx allows; a job run's until
// is the end of its run. A request takes its memory first, and once
// ctx's deadline passes while others hold it, is refused as overloaded.
// A job run takes its slot first, then its memory (its source's too)
// behind the requests (GrowBehind), so that a run waiting for a slot
// holds no memory; once ctx's deadline passes, it gives its turn up
// (errEngineBusy). The work the slot is timed by is that memory: both
// engines' memory, like their time, grows with the output's pixels and
// the learned passes. An Upscaler that estimates nothing is timed by its
// source's bytes.
func (h *Handler) waitForEngine(ctx context.Context, src []byte, need int64, memory *membudget.Grant, l lane, until time.Time) (*slot, error) {
	queueStart := time.Now()
	defer func() { h.cfg.Metrics.StepDone(StepQueue, time.Since(queueStart)) }()
	work := need
	if need == 0 {
		work = int64(len(src))
	}
	if l == requestLane {
		if err := memory.Grow(ctx, need, h.admission.busy); err != nil {
			return nil, err
		}
		return h.admission.engineSlot(ctx, float64(work), l, until)
	}
	slot, err := h.admission.engineSlot(ctx, float64(work), l, until)
	if err != nil {
		return nil, err
	}
	if err := memory.GrowBehind(ctx, int64(cap(src))+need, errEngineBusyRefusal); err != nil {
		slot.finish(false)
		return nil, err
	}
	return slot, nil
}

// errEngineBusyRefusal is a job run's refusal once its turn has passed.
func errEngineBusyRefusal() error { return errEngineBusy }

// jobTurn is the context a job's run waits its turn for the engine with:
// ctx, ended early, by errEngineBusy, once the rest of ctx's deadline (the
// queue's time for one run) would no longer cover an enlargement and the
// charging of its result. Without a deadline, or with one too short for
// that from the start, it is ctx.
func (h *Handler) jobTurn(ctx context.Context) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	turnEnds := deadline.Add(-(h.cfg.EngineTimeout + h.cfg.ChargeTimeout))
	if !ok || !turnEnds.After(time.Now()) {
		return context.WithCancel(ctx)
	}
	return context.WithDeadlineCause(ctx, turnEnds, errEngineBusy)
}
