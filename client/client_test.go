package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/png"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/client"
	"github.com/upscalekit/upscale/upscaletest"
)

const key = "upk_test_client_0123456789"

// flakyEngine fails its first two images as a crashed model does.
type flakyEngine struct {
	upscaletest.PixelUpscaler
	calls atomic.Int32
}

func (u *flakyEngine) Upscale(ctx context.Context, src []byte, p upscale.Params) (upscale.Image, error) {
	if u.calls.Add(1) <= 2 {
		return upscale.Image{}, upscale.ErrUpstream
	}
	return u.PixelUpscaler.Upscale(ctx, src, p)
}

// realAPI is the real handler behind a test server: account acme holds key
// and five free images a month, and http://origin.test/a.png is an 8×8
// PNG the handler fetches without a network.
type realAPI struct {
	url     string
	handler *upscale.Handler
	ledger  *upscale.MemoryLedger
}

// newRealAPI starts a realAPI on cfg's Upscaler and JobWorkers; wrap, when
// set, stands between the server and the handler, as a proxy would.
func newRealAPI(t *testing.T, cfg upscale.Config, wrap func(api http.Handler) http.Handler) realAPI {
	t.Helper()
	ctx := context.Background()
	keys := upscale.NewMemoryKeyStore()
	keys.AddKey(ctx, key, "acme")
	cfg.Keys = keys
	ledger := upscale.NewMemoryLedger(upscale.LedgerOptions{})
	ledger.PutAccount(ctx, upscale.Account{ID: "acme", Plan: upscale.Plan{Name: "free", MonthlyImages: 5, MaxFileBytes: 1 << 20}})
	cfg.Ledger = ledger
	var sample bytes.Buffer
	png.Encode(&sample, upscaletest.TestImage(8, 8))
	cfg.Fetch.BuiltinSources = map[string][]byte{"http://origin.test/a.png": sample.Bytes()}
	cfg.Capacity.IdleRelease = -1

	var api http.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { api.ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	blobs, err := upscale.NewMemoryBlobStore(upscale.MemoryBlobStoreOptions{BaseURL: srv.URL + "/results"})
	upscaletest.Opened(t, blobs, err)
	cfg.Blobs = blobs
	h, err := upscale.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	api = h.Middleware(http.NotFoundHandler())
	if wrap != nil {
		api = wrap(api)
	}
	return realAPI{url: srv.URL, handler: h, ledger: ledger}
}

// TestRetriesOnceCharged: against the real handler, 502, 502, 200 is three
// attempts with one Idempotency-Key, and one charge.
func TestRetriesOnceCharged(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	var seen []string
	api := newRealAPI(t, upscale.Config{Upscaler: &flakyEngine{}}, func(api http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/api/v1/upscale" {
				mu.Lock()
				seen = append(seen, r.Header.Get("Idempotency-Key"))
				mu.Unlock()
			}
			api.ServeHTTP(w, r)
		})
	})

	c := &client.Client{BaseURL: api.url, Key: key}
	resp, err := c.Upscale(ctx, client.Request{ImageURL: "http://origin.test/a.png", Scale: 2})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Via != "free_pool" || resp.URL == "" || resp.Engine != "repeat;scale=2" {
		t.Errorf("response %+v, want a link paid by free_pool, made by repeat;scale=2", resp)
	}
	if len(seen) != 3 || seen[0] == "" || seen[1] != seen[0] || seen[2] != seen[0] {
		t.Errorf("Idempotency-Keys sent: %q, want three attempts with one key", seen)
	}
	if b, _ := api.ledger.Balance(ctx, "acme"); b.Free != 4 {
		t.Errorf("free pool %d after the call, want 4: charged once", b.Free)
	}
	if _, err := c.Upscale(ctx, client.Request{ImageURL: "http://origin.test/a.png"}); err != nil {
		t.Fatal(err)
	}
	if seen[3] == seen[0] {
		t.Error("a second call reused the first call's Idempotency-Key")
	}
}

