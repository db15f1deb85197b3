package upscale

import (
	"context"
	"math"
	"slices"
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
	concurrency int
	jobSlots    int           // Capacity.JobSlots
	timeout     time.Duration // Config.EngineTimeout: queueing for the engine included
	perAccount  int           // Config.AccountShare

	mu          sync.Mutex
	running     map[*slot]struct{} // the images in the Upscaler, requests' and job runs'
	submissions int                // places held by jobs' submissions, which want no slot
	waiting     []*engineWaiter    // for a slot: requests, then job runs (engineSlot)
	held        map[sharer]int     // places held per API key and per account
	perUnit     float64            // moving mean of the engine's seconds per unit of work; 0 until timed
	units       float64            // moving mean of the units of work per image
	idleSince   time.Time          // when the engine last emptied; zero while it works
	overrunning int                // Upscaler calls still running after their request's deadline
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
		running:     make(map[*slot]struct{}),
		concurrency: c.EngineConcurrency,
		jobSlots:    c.JobSlots,
		timeout:     timeout,
		perAccount:  c.AccountShare,
		held:        make(map[sharer]int),
	}
}

// admit takes a place for a new request that wants the engine in lane l,
// or returns an error wrapping ErrOverloaded that says when to come back:
// a job's submission is refused only when the places are full. The caller calls leave once
// the request is done with the engine, on every path.
func (a *admission) admit(l lane) (leave func(), err error) {
	select {
	case a.admitted <- struct{}{}:
	default:
		return nil, a.overloaded(cap(a.admitted) - 1)
	}
	if l == jobLane {
		a.mu.Lock()
		a.submissions++
		a.mu.Unlock()
		return func() {
			a.mu.Lock()
			a.submissions--
			a.mu.Unlock()
			<-a.admitted
		}, nil
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
func (a *admission) refusing(l lane) error {
	ahead := len(a.admitted)
	switch {
	case ahead >= cap(a.admitted):
		return a.overloaded(ahead)
	case l == jobLane:
		return nil
	}
	return a.refusal(ahead)
}

// refusal is the refusal for a request with ahead admitted requests
// before it, or nil when it is expected to get through the engine in
// time: when it would find a slot free, or its expected wait for one
// (expectedStartLocked: the requests ahead and the job runs in the
// engine) and its own image fit the deadline.
func (a *admission) refusal(ahead int) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	wait := a.expectedStartLocked(a.requestsAheadLocked(ahead), now)
	if wait == 0 || wait+a.imageTimeLocked(now) <= a.timeout {
		return nil
	}
	return a.overloadedAfter(wait)
}

// requestsAheadLocked is how many of ahead admitted places are held by
// requests, which will want a slot: the places of jobs' submissions are
// not. The caller holds a.mu.
func (a *admission) requestsAheadLocked(ahead int) int { return max(ahead-a.submissions, 0) }

// requestsRunning counts the requests in the engine. The caller holds
// a.mu.
func (a *admission) requestsRunning() int { return len(a.running) - a.jobsRunning() }

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
// or waiting for it), and how many images the engine works on, job runs'
// included. A stuck Upscaler keeps its slot after its request has given
// up, hence the floor.
func (a *admission) load() (queued, inEngine int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return max(len(a.admitted)-a.requestsRunning(), 0), len(a.running)
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
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.overloadedAfter(a.expectedStartLocked(a.requestsAheadLocked(ahead), time.Now()))
}

// overloadedAfter is the refusal for a request that would wait for the
// engine: come back then, which is never longer than its deadline. The
// caller holds a.mu.
func (a *admission) overloadedAfter(wait time.Duration) error {
	return &retryAfterError{
		err:   Explain(ErrOverloaded, msgOverloaded),
		after: max(min(wait, a.timeout), time.Second),
	}
}

// busy is the refusal for a request that waited for memory as long as
// its deadline allowed, counting the requests admitted besides it.
func (a *admission) busy() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.overloadedAfter(a.expectedStartLocked(a.requestsAheadLocked(len(a.admitted)-1), time.Now()))
}

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
//     memory only when no request waits for memory (membudget.Grant.GrowBehind).

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
