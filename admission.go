package upscale

import (
	"context"
	"math"
	"sync"
	"time"
)

// ConcurrentUpscaler is an Upscaler that says how many images it enlarges
// at once. The handler then lets that many requests into it and queues
// the rest itself (Config.EngineConcurrency); engine/vips and engine/onnx
// implement it.
type ConcurrentUpscaler interface {
	Upscaler
	// Concurrency is how many images Upscale works on at once; more calls
	// wait inside it.
	Concurrency() int
}

// admission bounds the work the handler takes on: at most concurrency
// requests in the Upscaler, and at most queue more admitted (fetching
// their source, or waiting for the engine). A request that would exceed
// that, or whose expected wait for the engine already passes the engine's
// deadline, is refused at once: overload costs a caller milliseconds, and
// costs us no reservation, no download and no engine time.
type admission struct {
	admitted    chan struct{} // a token per admitted request, in the engine or queued
	engine      chan struct{} // a token per request in the Upscaler
	concurrency int
	timeout     time.Duration // Config.EngineTimeout: queueing for the engine included

	mu   sync.Mutex
	mean time.Duration // moving mean of the Upscaler's time per image; 0 until one has finished
}

// meanWeight is the weight of the latest image in the moving mean: about
// the last ten images count.
const meanWeight = 0.2

func newAdmission(concurrency, queue int, timeout time.Duration) *admission {
	return &admission{
		admitted:    make(chan struct{}, concurrency+queue),
		engine:      make(chan struct{}, concurrency),
		concurrency: concurrency,
		timeout:     timeout,
	}
}

// admit takes a place for a new request, or returns an error wrapping
// ErrOverloaded that says when to come back. The caller calls release
// once the request is done with the engine, on every path.
func (a *admission) admit() (release func(), err error) {
	select {
	case a.admitted <- struct{}{}:
	default:
		return nil, a.overloaded(cap(a.admitted) - 1)
	}
	ahead := len(a.admitted) - 1
	if a.expectedFinish(ahead) > a.timeout {
		<-a.admitted
		return nil, a.overloaded(ahead)
	}
	return func() { <-a.admitted }, nil
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

// refusing returns the refusal a request arriving now would get, without
// admitting it: a check that costs nothing before the work of reading
// the body.
func (a *admission) refusing() error {
	ahead := len(a.admitted)
	if ahead >= cap(a.admitted) || a.expectedFinish(ahead) > a.timeout {
		return a.overloaded(ahead)
	}
	return nil
}

// expectedFinish is how long a request with ahead requests before it is
// expected to take to get through the engine: the rounds of the engine's
// slots the requests ahead fill, and its own, at the mean time per image.
// It is 0 until an image has been timed.
func (a *admission) expectedFinish(ahead int) time.Duration {
	rounds := ahead/a.concurrency + 1
	return time.Duration(rounds) * a.meanTime()
}

func (a *admission) meanTime() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.mean
}

// overloaded is the refusal for a request with ahead requests before it:
// come back once the engine has worked through them.
func (a *admission) overloaded(ahead int) error {
	wait := time.Duration(math.Ceil(float64(ahead)/float64(a.concurrency))) * a.meanTime()
	return &retryAfterError{
		err:   Explain(ErrOverloaded, "The service is working at capacity and did not start your request; nothing was charged. Try again in a few seconds."),
		after: max(wait, time.Second),
	}
}

// busy is the refusal for a request that waited for memory as long as
// its deadline allowed.
func (a *admission) busy() error {
	queued, _ := a.load()
	return a.overloaded(queued)
}

// engineSlot waits, no longer than ctx allows, for one of the engine's
// slots. done gives it back and adds the time since to the mean; call it
// when the Upscaler returns, which may be after the request has given up
// on it, so that a stuck engine keeps its slot.
func (a *admission) engineSlot(ctx context.Context) (done func(), err error) {
	select {
	case a.engine <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	start := time.Now()
	return func() {
		took := time.Since(start)
		<-a.engine
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.mean == 0 {
			a.mean = took
		} else {
			a.mean += time.Duration(meanWeight * float64(took-a.mean))
		}
	}, nil
}
