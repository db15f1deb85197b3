package upscale

import (
	"context"
	"errors"
	"slices"
	"time"
)

// The engine's slots have one owner, the admission, and two lanes:
//
//   - A request takes any free slot, ahead of every job run waiting, and is
//     admitted only when it is expected to get one in time: the job runs in
//     the engine count in that expectation (expectedStart), so a request
//     behind them is refused at once with 503 overloaded, before it
//     reserves a unit or fetches its source, rather than waiting out its
//     deadline for a 504.
//   - A job run waits its turn without holding requests: it takes a slot
//     only while fewer than jobSlots job runs are in the engine (by
//     default every slot but one, when there is more than one), and its
//     memory only when no request waits for memory (grant.growBehind).

// lane is who an engine slot is for.
type lane int

const (
	requestLane lane = iota
	jobLane
)

// engineWaiter is an image waiting for a slot.
type engineWaiter struct {
	lane  lane
	slot  *slot
	ready chan struct{} // closed once slot is given
}

// engineSlot waits, no longer than ctx allows, for one of the engine's
// slots, for an image of the given units of work in lane; a job run's
// until is the end of its run, which the expectations of requests count
// on while the engine has not been timed. The Upscaler's goroutine calls
// the slot's done when the Upscaler returns, which may be after the
// request has given up on it, so that a stuck engine keeps its slot.
func (a *admission) engineSlot(ctx context.Context, units float64, l lane, until time.Time) (*slot, error) {
	s := &slot{a: a, units: max(units, 1), lane: l, until: until}
	a.mu.Lock()
	if a.startable(l) && (l == requestLane || !slices.ContainsFunc(a.waiting, func(w *engineWaiter) bool { return w.lane == jobLane })) {
		a.startLocked(s, time.Now())
		a.mu.Unlock()
		return s, nil
	}
	w := &engineWaiter{lane: l, slot: s, ready: make(chan struct{})}
	at := len(a.waiting)
	if l == requestLane { // after the requests waiting, before the job runs
		at = slices.IndexFunc(a.waiting, func(w *engineWaiter) bool { return w.lane == jobLane })
		if at < 0 {
			at = len(a.waiting)
		}
	}
	a.waiting = slices.Insert(a.waiting, at, w)
	a.mu.Unlock()
	select {
	case <-w.ready:
		return s, nil
	case <-ctx.Done():
	}
	a.mu.Lock()
	if i := slices.Index(a.waiting, w); i >= 0 {
		a.waiting = slices.Delete(a.waiting, i, i+1)
		a.mu.Unlock()
		return nil, ctx.Err()
	}
	a.mu.Unlock()
	s.finish(false) // given the slot as ctx ended: it goes to the next
	return nil, ctx.Err()
}

// startable reports whether an image of lane l may take a slot now. The
// caller holds a.mu.
func (a *admission) startable(l lane) bool {
	return len(a.running) < a.concurrency && (l == requestLane || a.jobsRunning() < a.jobSlots)
}

// jobsRunning counts the job runs in the engine. The caller holds a.mu.
func (a *admission) jobsRunning() int {
	n := 0
	for s := range a.running {
		if s.lane == jobLane {
			n++
		}
	}
	return n
}

// startLocked gives s a slot at now. The caller holds a.mu.
func (a *admission) startLocked(s *slot, now time.Time) {
	s.start = now
	a.running[s] = struct{}{}
	a.perUnit, a.idleSince = a.perUnitLocked(now), time.Time{}
}

// dispatchLocked gives free slots to the images waiting, requests first,
// each lane in arrival order. The caller holds a.mu.
func (a *admission) dispatchLocked(now time.Time) {
	for i := 0; i < len(a.waiting); {
		w := a.waiting[i]
		if !a.startable(w.lane) {
			i++
			continue
		}
		a.waiting = slices.Delete(a.waiting, i, i+1)
		a.startLocked(w.slot, now)
		close(w.ready)
	}
}

