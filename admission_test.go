package upscale_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/upscaletest"
)

// overrunningUpscaler, when told to, ignores its context for the next
// image and takes took, as a stuck native engine does; other images are
// quick.
type overrunningUpscaler struct {
	upscaletest.PixelUpscaler
	took     time.Duration
	overrun  chan struct{} // a value here makes the next image overrun
	returned chan struct{} // receives once an overrunning image has returned
}

func (u *overrunningUpscaler) Upscale(ctx context.Context, src []byte, opts upscale.Params) (upscale.Image, error) {
	select {
	case <-u.overrun:
		time.Sleep(u.took)
		defer func() { u.returned <- struct{}{} }()
	default:
	}
	return u.PixelUpscaler.Upscale(ctx, src, opts)
}

// TestIdleEngineNeverRefuses: an engine that overran its deadline once
// (504) must not get every later request refused on an idle server. The
// probe that found this: the admission estimate with nobody ahead was the
// mean time per image, and the mean, with the overrun in it, was past the
// deadline, so no image ever reached the engine to bring it down again.
// Readiness says the engine is stuck while the overrunning call holds its
// only slot, and ready once it returns.
func TestIdleEngineNeverRefuses(t *testing.T) {
	// The overrun lasts 900 ms past the deadline: readiness is read in
	// that time, however loaded the machine.
	u := &overrunningUpscaler{took: time.Second, overrun: make(chan struct{}, 1), returned: make(chan struct{}, 4)}
	e := newEnv(t, func(c *upscale.Config) {
		c.Upscaler = u
		c.Capacity.EngineConcurrency = 1
		c.EngineTimeout = 100 * time.Millisecond
	})
	for i := range 3 {
		u.overrun <- struct{}{}
		checkProblem(t, e.post(keyPro, body(e.url("/small.png"))), http.StatusGatewayTimeout, "upstream_timeout")
		if i == 0 {
			if status, health := getHealth(t, e.handler.ReadyHandler()); status != http.StatusServiceUnavailable || health["engine"] != "stuck" {
				t.Errorf("readiness while the only slot overruns: %d %v, want 503 with engine stuck", status, health)
			}
		}
		<-u.returned
		for e.handler.Load().InEngine > 0 { // the slot goes back just after
			time.Sleep(time.Millisecond)
		}
		w := e.post(keyPro, body(e.url("/small.png")))
		checkOK(t, w, upscale.PoolFree)
		e.putAccount(upscale.Account{ID: "pro", Plan: proPlan, Credits: 10})
	}
	if status, health := getHealth(t, e.handler.ReadyHandler()); status != http.StatusOK || health["engine"] != "ok" {
		t.Errorf("readiness once the engine returned: %d %v, want 200 with engine ok", status, health)
	}
}

// dripBody sends one byte every tick until stop closes.
func dripBody(w http.ResponseWriter, stop <-chan struct{}) {
	w.Header().Set("Content-Length", "100000")
	for {
		select {
		case <-stop:
			return
		case <-time.After(20 * time.Millisecond):
			w.Write([]byte{0})
			w.(http.Flusher).Flush()
		}
	}
}

