package upscale_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/upscaletest"
)

func (e *env) postOnce(key, idempotencyKey, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/api/v1/upscale", strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+key)
	r.Header.Set("Idempotency-Key", idempotencyKey)
	return e.serve(r)
}

// TestIdempotentReplay: the same request with the same key twice runs and
// is charged once; the second answer is the first, byte for byte, marked
// replayed. The same request written differently is the same request.
func TestIdempotentReplay(t *testing.T) {
	e := newEnv(t)
	first := e.postOnce(keyFree, `"order-17"`, body(e.url("/small.png"), `"scale": 2`))
	checkOK(t, first, upscale.PoolFree)
	if got := first.Header().Get("Idempotent-Replayed"); got != "" {
		t.Errorf("first answer marked Idempotent-Replayed: %q", got)
	}
	if first.Header().Get("Upscale-Engine") == "" {
		t.Error("first answer has no Upscale-Engine header")
	}
	again := e.postOnce(keyFree, "order-17", `{"scale":2.0, "denoise": "max", "imageUrl": "`+e.url("/small.png")+`"}`)
	if again.Code != http.StatusOK || !bytes.Equal(again.Body.Bytes(), first.Body.Bytes()) || again.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %s (Idempotent-Replayed %q); want 200, the first body %s, marked replayed", again.Code, again.Body, again.Header().Get("Idempotent-Replayed"), first.Body)
	}
	if got := again.Header().Get("Upscale-Engine"); got != "" {
		t.Errorf("replay has Upscale-Engine %q: an answer's replay says what was delivered, not how", got)
	}
	if got := e.balance("free").Free; got != 2 {
		t.Errorf("free pool %d after a request and its replay, want 2: charged once", got)
	}
	if got := e.hits.Load(); got != 1 {
		t.Errorf("the source was fetched %d times, want 1", got)
	}
}

// TestIdempotencyKeyReused: another request under a used key is refused
// with 422; the same key under another account is that account's own.
func TestIdempotencyKeyReused(t *testing.T) {
	e := newEnv(t)
	checkOK(t, e.postOnce(keyFree, "k", body(e.url("/small.png"))), upscale.PoolFree)
	checkProblem(t, e.postOnce(keyFree, "k", body(e.url("/small.png"), `"scale": 4`)), http.StatusUnprocessableEntity, "idempotency_key_reused")
	checkOK(t, e.postOnce(keyPro, "k", body(e.url("/small.png"), `"scale": 4`)), upscale.PoolFree)
	if got := e.balance("free").Free; got != 2 {
		t.Errorf("free pool %d, want 2: the refused request is not charged", got)
	}
}

// TestIdempotentConcurrentDuplicates: of 20 identical requests with one
// key sent at once, one runs; the others get 409 with a Retry-After while
// it runs, and the replay once it has finished.
func TestIdempotentConcurrentDuplicates(t *testing.T) {
	u := upscaletest.GatedUpscaler{Entered: make(chan struct{}, 20), Gate: make(chan struct{})}
	e := newEnv(t, func(c *upscale.Config) {
		c.Upscaler = u
		c.Capacity.QueueLength = 40 // admission is not what this test is about
	})
	results := make(chan *httptest.ResponseRecorder, 20)
	for range 20 {
		go func() { results <- e.postOnce(keyFree, "dup", body(e.url("/small.png"))) }()
	}
	<-u.Entered
	for range 19 {
		w := <-results
		checkProblem(t, w, http.StatusConflict, "idempotency_in_flight")
		if w.Header().Get("Retry-After") == "" {
			t.Error("409 without a Retry-After")
		}
	}
	close(u.Gate)
	first := <-results
	checkOK(t, first, upscale.PoolFree)
	replay := e.postOnce(keyFree, "dup", body(e.url("/small.png")))
	if !bytes.Equal(replay.Body.Bytes(), first.Body.Bytes()) {
		t.Errorf("replay %s, want %s", replay.Body, first.Body)
	}
	if got := e.balance("free").Free; got != 2 {
		t.Errorf("free pool %d after 21 requests with one key, want 2: charged once", got)
	}
}

