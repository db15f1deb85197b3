package upscale_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
)

func TestWhoPays(t *testing.T) {
	t.Run("PoolOrder", func(t *testing.T) {
		e := newEnv(t)
		e.putAccount(upscale.Account{ID: "free", Plan: upscale.Plan{Name: "one", MonthlyImages: 1, MaxFileBytes: 1 << 20}, ShareBonus: 1, Credits: 1})
		for _, via := range []upscale.Pool{upscale.PoolFree, upscale.PoolShareBonus, upscale.PoolCredit} {
			checkOK(t, e.post(keyFree, body(e.url("/small.png"))), via)
		}
		hits := e.hits.Load()
		p := checkProblem(t, e.post(keyFree, body(e.url("/small.png"))), http.StatusTooManyRequests, "quota_exhausted")
		if strings.Contains(strings.ToLower(p.Detail), "buy") || p.BuyURL != "" || !strings.Contains(p.Detail, "The free pool refills with 1 images at") || !strings.HasSuffix(p.Detail, ".") {
			t.Errorf("a host that sells nothing: detail %q, buyUrl %q; want when the images refill, and no word of buying", p.Detail, p.BuyURL)
		}
		if e.hits.Load() != hits {
			t.Errorf("an exhausted account's image was fetched")
		}
	})
	t.Run("Unlimited", func(t *testing.T) {
		e := newEnv(t)
		e.putAccount(upscale.Account{ID: "pro", Plan: upscale.Plan{Name: "unlimited", Paid: true, Unlimited: true, MaxFileBytes: 1 << 20}})
		for range 3 {
			checkOK(t, e.post(keyPro, body(e.url("/big.png"), `"scale": 8`)), upscale.PoolUnlimited)
		}
	})
	t.Run("ScaleNeedsPaid", func(t *testing.T) {
		e := newEnv(t)
		for _, scale := range []string{`"scale": 8`, `"scale": 16`} {
			hits := e.hits.Load()
			p := checkProblem(t, e.post(keyFree, body(e.url("/small.png"), scale)), http.StatusForbidden, "paid_plan_required")
			if want := "Scale " + strings.TrimPrefix(scale, `"scale": `) + " needs a paid plan or credits; scales below 8 are free."; p.Detail != want {
				t.Errorf("detail %q, want %q: the rule that refused it", p.Detail, want)
			}
			if e.hits.Load() != hits {
				t.Errorf("%s: source fetched although the account cannot pay", scale)
			}
			checkOK(t, e.post(keyPro, body(e.url("/small.png"), scale)), upscale.PoolFree)
		}
		e.putAccount(upscale.Account{ID: "free", Plan: freePlan, Credits: 1})
		checkOK(t, e.post(keyFree, body(e.url("/small.png"), `"scale": 8`)), upscale.PoolCredit)
		if got, want := e.balance("free"), (upscale.Balance{Plan: freePlan, Free: 3}); got != want {
			t.Errorf("balance %+v, want %+v", got, want)
		}
	})
	t.Run("FileSizeNeedsPaid", func(t *testing.T) {
		e := newEnv(t)
		p := checkProblem(t, e.post(keyFree, body(e.url("/big.png"))), http.StatusForbidden, "paid_plan_required")
		if !regexp.MustCompile(`^The image is [0-9.]+ [KM]B; files above [0-9.]+ [KM]B, the free tier's limit, need a paid plan or credits\.$`).MatchString(p.Detail) {
			t.Errorf("detail %q does not name the file size and the limit", p.Detail)
		}
		if got, want := e.balance("free"), (upscale.Balance{Plan: freePlan, Free: 3}); got != want {
			t.Errorf("balance %+v after 403, want %+v", got, want)
		}
		checkOK(t, e.post(keyPro, body(e.url("/big.png"))), upscale.PoolFree)
		// A free account with credits pays for the big file with a credit,
		// and the free unit first reserved goes back.
		e.putAccount(upscale.Account{ID: "free", Plan: freePlan, Credits: 1})
		checkOK(t, e.post(keyFree, body(e.url("/big.png"))), upscale.PoolCredit)
		if got, want := e.balance("free"), (upscale.Balance{Plan: freePlan, Free: 3}); got != want {
			t.Errorf("balance %+v, want %+v", got, want)
		}
		// With credits gone but free images left: 403, nothing charged.
		checkProblem(t, e.post(keyFree, body(e.url("/big.png"))), http.StatusForbidden, "paid_plan_required")
	})
	t.Run("PaidPlanExhausted", func(t *testing.T) {
		e := newEnv(t)
		e.putAccount(upscale.Account{ID: "pro", Plan: upscale.Plan{Name: "pro0", Paid: true, MaxFileBytes: 1 << 20}})
		checkProblem(t, e.post(keyPro, body(e.url("/small.png"), `"scale": 16`)), http.StatusTooManyRequests, "quota_exhausted")
	})
}