// scripted answers the API's path with the given answers in turn, and
// counts the requests.
func scripted(t *testing.T, answers ...func(w http.ResponseWriter)) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := int(n.Add(1)) - 1
		answers[min(i, len(answers)-1)](w)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func problem(status int, code, retryAfter string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(status)
		buy := ""
		if code == "quota_exhausted" {
			buy = `,"buyUrl":"https://x.test/dashboard/billing"`
		}
		fmt.Fprintf(w, `{"type":"urn:upscale:error:%s","title":%q,"status":%d,"detail":"told so","code":%q%s}`, code, http.StatusText(status), status, code, buy)
	}
}

func ok(replayed bool) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		if replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		w.Write([]byte(`{"url":"https://x.test/r.png","resizedTo":null,"via":"credit"}`))
	}
}

func TestQuotaExhaustedIsNotRetried(t *testing.T) {
	srv, n := scripted(t, problem(http.StatusTooManyRequests, "quota_exhausted", "86400"), ok(false))
	_, err := (&client.Client{BaseURL: srv.URL, Key: key}).Upscale(context.Background(), client.Request{ImageURL: "https://x.test/a.png"})
	apiErr, isAPIError := errors.AsType[*client.Error](err)
	if !isAPIError || apiErr.Status != 429 || apiErr.Code != "quota_exhausted" || apiErr.RetryAfter != 24*time.Hour || apiErr.Detail != "told so" ||
		apiErr.BuyURL != "https://x.test/dashboard/billing" {
		t.Fatalf("error %#v, want the 429 with its code, detail, where to buy and a 24 h RetryAfter", err)
	}
	if n.Load() != 1 {
		t.Errorf("%d attempts on a quota 429, want 1", n.Load())
	}
}

func TestLongRetryAfterIsNotWaited(t *testing.T) {
	srv, n := scripted(t, problem(http.StatusServiceUnavailable, "overloaded", "2592000"), ok(false))
	start := time.Now()
	_, err := (&client.Client{BaseURL: srv.URL, Key: key}).Upscale(context.Background(), client.Request{ImageURL: "https://x.test/a.png"})
	if apiErr, isAPIError := errors.AsType[*client.Error](err); !isAPIError || apiErr.RetryAfter != 30*24*time.Hour {
		t.Fatalf("error %v, want the 503 with its 30-day Retry-After", err)
	}
	if n.Load() != 1 || time.Since(start) > 5*time.Second {
		t.Errorf("%d attempts in %v; a 30-day Retry-After must not be waited for", n.Load(), time.Since(start))
	}
}

func TestRetryAfterPastTheDeadlineIsNotWaited(t *testing.T) {
	srv, n := scripted(t, problem(http.StatusServiceUnavailable, "overloaded", "10"), ok(false))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := (&client.Client{BaseURL: srv.URL, Key: key}).Upscale(ctx, client.Request{ImageURL: "https://x.test/a.png"})
	if _, isAPIError := errors.AsType[*client.Error](err); !isAPIError || n.Load() != 1 || ctx.Err() != nil {
		t.Errorf("error %v after %d attempts (context %v); want the 503 at once, before the deadline", err, n.Load(), ctx.Err())
	}
}

func TestCancelStopsAtOnce(t *testing.T) {
	srv, n := scripted(t, problem(http.StatusServiceUnavailable, "overloaded", "20"), ok(false))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err := (&client.Client{BaseURL: srv.URL, Key: key}).Upscale(ctx, client.Request{ImageURL: "https://x.test/a.png"})
	if !errors.Is(err, context.Canceled) || n.Load() != 1 || time.Since(start) > 5*time.Second {
		t.Errorf("error %v after %d attempts in %v; want context.Canceled soon after the cancel", err, n.Load(), time.Since(start))
	}
}

