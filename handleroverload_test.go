package upscale_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/upscaletest"
)

// TestOverloaded: with the engine's one slot taken and the one queue place
// filled, a request is refused at once with 503 overloaded and a
// Retry-After; its source is not fetched and nothing is reserved. The
// others finish, and once they have, a request gets through again.
func TestOverloaded(t *testing.T) {
	u := upscaletest.GatedUpscaler{Entered: make(chan struct{}, 3), Gate: make(chan struct{})}
	e := newEnv(t, func(c *upscale.Config) {
		c.Upscaler = u
		c.Capacity.EngineConcurrency = 1
		c.Capacity.QueueLength = 1
	})
	results := make(chan *httptest.ResponseRecorder, 2)
	go func() { results <- e.post(keyFree, body(e.url("/small.png"))) }()
	<-u.Entered // the first is in the engine
	go func() { results <- e.post(keyFree, body(e.url("/small.png"))) }()
	for e.hits.Load() < 2 { // the second has fetched its source and waits for the engine
		time.Sleep(time.Millisecond)
	}
	free := e.balance("free").Free

	w := e.post(keyFree, body(e.url("/small.png")))
	checkProblem(t, w, http.StatusServiceUnavailable, "overloaded")
	if ra := w.Header().Get("Retry-After"); ra == "" || ra == "0" {
		t.Errorf("Retry-After %q, want a number of seconds", ra)
	}
	if got := e.hits.Load(); got != 2 {
		t.Errorf("the origin was asked %d times, want 2: the refused request must not fetch", got)
	}
	if got := e.balance("free").Free; got != free {
		t.Errorf("free pool %d after the refusal, want %d: nothing may be reserved", got, free)
	}

	close(u.Gate)
	for range 2 {
		checkOK(t, <-results, upscale.PoolFree)
	}
	checkOK(t, e.post(keyPro, body(e.url("/small.png"))), upscale.PoolFree)
}

// gatedKeyStore holds every key lookup until gate closes, and counts the
// lookups under way.
type gatedKeyStore struct {
	upscale.KeyStore
	entered      chan struct{}
	gate         chan struct{}
	now, highest atomic.Int32
}

func (k *gatedKeyStore) Authenticate(ctx context.Context, key string) (string, error) {
	n := k.now.Add(1)
	defer k.now.Add(-1)
	for old := k.highest.Load(); n > old && !k.highest.CompareAndSwap(old, n); old = k.highest.Load() {
	}
	k.entered <- struct{}{}
	<-k.gate
	return k.KeyStore.Authenticate(ctx, key)
}

// TestBurstBoundsKeyLookups: ten requests arriving at once, with room for
// two, cost the KeyStore two lookups at once; the other eight are refused
// as overloaded without a lookup.
func TestBurstBoundsKeyLookups(t *testing.T) {
	var keys *gatedKeyStore
	e := newEnv(t, func(c *upscale.Config) {
		keys = &gatedKeyStore{KeyStore: c.Keys, entered: make(chan struct{}, 10), gate: make(chan struct{})}
		c.Keys = keys
		c.Capacity.EngineConcurrency = 1
		c.Capacity.QueueLength = 1
	})
	results := make(chan *httptest.ResponseRecorder, 10)
	for range 10 {
		go func() { results <- e.post(keyPro, body(e.url("/small.png"))) }()
	}
	release := sync.OnceFunc(func() { close(keys.gate) })
	t.Cleanup(release)
	<-keys.entered
	<-keys.entered
	for range 8 {
		select {
		case w := <-results:
			checkProblem(t, w, http.StatusServiceUnavailable, "overloaded")
		case <-time.After(10 * time.Second):
			t.Fatalf("%d key lookups under way and no refusal: every request went to the KeyStore", keys.now.Load())
		}
	}
	release()
	for range 2 {
		checkOK(t, <-results, upscale.PoolFree)
	}
	if got := keys.highest.Load(); got != 2 {
		t.Errorf("%d key lookups at once, want 2: one per place", got)
	}
}

// firstReadSignal is a request body that says when it is first read, and
// then sends nothing until the test ends.
type firstReadSignal struct {
	read chan struct{}
	once sync.Once
	stop <-chan struct{}
}

func (b *firstReadSignal) Read(p []byte) (int, error) {
	b.once.Do(func() { close(b.read) })
	<-b.stop
	return 0, io.ErrUnexpectedEOF
}

// TestSlowBodiesHoldNoPlace: callers that never finish sending their body
// do not take the places of those that do.
func TestSlowBodiesHoldNoPlace(t *testing.T) {
	e := newEnv(t, func(c *upscale.Config) {
		c.Capacity.EngineConcurrency = 1
		c.Capacity.QueueLength = 1
	})
	stop := make(chan struct{})
	var stalled sync.WaitGroup
	for range 2 {
		b := &firstReadSignal{read: make(chan struct{}), stop: stop}
		r := httptest.NewRequest(http.MethodPost, "/api/v1/upscale", b)
		r.Header.Set("Authorization", "Bearer "+keyPro)
		stalled.Go(func() { e.serve(r) })
		<-b.read
	}
	checkOK(t, e.post(keyPro, body(e.url("/small.png"))), upscale.PoolFree)
	close(stop)
	stalled.Wait()
}

// TestOverloadedByExpectedWait: once the engine is known to take 300 ms an
// image, a request behind one other on a single slot expects to finish
// after about 600 ms, past a 500 ms engine deadline, and is refused at
// once instead of failing with 504 after waiting. The 200 ms between one
// image's time and the deadline is for a loaded machine under -race: CI
// once took 50 ms more than the sleep for the image that times the engine.
func TestOverloadedByExpectedWait(t *testing.T) {
	e := newEnv(t, func(c *upscale.Config) {
		c.Upscaler = slowUpscaler{took: 300 * time.Millisecond}
		c.Capacity.EngineConcurrency = 1
		c.EngineTimeout = 500 * time.Millisecond
	})
	checkOK(t, e.post(keyPro, body(e.url("/small.png"))), upscale.PoolFree) // times the engine
	first := make(chan *httptest.ResponseRecorder, 1)
	go func() { first <- e.post(keyPro, body(e.url("/slow.png"))) }() // admitted, fetching for 300 ms
	for e.hits.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	w := e.post(keyFree, body(e.url("/small.png")))
	checkProblem(t, w, http.StatusServiceUnavailable, "overloaded")
	if got := e.hits.Load(); got != 2 {
		t.Errorf("the origin was asked %d times, want 2", got)
	}
	checkOK(t, <-first, upscale.PoolFree)
}