// failingOnceUpscaler fails its first image as a crashed model does.
type failingOnceUpscaler struct {
	upscaletest.PixelUpscaler
	calls *atomic.Int32
}

func (u failingOnceUpscaler) Upscale(ctx context.Context, src []byte, params upscale.Params) (upscale.Image, error) {
	if u.calls.Add(1) == 1 {
		return upscale.Image{}, upscale.ErrUpstream
	}
	return u.PixelUpscaler.Upscale(ctx, src, params)
}

// TestIdempotentRetryAfterFailure: a 502 is safe to retry, so it is not
// kept: the retry with the same key runs again, and only it is charged.
func TestIdempotentRetryAfterFailure(t *testing.T) {
	var calls atomic.Int32
	e := newEnv(t, func(c *upscale.Config) { c.Upscaler = failingOnceUpscaler{calls: &calls} })
	checkProblem(t, e.postOnce(keyFree, "retry-me", body(e.url("/small.png"))), http.StatusBadGateway, "upstream_error")
	checkOK(t, e.postOnce(keyFree, "retry-me", body(e.url("/small.png"))), upscale.PoolFree)
	if got := e.balance("free").Free; got != 2 {
		t.Errorf("free pool %d after a 502 and its successful retry, want 2", got)
	}
	// A kept failure is replayed: the source answered 404.
	checkProblem(t, e.postOnce(keyFree, "missing", body(e.url("/missing.png"))), http.StatusBadRequest, "source_unreachable")
	hits := e.hits.Load()
	w := e.postOnce(keyFree, "missing", body(e.url("/missing.png")))
	checkProblem(t, w, http.StatusBadRequest, "source_unreachable")
	if w.Header().Get("Idempotent-Replayed") != "true" || e.hits.Load() != hits {
		t.Errorf("the 400's retry was not replayed (header %q, %d more fetches)", w.Header().Get("Idempotent-Replayed"), e.hits.Load()-hits)
	}
}

// TestIdempotentReplayAfterExpiry: once the result's link has expired, a
// replay cannot give a working link: 410, and nothing charged.
func TestIdempotentReplayAfterExpiry(t *testing.T) {
	e := newEnv(t, func(c *upscale.Config) { c.LinkTTL = time.Hour })
	checkOK(t, e.postOnce(keyFree, "old", body(e.url("/small.png"))), upscale.PoolFree)
	e.clock.Advance(time.Hour)
	checkProblem(t, e.postOnce(keyFree, "old", body(e.url("/small.png"))), http.StatusGone, "result_expired")
	if got := e.balance("free").Free; got != 2 {
		t.Errorf("free pool %d, want 2", got)
	}
}

func TestIdempotencyKeyHeader(t *testing.T) {
	e := newEnv(t)
	for name, values := range map[string][]string{
		"Empty":        {""},
		"TooLong":      {strings.Repeat("k", 256)},
		"NonASCII":     {"schlüssel"},
		"Unterminated": {`"open`},
		"Two":          {"a", "b"},
	} {
		t.Run(name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/api/v1/upscale", strings.NewReader(body(e.url("/small.png"))))
			r.Header.Set("Authorization", "Bearer "+keyFree)
			r.Header["Idempotency-Key"] = values
			checkProblem(t, e.serve(r), http.StatusBadRequest, "invalid_request")
		})
	}
	if got := e.hits.Load(); got != 0 {
		t.Errorf("the source was fetched %d times for refused keys", got)
	}
}

