package upscale_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/upscaletest"
)

// hungryUpscaler says each image needs need bytes, and records the most
// budget in use and the most images enlarged at once that it has seen.
type hungryUpscaler struct {
	upscaletest.PixelUpscaler
	need    int64
	handler atomic.Pointer[upscale.Handler]
	gate    chan struct{} // nil: no waiting

	mu                  sync.Mutex
	inside, mostInside  int
	mostInUse, budgetOf int64
}

func (u *hungryUpscaler) EstimateMemory([]byte, upscale.Params) (int64, error) { return u.need, nil }

func (u *hungryUpscaler) Upscale(ctx context.Context, src []byte, opts upscale.Params) (upscale.Image, error) {
	load := u.handler.Load().Load()
	u.mu.Lock()
	u.inside++
	u.mostInside = max(u.mostInside, u.inside)
	u.mostInUse, u.budgetOf = max(u.mostInUse, load.MemoryInUse), load.MemoryBudget
	u.mu.Unlock()
	defer func() {
		u.mu.Lock()
		u.inside--
		u.mu.Unlock()
	}()
	if u.gate != nil {
		<-u.gate
	} else {
		time.Sleep(20 * time.Millisecond) // long enough for the others to pile up
	}
	return u.PixelUpscaler.Upscale(ctx, src, opts)
}

func newBudgetEnv(t *testing.T, u *hungryUpscaler, budget int64, configure ...func(*upscale.Config)) *env {
	e := newEnv(t, append([]func(*upscale.Config){func(c *upscale.Config) {
		c.Upscaler = u
		c.Capacity.MemoryBudget = budget
		c.Capacity.EngineConcurrency = 8
		c.Capacity.QueueLength = 100
	}}, configure...)...)
	u.handler.Store(e.handler)
	return e
}

// TestMemoryBudgetIsNeverExceeded: 8 concurrent requests, each granted its
// source (with the read buffer's slack) and its engine estimate, against a
// budget that holds two at a time: all succeed, the budget in use never
// passes the budget, the engine never has more than two at once, and
// everything is given back.
func TestMemoryBudgetIsNeverExceeded(t *testing.T) {
	const need = 10_000
	perRequest := int64(need + len(smallPNG) + 512)
	u := &hungryUpscaler{need: need}
	e := newBudgetEnv(t, u, 2*perRequest+100)
	e.putAccount(upscale.Account{ID: "pro", Plan: proPlan, Credits: 100})

	var wg sync.WaitGroup
	results := make(chan *httptest.ResponseRecorder, 8)
	for range 8 {
		wg.Go(func() { results <- e.post(keyPro, body(e.url("/small.png"))) })
	}
	wg.Wait()
	close(results)
	for w := range results {
		if w.Code != http.StatusOK {
			t.Errorf("status %d, want 200: %s", w.Code, w.Body)
		}
	}
	if u.mostInUse > u.budgetOf {
		t.Errorf("%d bytes of the budget in use at once, more than its %d", u.mostInUse, u.budgetOf)
	}
	if u.mostInside > 2 {
		t.Errorf("%d images in the engine at once; the budget holds 2", u.mostInside)
	}
	waitForMemoryBack(t, e.handler)
}

// TestMemoryBackWithTheAnswer: once a request has its answer, the memory
// and the slot its engine held are back (Handler.Load says so), not
// given back a moment later by the engine's goroutine.
func TestMemoryBackWithTheAnswer(t *testing.T) {
	e := newBudgetEnv(t, &hungryUpscaler{need: 10_000}, 1<<20)
	e.putAccount(upscale.Account{ID: "pro", Plan: proPlan, Credits: 100})
	for i := range 30 {
		if w := e.post(keyPro, body(e.url("/small.png"))); w.Code != http.StatusOK {
			t.Fatalf("status %d, want 200: %s", w.Code, w.Body)
		}
		if load := e.handler.Load(); load.MemoryInUse != 0 || load.InEngine != 0 {
			t.Fatalf("after answer %d: %d bytes granted and %d images in the engine, want none", i, load.MemoryInUse, load.InEngine)
		}
	}
}

