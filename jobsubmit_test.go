package upscale_test

import (
	"bytes"
	"encoding/json"
	"image"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/upscaletest"
)

// headerReader is an Upscaler that reads headers as the engines do
// (MemoryEstimator): what image.DecodeConfig cannot read is unsupported.
type headerReader struct{ upscaletest.PixelUpscaler }

func (headerReader) EstimateMemory(src []byte, params upscale.Params) (int64, error) {
	cfg, _, err := image.DecodeConfig(bytes.NewReader(src))
	if err != nil {
		return 0, upscale.ErrUnsupportedImage
	}
	return int64(cfg.Width*cfg.Height) * int64(params.Scale*params.Scale) * 4, nil
}

// TestJobRefusedAtSubmission: what can be judged at submission is
// answered then, with the request's status and code, and makes no job:
// nothing reserved, nothing kept.
func TestJobRefusedAtSubmission(t *testing.T) {
	e := newEnv(t, func(c *upscale.Config) { c.Upscaler = headerReader{} })
	for _, tc := range []struct {
		name, body string
		status     int
		code       string
	}{
		{"InvalidScale", body(e.url("/small.png"), `"scale": 3`), 400, "invalid_scale"},
		{"NotAnImage", body(e.url("/text")), 400, "unsupported_image"},
		{"Unreachable", body(e.url("/missing.png")), 400, "source_unreachable"},
		{"PaidScale", body(e.url("/small.png"), `"scale": 8`), 403, "paid_plan_required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkProblem(t, e.sendJob("POST", "/api/v1/upscale", keyFree, "respond-async", tc.body), tc.status, tc.code)
		})
	}
	strict := newEnv(t, func(c *upscale.Config) { c.Fetch.AllowPrivateNetworks = false })
	checkProblem(t, strict.sendJob("POST", "/api/v1/upscale", keyFree, "respond-async", body(strict.url("/small.png"))), 400, "source_forbidden")
	e.putAccount(upscale.Account{ID: "free", Plan: upscale.Plan{Name: "none left", MaxFileBytes: 1 << 20}})
	checkProblem(t, e.sendJob("POST", "/api/v1/upscale", keyFree, "respond-async", body(e.url("/small.png"))), 429, "quota_exhausted")
	e.putAccount(upscale.Account{ID: "free", Plan: freePlan})
	if b := e.balance("free"); b.Free != 3 || e.blobs.Len() != 0 {
		t.Errorf("after refusals: %d free images, %d items stored; want 3 and none", b.Free, e.blobs.Len())
	}
}

// TestJobSubmittedOnce: a submission sent again with its Idempotency-Key
// is answered with the same job, as it stands now, and charged once; the
// key does not also name a request of the synchronous form.
func TestJobSubmittedOnce(t *testing.T) {
	e := newEnv(t)
	sendTo := func(e *env, onceKey, source, prefer string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/api/v1/upscale", strings.NewReader(body(e.url(source))))
		r.Header.Set("Authorization", "Bearer "+keyFree)
		r.Header.Set("Idempotency-Key", onceKey)
		if prefer != "" {
			r.Header.Set("Prefer", prefer)
		}
		return e.serve(r)
	}
	sendAs := func(onceKey, source, prefer string) *httptest.ResponseRecorder {
		return sendTo(e, onceKey, source, prefer)
	}
	send := func(prefer string) *httptest.ResponseRecorder { return sendAs("submit-once", "/small.png", prefer) }
	first := send("respond-async")
	location := first.Header().Get("Location")
	if first.Code != http.StatusAccepted || first.Header().Get("Idempotent-Replayed") != "" {
		t.Fatalf("the first submission: %d %s", first.Code, first.Body)
	}
	e.waitJob(location, keyFree)
	again := send("respond-async")
	var job upscale.Job
	if err := json.Unmarshal(again.Body.Bytes(), &job); err != nil {
		t.Fatal(err)
	}
	if again.Code != http.StatusAccepted || again.Header().Get("Location") != location || again.Header().Get("Idempotent-Replayed") != "true" ||
		job.Status != upscale.JobSucceeded || job.Result == nil {
		t.Errorf("the submission again: %d at %q (replayed %q), %s; want 202 at %s, replayed, the job succeeded",
			again.Code, again.Header().Get("Location"), again.Header().Get("Idempotent-Replayed"), again.Body, location)
	}
	checkOK(t, send("respond-async, wait=5"), upscale.PoolFree)
	checkProblem(t, send(""), http.StatusUnprocessableEntity, "idempotency_key_reused")
	if b := e.balance("free"); b.Free != 2 {
		t.Errorf("%d free images left, want 2: charged once", b.Free)
	}
	// A refused submission's answer is kept as a request's is.
	hits := e.hits.Load()
	refused := sendAs("missing", "/missing.png", "respond-async")
	refusal := bytes.Clone(refused.Body.Bytes())
	checkProblem(t, refused, sourceStatus("source_unreachable"), "source_unreachable")
	replayed := sendAs("missing", "/missing.png", "respond-async")
	if replayed.Header().Get("Idempotent-Replayed") != "true" || !bytes.Equal(replayed.Body.Bytes(), refusal) || e.hits.Load() != hits+1 {
		t.Errorf("the refused submission again: replayed %q, %s, %d downloads; want the kept refusal %s, one download",
			replayed.Header().Get("Idempotent-Replayed"), replayed.Body, e.hits.Load()-hits, refusal)
	}
	// A job forgotten before its key: result_expired.
	short := newEnv(t, func(c *upscale.Config) { c.JobTTL = time.Hour })
	short.waitJob(sendTo(short, "submit-once", "/small.png", "respond-async").Header().Get("Location"), keyFree)
	short.clock.Advance(2 * time.Hour)
	checkProblem(t, sendTo(short, "submit-once", "/small.png", "respond-async"), http.StatusGone, "result_expired")
}