// TestIdempotencyAcrossHandlers: two handlers sharing one store (as
// replicas share sqlstore) see each other's keys.
func TestIdempotencyAcrossHandlers(t *testing.T) {
	store := upscale.NewMemoryIdempotencyStore(upscale.MemoryIdempotencyStoreOptions{})
	e := newEnv(t, func(c *upscale.Config) { c.Idempotency = store })
	other, err := upscale.New(upscale.Config{
		Keys: e.keys, Ledger: e.ledger, Upscaler: upscaletest.PixelUpscaler{}, Blobs: e.blobs,
		Idempotency: store, Fetch: upscale.FetchPolicy{AllowPrivateNetworks: true}, Capacity: upscale.Capacity{IdleRelease: -1}, Now: e.clock.Now, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	first := e.postOnce(keyFree, "shared", body(e.url("/small.png")))
	checkOK(t, first, upscale.PoolFree)
	r := httptest.NewRequest(http.MethodPost, "/api/v1/upscale", strings.NewReader(body(e.url("/small.png"))))
	r.Header.Set("Authorization", "Bearer "+keyFree)
	r.Header.Set("Idempotency-Key", "shared")
	w := httptest.NewRecorder()
	other.ServeHTTP(w, r)
	checkAnswer(t, r, w)
	if !bytes.Equal(w.Body.Bytes(), first.Body.Bytes()) {
		t.Errorf("the other handler answered %s, want the replay %s", w.Body, first.Body)
	}
}

// TestIdempotentCallerGone: a caller that goes away while its source is
// downloading leaves nothing kept under its key, so its retry runs; had the
// cut-short download's failure been kept, the retry would replay it.
func TestIdempotentCallerGone(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/api/v1/upscale", strings.NewReader(body(e.url("/slow.png"))))
	r.Header.Set("Authorization", "Bearer "+keyFree)
	r.Header.Set("Idempotency-Key", "gone")
	time.AfterFunc(50*time.Millisecond, cancel)
	e.serve(r)
	w := e.postOnce(keyFree, "gone", body(e.url("/slow.png")))
	checkOK(t, w, upscale.PoolFree)
	if w.Header().Get("Idempotent-Replayed") != "" {
		t.Error("the retry was answered from the abandoned attempt")
	}
}

// TestChargedOnceAcrossCrash: the in-memory stores keep the crash
// contract within one process (two handlers sharing them); sqlstore runs
// the same suite on SQLite and PostgreSQL.
func TestChargedOnceAcrossCrash(t *testing.T) {
	upscaletest.TestChargedOnceAcrossCrash(t, func(t *testing.T, clock *upscaletest.Clock) upscaletest.ChargeStores {
		return upscaletest.ChargeStores{
			Ledger:      upscale.NewMemoryLedger(upscale.LedgerOptions{Now: clock.Now}),
			Idempotency: upscale.NewMemoryIdempotencyStore(upscale.MemoryIdempotencyStoreOptions{Now: clock.Now}),
		}
	})
}

// TestTransientSourceFailureNotKept: an origin that fails for now (503)
// gives 502 source_unavailable, which is not kept under the key: the retry
// with the same key, once the origin is back, runs and succeeds. Before,
// the failure was 400 and replayed for the key's whole day.
func TestTransientSourceFailureNotKept(t *testing.T) {
	e := newEnv(t)
	checkProblem(t, e.postOnce(keyFree, "flaky", body(e.url("/flaky-once.png"))), http.StatusBadGateway, "source_unavailable")
	w := e.postOnce(keyFree, "flaky", body(e.url("/flaky-once.png")))
	checkOK(t, w, upscale.PoolFree)
	if w.Header().Get("Idempotent-Replayed") != "" {
		t.Error("the retry was answered from the failed attempt")
	}
}

// TestIdempotencyKeyCoversFormat: the same Idempotency-Key with another
// format or quality is another request (422), not the first replayed.
func TestIdempotencyKeyCoversFormat(t *testing.T) {
	e := newEnv(t)
	checkOK(t, e.postOnce(keyPro, `"k-format"`, body(e.url("/small.png"))), upscale.PoolFree)
	checkProblem(t, e.postOnce(keyPro, `"k-format"`, body(e.url("/small.png"), `"format": "webp"`)), http.StatusUnprocessableEntity, "idempotency_key_reused")
	checkOK(t, e.postOnce(keyPro, `"k-quality"`, body(e.url("/small.png"), `"format": "webp"`)), upscale.PoolFree)
	checkProblem(t, e.postOnce(keyPro, `"k-quality"`, body(e.url("/small.png"), `"format": "webp"`, `"quality": 50`)), http.StatusUnprocessableEntity, "idempotency_key_reused")
}
