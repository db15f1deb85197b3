package upscale

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"
)

// admission bounds the work the handler takes on: at most concurrency
// requests in the Upscaler, at most queue more admitted (fetching their
// source, or waiting for the engine), and at most perAccount of all those
// for one account. A request that would exceed that, or whose expected
// wait for the engine already passes the engine's deadline, is refused at
// once: overload costs a caller milliseconds, and costs us no reservation,
// no download and no engine time.
//
// The expected wait is the rule that keeps this honest:
//   - A request with fewer requests ahead of it than the engine has slots
//     is always admitted: it waits for nobody, so nothing the engine did
//     before can be a reason to refuse it.
//   - Behind that, the wait is the rounds of the engine's slots the
//     requests ahead fill, and its own, at the mean time per image. That
//     mean is the engine's time per unit of work (waitForEngine says what
//     a unit is) times the mean work per image: the engine's speed and the
//     mix of image sizes are learned apart.
//   - A timed image counts for at most the engine's deadline, however
//     long the engine overran it, and the time per unit halves for every
//     idleHalfLife the engine spends idle: an estimate from a bad minute
//     fades instead of refusing work for good.
type admission struct {
	admitted    chan struct{} // a token per admitted request, in the engine or queued
	engine      chan struct{} // a token per request in the Upscaler
	concurrency int
	timeout     time.Duration // Config.EngineTimeout: queueing for the engine included
	perAccount  int           // Config.AccountShare

	mu          sync.Mutex
	held        map[sharer]int // places held per API key and per account
	perUnit     float64        // moving mean of the engine's seconds per unit of work; 0 until timed
	units       float64        // moving mean of the units of work per image
	idleSince   time.Time      // when the engine last emptied; zero while it works
	overrunning int            // Upscaler calls still running after their request's deadline
}

const (
	// meanWeight is the weight of the latest image in the moving means:
	// about the last ten images count.
	meanWeight = 0.2
	// idleHalfLife is how long an idle engine takes to halve its time per
	// unit of work.
	idleHalfLife = 10 * time.Second
)

func newAdmission(c Capacity, timeout time.Duration) *admission {
	return &admission{
		admitted:    make(chan struct{}, c.EngineConcurrency+c.QueueLength),
		engine:      make(chan struct{}, c.EngineConcurrency),
		concurrency: c.EngineConcurrency,
		timeout:     timeout,
		perAccount:  c.AccountShare,
		held:        make(map[sharer]int),
	}
}

// admit takes a place for a new request, or returns an error wrapping
// ErrOverloaded that says when to come back. The caller calls leave once
// the request is done with the engine, on every path.
func (a *admission) admit() (leave func(), err error) {
	select {
	case a.admitted <- struct{}{}:
	default:
		return nil, a.overloaded(cap(a.admitted) - 1)
	}
	if err := a.refusal(len(a.admitted) - 1); err != nil {
		<-a.admitted
		return nil, err
	}
	return func() { <-a.admitted }, nil
}

// refusing returns the refusal a request arriving now would get, without
// admitting it: a check that costs nothing before the work of reading
// the body.
func (a *admission) refusing() error {
	ahead := len(a.admitted)
	if ahead >= cap(a.admitted) {
		return a.overloaded(ahead)
	}
	return a.refusal(ahead)
}

// refusal is the refusal for a request with ahead requests before it, or
// nil when it is expected to get through the engine in time.
func (a *admission) refusal(ahead int) error {
	if ahead < a.concurrency {
		return nil
	}
	rounds := (ahead-a.concurrency)/a.concurrency + 1
	if time.Duration(rounds+1)*a.imageTime() > a.timeout {
		return a.overloaded(ahead)
	}
	return nil
}

// A sharer holds a share of the places: an API key, counted before its
// lookup so that a key that holds its share already is refused without
// taking a place even for the lookup, or an account, all its keys
// together.
type sharer struct {
	key     KeyDigest
	account string
}

// takeShare counts one of who's places, or refuses with ErrRateLimited
// when who holds its share of them already: one account's slow sources or
// floods then cost other accounts nothing. The caller calls leave on every
// path.
func (a *admission) takeShare(who sharer) (leave func(), err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.held[who] >= a.perAccount {
		holder := "API key"
		if who.account != "" {
			holder = "account"
		}
		return nil, &retryAfterError{
			err:   Explain(ErrRateLimited, msgShareHeld, holder, a.perAccount),
			after: max(a.imageTimeLocked(time.Now()), time.Second),
		}
	}
	a.held[who]++
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.held[who]--; a.held[who] == 0 {
			delete(a.held, who)
		}
	}, nil
}

// load returns how many admitted requests are not in the engine (fetching
// or waiting for it), and how many the engine works on. A stuck Upscaler
// keeps its slot after its request has given up, hence the floor.
func (a *admission) load() (queued, inEngine int) {
	inEngine = len(a.engine)
	return max(len(a.admitted)-inEngine, 0), inEngine
}

// capacity is how many requests may be admitted at once.
func (a *admission) capacity() int { return cap(a.admitted) }

// stuck reports whether every engine slot is held by an Upscaler call that
// outlived its request: until one returns, no request can be served.
func (a *admission) stuck() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.overrunning >= a.concurrency
}