// TestJobMalformedIdempotencyKey: a submission's malformed Idempotency-Key
// is refused as the synchronous form's is, before anything is queued or
// held: a client that retries with it cannot make two jobs.
func TestJobMalformedIdempotencyKey(t *testing.T) {
	e := newEnv(t, func(c *upscale.Config) { c.JobWorkers = -1 })
	for range 2 {
		r := httptest.NewRequest("POST", "/api/v1/upscale", strings.NewReader(body(e.url("/small.png"))))
		r.Header.Set("Authorization", "Bearer "+keyFree)
		r.Header.Set("Prefer", "respond-async")
		r.Header.Set("Idempotency-Key", "\"unterminated")
		checkProblem(t, e.serve(r), http.StatusBadRequest, "invalid_request")
	}
	if b := e.balance("free"); b.Free != 3 || e.blobs.Len() != 0 {
		t.Errorf("after two malformed keys: %d free images, %d items stored; want 3 and none", b.Free, e.blobs.Len())
	}
}

// TestJobWaitBounded: a wait of any number of digits is bounded to the
// 60 seconds the server waits at most, never read as negative.
func TestJobWaitBounded(t *testing.T) {
	e := newEnv(t)
	for _, wait := range []string{"61", "9223372036854775807", "99999999999999999999999"} {
		w := e.sendJob("POST", "/api/v1/upscale", keyFree, "respond-async, wait="+wait, body(e.url("/small.png")))
		if got := w.Header().Get("Preference-Applied"); got != "respond-async, wait=60" {
			t.Errorf("wait=%s: Preference-Applied %q, want wait=60", wait, got)
		}
		checkOK(t, w, upscale.PoolFree)
	}
}

// TestJobWaitersHoldTheShare: answers held open for a job (wait=N, here
// replays of one submission) hold their account's places as requests
// do: once they hold its share, the account's next request is refused
// 429 at once, and another account is served meanwhile.
func TestJobWaitersHoldTheShare(t *testing.T) {
	e := newEnv(t, func(c *upscale.Config) {
		c.JobWorkers = -1 // the job never ends
		c.Capacity.AccountShare = 2
	})
	send := func(wait string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/api/v1/upscale", strings.NewReader(body(e.url("/small.png"))))
		r.Header.Set("Authorization", "Bearer "+keyFree)
		r.Header.Set("Idempotency-Key", "waited-for")
		r.Header.Set("Prefer", "respond-async, wait="+wait)
		return e.serve(r)
	}
	if w := send("1"); w.Code != http.StatusAccepted {
		t.Fatalf("submission: %d %s", w.Code, w.Body)
	}
	answered := make(chan *httptest.ResponseRecorder, 2)
	for range 2 {
		go func() { answered <- send("3") }()
	}
	for deadline := time.Now().Add(10 * time.Second); e.handler.Load().JobWaiters < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the two waiters did not wait")
		}
	}
	checkProblem(t, send("3"), http.StatusTooManyRequests, "rate_limited")
	checkOK(t, e.post(keyPro, body(e.url("/small.png"))), upscale.PoolFree)
	for range 2 {
		if w := <-answered; w.Code != http.StatusAccepted || w.Header().Get("Preference-Applied") != "respond-async, wait=3" {
			t.Errorf("a waiter: %d, Preference-Applied %q; want 202 once its wait ended", w.Code, w.Header().Get("Preference-Applied"))
		}
	}
}