// TestRetriesInFlightAndTransportErrors: a dropped connection and a 409
// idempotency_in_flight are retried; the answer then is the replay.
func TestRetriesInFlightAndTransportErrors(t *testing.T) {
	dropped := func(w http.ResponseWriter) {
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.Close()
	}
	srv, n := scripted(t, dropped, problem(http.StatusConflict, "idempotency_in_flight", "1"), ok(true))
	resp, err := (&client.Client{BaseURL: srv.URL, Key: key}).Upscale(context.Background(), client.Request{ImageURL: "https://x.test/a.png"})
	if err != nil || !resp.Replayed || resp.Via != "credit" || n.Load() != 3 {
		t.Errorf("%+v, %v after %d attempts; want the replayed answer on the third", resp, err, n.Load())
	}
}

func TestOtherProblemsAreNotRetried(t *testing.T) {
	for _, p := range []func(http.ResponseWriter){
		problem(http.StatusBadRequest, "invalid_scale", ""),
		problem(http.StatusConflict, "some_other_conflict", "1"),
		problem(http.StatusUnprocessableEntity, "idempotency_key_reused", ""),
	} {
		srv, n := scripted(t, p, ok(false))
		if _, err := (&client.Client{BaseURL: srv.URL, Key: key}).Upscale(context.Background(), client.Request{ImageURL: "https://x.test/a.png"}); err == nil || n.Load() != 1 {
			t.Errorf("error %v after %d attempts, want the problem after 1", err, n.Load())
		}
	}
}

// TestRetriesWhatWasNotCharged: a 429 rate_limited (nothing charged) and a
// 500 (never kept under the key) are retried, after their Retry-After.
func TestRetriesWhatWasNotCharged(t *testing.T) {
	srv, n := scripted(t, problem(http.StatusTooManyRequests, "rate_limited", "1"), problem(http.StatusInternalServerError, "internal_error", ""), ok(false))
	resp, err := (&client.Client{BaseURL: srv.URL, Key: key}).Upscale(context.Background(), client.Request{ImageURL: "https://x.test/a.png"})
	if err != nil || resp.URL == "" || n.Load() != 3 {
		t.Errorf("%+v, %v after %d attempts; want the answer on the third", resp, err, n.Load())
	}
}

// TestNegativeMaxAttemptsMeansOne: a negative MaxAttempts makes one
// attempt; it used to retry forever.
func TestNegativeMaxAttemptsMeansOne(t *testing.T) {
	srv, n := scripted(t, problem(http.StatusServiceUnavailable, "overloaded", "1"), ok(false))
	_, err := (&client.Client{BaseURL: srv.URL, Key: key, MaxAttempts: -1}).Upscale(context.Background(), client.Request{ImageURL: "https://x.test/a.png"})
	if err == nil || n.Load() != 1 {
		t.Errorf("error %v after %d attempts, want the 503 after 1", err, n.Load())
	}
}

// TestPath: the client calls the path the host mounted the API at.
func TestPath(t *testing.T) {
	var path atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path.Store(r.URL.Path)
		ok(false)(w)
	}))
	defer srv.Close()
	if _, err := (&client.Client{BaseURL: srv.URL + "/", Key: key, Path: "/v2/enlarge"}).Upscale(context.Background(), client.Request{ImageURL: "https://x.test/a.png"}); err != nil {
		t.Fatal(err)
	}
	if got := path.Load(); got != "/v2/enlarge" {
		t.Errorf("path %v, want /v2/enlarge", got)
	}
}

// TestResizedTo: a fitted result's size reaches the caller; one at the
// scale asked for leaves ResizedTo nil.
func TestResizedTo(t *testing.T) {
	srv, _ := scripted(t, ok(false), func(w http.ResponseWriter) {
		w.Write([]byte(`{"url":"https://x.test/r.png","resizedTo":{"width":10206,"height":9797},"via":"credit"}`))
	})
	c := &client.Client{BaseURL: srv.URL, Key: key}
	for _, want := range []*client.Size{nil, {Width: 10206, Height: 9797}} {
		resp, err := c.Upscale(context.Background(), client.Request{ImageURL: "https://x.test/a.png", Scale: 16})
		if err != nil || (want == nil) != (resp.ResizedTo == nil) || (want != nil && *resp.ResizedTo != *want) {
			t.Errorf("ResizedTo %+v, %v; want %+v", resp.ResizedTo, err, want)
		}
	}
}