// imageTime is the expected engine time of an image: the time per unit
// of work, decayed while the engine is idle, times the mean work per
// image. It is 0 until an image has been timed.
func (a *admission) imageTime() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.imageTimeLocked(time.Now())
}

func (a *admission) imageTimeLocked(now time.Time) time.Duration {
	return time.Duration(a.perUnitLocked(now) * a.units * float64(time.Second))
}

func (a *admission) perUnitLocked(now time.Time) float64 {
	if a.idleSince.IsZero() {
		return a.perUnit
	}
	return a.perUnit * math.Exp2(-now.Sub(a.idleSince).Seconds()/idleHalfLife.Seconds())
}

// overloaded is the refusal for a request with ahead requests before it:
// come back once the engine has worked through them, which is never
// longer than its deadline.
func (a *admission) overloaded(ahead int) error {
	wait := time.Duration(math.Ceil(float64(ahead)/float64(a.concurrency))) * a.imageTime()
	return &retryAfterError{
		err:   Explain(ErrOverloaded, msgOverloaded),
		after: max(min(wait, a.timeout), time.Second),
	}
}

// busy is the refusal for a request that waited for memory as long as
// its deadline allowed.
func (a *admission) busy() error {
	queued, _ := a.load()
	return a.overloaded(queued)
}

// engineSlot waits, no longer than ctx allows, for one of the engine's
// slots, for an image of the given units of work. The Upscaler's goroutine
// calls the slot's done when the Upscaler returns, which may be after the
// request has given up on it, so that a stuck engine keeps its slot.
func (a *admission) engineSlot(ctx context.Context, units float64) (*slot, error) {
	select {
	case a.engine <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s := &slot{a: a, start: time.Now(), units: max(units, 1)}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.perUnit, a.idleSince = a.perUnitLocked(s.start), time.Time{}
	return s, nil
}

// A slot is one image's turn in the engine.
type slot struct {
	a     *admission
	start time.Time
	units float64

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
func (s *slot) done() {
	a := s.a
	now := time.Now()
	took := min(now.Sub(s.start), a.timeout).Seconds()
	<-a.engine
	a.mu.Lock()
	defer a.mu.Unlock()
	s.returned = true
	if s.abandoned {
		a.overrunning--
	}
	if len(a.engine) == 0 {
		a.idleSince = now
	}
	if a.perUnit == 0 {
		a.perUnit, a.units = took/s.units, s.units
		return
	}
	a.perUnit += meanWeight * (took/s.units - a.perUnit)
	a.units += meanWeight * (s.units - a.units)
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
	slot, err := h.waitForEngine(ctx, src, params, memory, h.admission.busy)
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
	turn, cancelTurn := h.jobTurn(ctx)
	defer cancelTurn()
	busy := func() error { return errEngineBusy }
	err := memory.grow(turn, int64(cap(src)), busy)
	var slot *slot
	if err == nil {
		slot, err = h.waitForEngine(turn, src, params, memory, busy)
	}
	if err != nil {
		if errors.Is(context.Cause(turn), errEngineBusy) && ctx.Err() == nil {
			return Image{}, errEngineBusy
		}
		return Image{}, err
	}
	ctx, cancel := h.jobEngineDeadline(ctx)
	defer cancel()
	img, err := h.runUpscaler(ctx, slot, src, params, memory)
	return img, engineTimeout(ctx, err)
}

// jobEngineDeadline is the context a job's enlargement runs in: a job has
// no gateway to answer in time, so its engine has what is left of its
// run's time (the queue's RunTimeout) but SettleTimeout, for storing and
// charging the result; an engine that decides by its deadline (learned
// passes or classical) enlarges a job wholly learned where a request's
// EngineTimeout would not allow it. A run without a deadline gives the
// engine EngineTimeout; a run too short to keep SettleTimeout gives it
// all it has.
func (h *Handler) jobEngineDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if deadline, ok := ctx.Deadline(); ok {
		if engineEnds := deadline.Add(-h.cfg.SettleTimeout); engineEnds.After(time.Now()) {
			deadline = engineEnds
		}
		return context.WithDeadlineCause(ctx, deadline, ErrUpstreamTimeout)
	}
	return context.WithTimeoutCause(ctx, h.cfg.EngineTimeout, ErrUpstreamTimeout)
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

// waitForEngine grants the engine's working memory for src, then takes
// one of the engine's slots, while ctx allows; busy is the refusal once
// ctx's deadline passes while others hold the memory. The work the slot is
// timed by is that memory: both engines' memory, like their time, grows
// with the output's pixels and the learned passes. An Upscaler that
// estimates nothing is timed by its source's bytes.
func (h *Handler) waitForEngine(ctx context.Context, src []byte, params Params, memory *grant, busy func() error) (*slot, error) {
	queueStart := time.Now()
	defer func() { h.cfg.Metrics.StepDone(StepQueue, time.Since(queueStart)) }()
	work := int64(len(src))
	if estimator, ok := h.cfg.Upscaler.(MemoryEstimator); ok {
		need, err := estimator.EstimateMemory(src, params)
		if err != nil {
			return nil, err
		}
		if err := memory.grow(ctx, need, busy); err != nil {
			return nil, err
		}
		work = need
	}
	return h.admission.engineSlot(ctx, float64(work))
}