// expectedStartLocked is how long a request would wait for a slot with
// ahead admitted requests before it: a slot a job run holds frees when
// the run is expected to end (its units at the time per unit; while the
// engine has not been timed, or once the run has taken longer than its
// work should, at the end of its run), every other slot is
// the requests', and each request ahead takes the first slot to free for
// an image's mean time. So a request with fewer requests ahead than the
// slots jobs leave waits for nothing, whatever the engine did before. The
// caller holds a.mu.
func (a *admission) expectedStartLocked(ahead int, now time.Time) time.Duration {
	perUnit, image := a.perUnitLocked(now), a.imageTimeLocked(now)
	frees := make([]time.Duration, a.concurrency)
	i := 0
	for s := range a.running {
		if s.lane != jobLane {
			continue
		}
		end := s.start.Add(time.Duration(perUnit * s.units * float64(time.Second)))
		if !end.After(now) { // untimed, or running past what its work should take: it holds its slot still
			end = now.Add(image)
			if s.until.After(now) {
				end = s.until
			}
		}
		frees[i] = end.Sub(now)
		i++
	}
	for range ahead {
		first := slices.Index(frees, slices.Min(frees))
		frees[first] += image
	}
	return slices.Min(frees)
}

// A slot is one image's turn in the engine.
type slot struct {
	a     *admission
	start time.Time
	units float64
	lane  lane
	until time.Time // a job run's end

	returned, abandoned bool // guarded by a.mu
}

// abandon notes that the request gave up on the Upscaler before it
// returned: it overruns until done.
func (s *slot) abandon() {
	s.a.mu.Lock()
	defer s.a.mu.Unlock()
	if !s.returned {
		s.abandoned = true
		s.a.overrunning++
	}
}

// done gives the slot back and times the image, for at most the engine's
// deadline.
func (s *slot) done() { s.finish(true) }

// finish gives the slot back to the next image waiting, timing the image
// when it ran.
func (s *slot) finish(ran bool) {
	a := s.a
	now := time.Now()
	took := min(now.Sub(s.start), a.timeout).Seconds()
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.running, s)
	s.returned = true
	if s.abandoned {
		a.overrunning--
	}
	if len(a.running) == 0 {
		a.idleSince = now
	}
	defer a.dispatchLocked(now)
	switch {
	case !ran:
	case a.perUnit == 0:
		a.perUnit, a.units = took/s.units, s.units
	default:
		a.perUnit += meanWeight * (took/s.units - a.perUnit)
		a.units += meanWeight * (s.units - a.units)
	}
}

// enlarge runs the Upscaler for a request, under EngineTimeout, once the
// engine's working memory is granted and one of its slots is free: the
// deadline covers that wait too, since the caller is waiting. It answers
// at the deadline even if the Upscaler does not, so a stuck engine cannot
// hold the request; the slot and the memory stay taken until the
// Upscaler returns.
func (h *Handler) enlarge(ctx context.Context, src []byte, params Params, memory *grant) (Image, error) {
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
func (h *Handler) enlargeForJob(ctx context.Context, src []byte, params Params, memory *grant) (Image, error) {
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
func (h *Handler) runUpscaler(ctx context.Context, slot *slot, src []byte, params Params, memory *grant) (Image, error) {
	type result struct {
		img Image
		err error
	}
	done := make(chan result, 1) // buffered: a late Upscaler must not block forever
	memory.share()
	go func() {
		engineStart := time.Now()
		defer func() { h.cfg.Metrics.StepDone(StepEngine, time.Since(engineStart)) }()
		defer memory.done()
		defer slot.done()
		defer func() {
			if v := recover(); v != nil { // on this goroutine a panic would end the process
				done <- result{err: panicError(v)}
			}
		}()
		img, err := h.cfg.Upscaler.Upscale(ctx, src, params)
		done <- result{img, err}
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
// behind the requests (growBehind), so that a run waiting for a slot
// holds no memory; once ctx's deadline passes, it gives its turn up
// (errEngineBusy). The work the slot is timed by is that memory: both
// engines' memory, like their time, grows with the output's pixels and
// the learned passes. An Upscaler that estimates nothing is timed by its
// source's bytes.
func (h *Handler) waitForEngine(ctx context.Context, src []byte, need int64, memory *grant, l lane, until time.Time) (*slot, error) {
	queueStart := time.Now()
	defer func() { h.cfg.Metrics.StepDone(StepQueue, time.Since(queueStart)) }()
	work := need
	if need == 0 {
		work = int64(len(src))
	}
	if l == requestLane {
		if err := memory.grow(ctx, need, h.admission.busy); err != nil {
			return nil, err
		}
		return h.admission.engineSlot(ctx, float64(work), l, until)
	}
	slot, err := h.admission.engineSlot(ctx, float64(work), l, until)
	if err != nil {
		return nil, err
	}
	if err := memory.growBehind(ctx, int64(cap(src))+need, errEngineBusyRefusal); err != nil {
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