// waitForMemoryBack waits for every grant to be given back, which an
// engine that outlived its request does when it returns.
func waitForMemoryBack(t *testing.T, h *upscale.Handler) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); h.Load().MemoryInUse != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes still granted 5 s after every request finished", h.Load().MemoryInUse)
		}
	}
}

// TestMemoryBudgetTooSmallForOneImage: an image that needs more than the
// whole budget is refused as too large, and nothing is charged.
func TestMemoryBudgetTooSmallForOneImage(t *testing.T) {
	u := &hungryUpscaler{need: 1 << 20}
	e := newBudgetEnv(t, u, 1<<19)
	p := checkProblem(t, e.post(keyFree, body(e.url("/small.png"))), http.StatusBadRequest, "image_too_large")
	if p.Detail == "" {
		t.Error("no detail")
	}
	if got := e.balance("free").Free; got != 3 {
		t.Errorf("free pool %d, want 3", got)
	}
}

// TestMemoryBudgetWaitEndsAtDeadline: while one image holds the budget,
// another that cannot get its share before EngineTimeout is refused as
// overloaded, with a Retry-After and nothing charged; the memory of an
// engine that outlives its request is given back when it returns.
func TestMemoryBudgetWaitEndsAtDeadline(t *testing.T) {
	const need = 10_000
	u := &hungryUpscaler{need: need, gate: make(chan struct{})}
	e := newBudgetEnv(t, u, need+2*int64(len(smallPNG)+512)+100, func(c *upscale.Config) { c.EngineTimeout = 200 * time.Millisecond })
	first := make(chan *httptest.ResponseRecorder, 1)
	go func() { first <- e.post(keyPro, body(e.url("/small.png"))) }()
	for e.handler.Load().InEngine == 0 {
		time.Sleep(time.Millisecond)
	}
	w := e.post(keyFree, body(e.url("/small.png")))
	checkProblem(t, w, http.StatusServiceUnavailable, "overloaded")
	if w.Header().Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
	if got := e.balance("free").Free; got != 3 {
		t.Errorf("free pool %d, want 3", got)
	}
	// The first request passes its own deadline inside the engine (504);
	// its memory stays granted until the engine lets go of the image.
	<-first
	if inUse := e.handler.Load().MemoryInUse; inUse < need {
		t.Errorf("%d bytes granted while the engine still works, want at least its %d", inUse, need)
	}
	close(u.gate)
	waitForMemoryBack(t, e.handler)
}

// releasingUpscaler counts its ReleaseMemory calls.
type releasingUpscaler struct {
	upscaletest.GatedUpscaler
	released atomic.Int64
}

func (u *releasingUpscaler) ReleaseMemory() { u.released.Add(1) }

// TestIdleRelease: memory is given back once the handler has been idle for
// IdleRelease, once per idle spell, and not while a request is in flight.
// Both requests are in the engine before either answers, so the handler is
// never idle between them however slowly the machine runs.
func TestIdleRelease(t *testing.T) {
	u := &releasingUpscaler{GatedUpscaler: upscaletest.GatedUpscaler{Entered: make(chan struct{}, 2), Gate: make(chan struct{}, 1)}}
	e := newEnv(t, func(c *upscale.Config) {
		c.Upscaler = u
		c.Capacity.EngineConcurrency = 2
		c.Capacity.IdleRelease = 50 * time.Millisecond
	})
	results := make(chan *httptest.ResponseRecorder, 2)
	for range 2 {
		go func() { results <- e.post(keyPro, body(e.url("/small.png"))) }()
		<-u.Entered
	}
	u.Gate <- struct{}{} // one answers; the other stays in flight past the idle wait
	checkOK(t, <-results, upscale.PoolFree)
	time.Sleep(150 * time.Millisecond)
	if got := u.released.Load(); got != 0 {
		t.Fatalf("memory released %d times while a request was in flight", got)
	}
	close(u.Gate)
	checkOK(t, <-results, upscale.PoolFree)
	for deadline := time.Now().Add(5 * time.Second); u.released.Load() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("memory not released 5 s after the handler went idle")
		}
	}
	time.Sleep(150 * time.Millisecond)
	if got := u.released.Load(); got != 1 {
		t.Errorf("memory released %d times in one idle spell, want 1", got)
	}
}
