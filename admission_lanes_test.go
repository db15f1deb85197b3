package upscale_test

import (
	"bytes"
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/upscaletest"
)

// jobGatedUpscaler holds the images whose source is gated (the jobs' in
// these tests) as its GatedUpscaler does; every other image goes through
// at once.
type jobGatedUpscaler struct {
	upscaletest.GatedUpscaler
	gated []byte
}

func (u jobGatedUpscaler) Upscale(ctx context.Context, src []byte, opts upscale.Params) (upscale.Image, error) {
	if bytes.Equal(src, u.gated) {
		return u.GatedUpscaler.Upscale(ctx, src, opts)
	}
	return u.PixelUpscaler.Upscale(ctx, src, opts)
}

// TestRequestsBesideJobs: job runs keep a slot free for requests (all but
// one of two, by default), so with jobs filling their slot a request is
// enlarged at once, and a second job waits for its turn without taking
// the request's slot, and without holding memory while it waits.
func TestRequestsBesideJobs(t *testing.T) {
	u := jobGatedUpscaler{GatedUpscaler: upscaletest.GatedUpscaler{Entered: make(chan struct{}, 2), Gate: make(chan struct{})}, gated: bigPNG}
	e := newEnv(t, func(c *upscale.Config) {
		c.Upscaler = u
		c.Capacity.EngineConcurrency, c.JobWorkers = 2, 2
		c.EngineTimeout = 5 * time.Second
	})
	release := sync.OnceFunc(func() { close(u.Gate) })
	t.Cleanup(release) // before the env's StopJobs, should the test fail
	first, _ := e.submit(keyPro, body(e.url("/big.png")))
	<-u.Entered
	held := e.handler.Load().MemoryInUse
	second, _ := e.submit(keyPro, body(e.url("/big.png")))
	select {
	case <-u.Entered:
		t.Fatal("a second job run took the slot kept for requests")
	case <-time.After(200 * time.Millisecond):
	}
	if inUse := e.handler.Load().MemoryInUse; inUse != held {
		t.Errorf("memory in use %d bytes with a second job run waiting for a slot, %d before it: a run waiting for a slot holds memory", inUse, held)
	}
	checkOK(t, e.post(keyFree, body(e.url("/small.png"))), upscale.PoolFree)
	release()
	for _, location := range []string{first, second} {
		if j := e.waitJob(location, keyPro); j.Status != upscale.JobSucceeded {
			t.Errorf("a job: %s %+v, want succeeded", j.Status, j.Problem)
		}
	}
}

// TestRequestRefusedBehindJob: on an engine of one slot held by a job
// run, a request is refused at once with 503 overloaded and a
// Retry-After, never left to wait out its deadline for a 504: it
// fetches nothing and reserves nothing.
func TestRequestRefusedBehindJob(t *testing.T) {
	u := jobGatedUpscaler{GatedUpscaler: upscaletest.GatedUpscaler{Entered: make(chan struct{}, 1), Gate: make(chan struct{})}, gated: bigPNG}
	e := newEnv(t, func(c *upscale.Config) {
		c.Upscaler = u
		c.Capacity.EngineConcurrency, c.JobWorkers = 1, 1
		c.EngineTimeout = 500 * time.Millisecond
	})
	release := sync.OnceFunc(func() { close(u.Gate) })
	t.Cleanup(release)
	location, _ := e.submit(keyPro, body(e.url("/big.png")))
	<-u.Entered
	hits, before := e.hits.Load(), e.balance("free")
	start := time.Now()
	w := e.post(keyFree, body(e.url("/small.png")))
	took := time.Since(start)
	checkProblem(t, w, http.StatusServiceUnavailable, "overloaded")
	if w.Header().Get("Retry-After") == "" || took >= 500*time.Millisecond {
		t.Errorf("refused after %v with Retry-After %q; want at once, with one", took, w.Header().Get("Retry-After"))
	}
	if e.hits.Load() != hits || e.balance("free") != before {
		t.Errorf("the refused request fetched (%d) or reserved (%+v, was %+v)", e.hits.Load()-hits, e.balance("free"), before)
	}
	release()
	if j := e.waitJob(location, keyPro); j.Status != upscale.JobSucceeded {
		t.Errorf("the job: %s %+v, want succeeded", j.Status, j.Problem)
	}
	checkOK(t, e.post(keyFree, body(e.url("/small.png"))), upscale.PoolFree)
}