// TestAccountShare: one account whose sources drip a byte at a time holds
// at most its share of the places, half of them by default, through any of
// its keys; its requests beyond that get 429 rate_limited at once, and
// another account is served meanwhile. Before the share, four such requests held all four places
// and every other account got 503 for as long as they were repeated.
func TestAccountShare(t *testing.T) {
	stop := make(chan struct{})
	drip := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { dripBody(w, stop) }))
	t.Cleanup(drip.Close)
	e := newEnv(t, func(c *upscale.Config) {
		c.Capacity.EngineConcurrency = 1
		c.Capacity.QueueLength = 3
		c.Capacity.AccountShare = 0 // the default: half of the four places
	})
	held := make(chan *httptest.ResponseRecorder, 2)
	for range 2 {
		go func() { held <- e.post(keyFree, body(drip.URL+"/drip.png")) }()
	}
	for e.handler.Load().Queued < 2 {
		time.Sleep(time.Millisecond)
	}
	const otherKeyOfFree = "upk_test_free_second_0123456789"
	e.keys.AddKey(context.Background(), otherKeyOfFree, "free")
	for _, key := range []string{keyFree, otherKeyOfFree} { // the key's share, then the account's
		w := e.post(key, body(drip.URL+"/drip.png"))
		checkProblem(t, w, http.StatusTooManyRequests, "rate_limited")
		if ra := w.Header().Get("Retry-After"); ra == "" {
			t.Error("a refusal for the share has no Retry-After")
		}
	}
	checkOK(t, e.post(keyPro, body(e.url("/small.png"))), upscale.PoolFree)
	close(stop) // the dripping sources hang up
	for range 2 {
		checkProblem(t, <-held, http.StatusBadGateway, "source_unavailable")
	}
	if got := e.balance("free"); got.Free != freePlan.MonthlyImages {
		t.Errorf("free pool %d, want %d: refused and unfinished requests are not charged", got.Free, freePlan.MonthlyImages)
	}
	if _, err := upscale.New(upscale.Config{Keys: e.keys, Ledger: e.ledger, Upscaler: upscaletest.PixelUpscaler{}, Blobs: e.blobs, Capacity: upscale.Capacity{AccountShare: -1}}); err == nil {
		t.Error("New accepted a negative AccountShare")
	}
}

// estimatingUpscaler is a MemoryEstimator that takes a while to read a
// header and gives up on an ended context, as engine/vips does.
type estimatingUpscaler struct {
	upscaletest.PixelUpscaler
	headerTook time.Duration
}

func (u estimatingUpscaler) EstimateMemory(src []byte, params upscale.Params) (int64, error) {
	time.Sleep(u.headerTook)
	return 1 << 20, nil
}

func (u estimatingUpscaler) Upscale(ctx context.Context, src []byte, params upscale.Params) (upscale.Image, error) {
	if err := ctx.Err(); err != nil {
		return upscale.Image{}, err
	}
	return u.PixelUpscaler.Upscale(ctx, src, params)
}

// TestDeadlinesByWhoseTheyAre: the engine's deadline passing on an idle
// server, with memory free, is 504 upstream_timeout, not 503 overloaded
// (nothing waited); the host's deadline passing during the download is 504
// timeout, not 400 source_unreachable (which tells the caller not to
// retry); the fetch's own deadline stays 400.
func TestDeadlinesByWhoseTheyAre(t *testing.T) {
	t.Run("EngineDeadlineWithMemoryFree", func(t *testing.T) {
		e := newEnv(t, func(c *upscale.Config) {
			c.Upscaler = estimatingUpscaler{headerTook: 20 * time.Millisecond}
			c.EngineTimeout = time.Millisecond
		})
		checkProblem(t, e.post(keyPro, body(e.url("/small.png"))), http.StatusGatewayTimeout, "upstream_timeout")
	})
	t.Run("HostDeadlineDuringDownload", func(t *testing.T) {
		e := newEnv(t)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/api/v1/upscale", strings.NewReader(body(e.url("/slow.png"))))
		r.Header.Set("Authorization", "Bearer "+keyFree)
		checkProblem(t, e.serve(r), http.StatusGatewayTimeout, "timeout")
	})
	t.Run("FetchDeadline", func(t *testing.T) {
		e := newEnv(t, func(c *upscale.Config) { c.Fetch.Timeout = 100 * time.Millisecond })
		w := e.post(keyFree, body(e.url("/slow.png")))
		p := checkProblem(t, w, http.StatusBadRequest, "source_unreachable")
		if !strings.Contains(p.Detail, "took longer than 100ms") {
			t.Errorf("detail %q does not name the fetch deadline", p.Detail)
		}
	})
}