func TestEngineAndStorageFailures(t *testing.T) {
	cases := []struct {
		name   string
		config func(*upscale.Config)
		status int
		code   string
	}{
		{"UpstreamError", func(c *upscale.Config) {
			c.Upscaler = failingUpscaler{err: fmt.Errorf("%w: model crashed", upscale.ErrUpstream)}
		}, 502, "upstream_error"},
		{"UpstreamTimeout", func(c *upscale.Config) {
			c.Upscaler = failingUpscaler{delay: 300 * time.Millisecond}
			c.EngineTimeout = 50 * time.Millisecond
		}, 504, "upstream_timeout"},
		{"EngineTooLarge", func(c *upscale.Config) { c.Upscaler = failingUpscaler{err: upscale.ErrImageTooLarge} }, 400, "image_too_large"},
		{"UnknownEngineError", func(c *upscale.Config) { c.Upscaler = failingUpscaler{err: errors.New("secret path /srv/model.bin")} }, 500, "internal_error"},
		{"StorageFailure", func(c *upscale.Config) { c.Blobs = failingBlobs{} }, 500, "internal_error"},
		// A store's timeout is not the engine's: only EngineTimeout is upstream_timeout.
		{"StorageTimeout", func(c *upscale.Config) { c.Blobs = timingOutBlobs{} }, 504, "timeout"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.config)
			p := checkProblem(t, e.post(keyFree, body(e.url("/small.png"))), tc.status, tc.code)
			if strings.Contains(p.Detail, "/srv") || strings.Contains(p.Detail, "/var") {
				t.Errorf("detail %q leaks an internal path", p.Detail)
			}
			if got, want := e.balance("free"), (upscale.Balance{Plan: freePlan, Free: 3}); got != want {
				t.Errorf("balance %+v after a failure, want %+v", got, want)
			}
		})
	}
}

// TestHostDeadline: a host's timeout middleware ends the request while
// the engine works. The caller gets a 504 problem that does not blame the
// engine, not an empty 200, and is charged nothing.
func TestHostDeadline(t *testing.T) {
	e := newEnv(t, func(c *upscale.Config) { c.Upscaler = slowUpscaler{took: time.Second} })
	withDeadline := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(r.Context(), 100*time.Millisecond)
			defer cancel()
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
	r := httptest.NewRequest(http.MethodPost, "/api/v1/upscale", strings.NewReader(body(e.url("/small.png"))))
	r.Header.Set("Authorization", "Bearer "+keyFree)
	w := httptest.NewRecorder()
	withDeadline(e.handler).ServeHTTP(w, r)
	checkAnswer(t, r, w)
	checkProblem(t, w, http.StatusGatewayTimeout, "timeout")
	if got, want := e.balance("free"), (upscale.Balance{Plan: freePlan, Free: 3}); got != want {
		t.Errorf("balance %+v after the deadline, want %+v", got, want)
	}
}

func TestConcurrentRequestsSpendEachUnitOnce(t *testing.T) {
	const n = 200
	// A queue with room for every request: the test holds the ledger to
	// its count, not admission.
	e := newEnv(t, func(c *upscale.Config) { c.Capacity.QueueLength = n })
	e.putAccount(upscale.Account{ID: "free", Plan: upscale.Plan{Name: "two", MonthlyImages: 2, MaxFileBytes: 1 << 20}, ShareBonus: 1, Credits: 2})
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	for range n {
		wg.Go(func() {
			w := e.post(keyFree, body(e.url("/small.png")))
			mu.Lock()
			statuses[w.Code]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if statuses[200] != 5 || statuses[429] != n-5 || len(statuses) != 2 {
		t.Errorf("statuses %v, want 5×200 and %d×429", statuses, n-5)
	}
	if b := e.balance("free"); b.Free != 0 || b.ShareBonus != 0 || b.Credits != 0 {
		t.Errorf("balance %+v, want every pool at 0", b)
	}
}

func TestCallerGoneReleases(t *testing.T) {
	started := make(chan struct{})
	e := newEnv(t, func(c *upscale.Config) {
		c.Upscaler = blockingUpscaler{started}
	})
	ctx, cancel := context.WithCancel(context.Background())
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/", strings.NewReader(body(e.url("/small.png"))))
	r.Header.Set("Authorization", "Bearer "+keyFree)
	done := make(chan struct{})
	go func() { e.serve(r); close(done) }()
	<-started
	cancel()
	<-done
	if got := e.balance("free").Free; got != 3 {
		t.Errorf("free pool %d after the caller went away, want 3", got)
	}
}

type blockingUpscaler struct{ started chan struct{} }

func (u blockingUpscaler) Upscale(ctx context.Context, _ []byte, _ upscale.Params) (upscale.Image, error) {
	close(u.started)
	<-ctx.Done()
	return upscale.Image{}, ctx.Err()
}
