package upscale_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	_ "image/png"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/upscaletest"
)

// sendJob sends a request of the job form: method to path, with key and
// the Prefer header prefer (none when empty).
func (e *env) sendJob(method, path, key, prefer, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	if key != "" {
		r.Header.Set("Authorization", "Bearer "+key)
	}
	if prefer != "" {
		r.Header.Set("Prefer", prefer)
	}
	return e.serve(r)
}

// submit submits body as a job and returns its location, checking the
// 202 and its headers.
func (e *env) submit(key, body string) (location string, job map[string]any) {
	e.t.Helper()
	w := e.sendJob("POST", "/api/v1/upscale", key, "respond-async", body)
	if w.Code != http.StatusAccepted {
		e.t.Fatalf("submit: status %d, want 202; body %s", w.Code, w.Body)
	}
	if got := w.Header().Get("Preference-Applied"); got != "respond-async" {
		e.t.Errorf("Preference-Applied %q, want respond-async", got)
	}
	if err := json.Unmarshal(w.Body.Bytes(), &job); err != nil {
		e.t.Fatal(err)
	}
	location = w.Header().Get("Location")
	if location != "/api/v1/upscale/jobs/"+job["id"].(string) || job["status"] != "queued" {
		e.t.Fatalf("Location %q for job %v, want the job's resource, queued", location, job)
	}
	return location, job
}

// job reads the job at location with key.
func (e *env) job(location, key string) upscale.Job {
	e.t.Helper()
	w := e.sendJob("GET", location, key, "", "")
	if w.Code != http.StatusOK {
		e.t.Fatalf("GET %s: status %d; body %s", location, w.Code, w.Body)
	}
	var j upscale.Job
	if err := json.Unmarshal(w.Body.Bytes(), &j); err != nil {
		e.t.Fatal(err)
	}
	return j
}

// waitJob polls the job at location until it has ended.
func (e *env) waitJob(location, key string) upscale.Job {
	e.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if j := e.job(location, key); j.Status.Done() || time.Now().After(deadline) {
			return j
		}
	}
}

// TestJobRunsAndCharges: a job of the job form is answered 202 with its
// Location, holds its unit while it waits, runs, stores a result that
// works, and is charged once; its source is not kept after it ends.
func TestJobRunsAndCharges(t *testing.T) {
	e := newEnv(t)
	location, _ := e.submit(keyFree, body(e.url("/small.png"), `"scale": 4`))
	j := e.waitJob(location, keyFree)
	if j.Status != upscale.JobSucceeded || j.Result == nil || j.Result.Via != upscale.PoolFree || j.Problem != nil || j.Started.IsZero() || j.Finished.IsZero() {
		t.Fatalf("job %+v, want succeeded from the free pool, with its times", j)
	}
	resp, err := http.Get(j.Result.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	img, _, err := image.Decode(resp.Body)
	if err != nil || img.Bounds().Dx() != 64 {
		t.Fatalf("the result link: %v, %v; want a 64-pixel-wide PNG (16 ×4)", img, err)
	}
	if b := e.balance("free"); b.Free != 2 {
		t.Errorf("free images left %d, want 2: charged once", b.Free)
	}
	if n := e.blobs.Len(); n != 1 {
		t.Errorf("%d items in the store, want 1: the result, not the job's source", n)
	}
}

// TestJobWaitAnswersInline: with wait=N, a job that ends in time is
// answered as the request would have been.
func TestJobWaitAnswersInline(t *testing.T) {
	e := newEnv(t)
	w := e.sendJob("POST", "/api/v1/upscale", keyFree, "respond-async, wait=5", body(e.url("/small.png")))
	checkOK(t, w, upscale.PoolFree)
	if got := w.Header().Get("Preference-Applied"); got != "respond-async, wait=5" {
		t.Errorf("Preference-Applied %q", got)
	}
	failing := newEnv(t, func(c *upscale.Config) { c.Upscaler = failingUpscaler{err: upscale.ErrUpstream} })
	w = failing.sendJob("POST", "/api/v1/upscale", keyFree, "respond-async; wait=1, wait=5", body(failing.url("/small.png")))
	checkProblem(t, w, http.StatusBadGateway, "upstream_error")
	if b := failing.balance("free"); b.Free != 3 {
		t.Errorf("free images left %d after a failed job, want 3: not charged", b.Free)
	}
}

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

// TestJobCancel: a queued job canceled never runs, its unit goes back and
// its source is deleted; a running one stops, uncharged, with no result;
// a finished one stays as it ended.
func TestJobCancel(t *testing.T) {
	t.Run("Queued", func(t *testing.T) {
		e := newEnv(t, func(c *upscale.Config) { c.JobWorkers = -1 })
		location, _ := e.submit(keyFree, body(e.url("/small.png")))
		if b := e.balance("free"); b.Free != 2 {
			t.Fatalf("free images left %d while queued, want 2: its unit held", b.Free)
		}
		w := e.sendJob("DELETE", location, keyFree, "", "")
		var j upscale.Job
		if err := json.Unmarshal(w.Body.Bytes(), &j); err != nil || w.Code != 200 || j.Status != upscale.JobCanceled || !j.Started.IsZero() {
			t.Fatalf("DELETE: %d %s; want 200, canceled, never started", w.Code, w.Body)
		}
		if b := e.balance("free"); b.Free != 3 || e.blobs.Len() != 0 {
			t.Errorf("after the cancel: %d free images, %d items stored; want 3 and none", b.Free, e.blobs.Len())
		}
		if j := e.sendJob("DELETE", location, keyFree, "", ""); j.Code != 200 || e.balance("free").Free != 3 {
			t.Errorf("a second DELETE: %d, %d free images; want 200 and 3", j.Code, e.balance("free").Free)
		}
	})
	t.Run("Running", func(t *testing.T) {
		u := gatedUpscaler{entered: make(chan struct{}, 1), gate: make(chan struct{})}
		e := newEnv(t, func(c *upscale.Config) { c.Upscaler = u })
		location, _ := e.submit(keyFree, body(e.url("/small.png")))
		<-u.entered
		if j := e.job(location, keyFree); j.Status != upscale.JobRunning {
			t.Fatalf("job %s in the engine, want running", j.Status)
		}
		w := e.sendJob("DELETE", location, keyFree, "", "")
		var j upscale.Job
		if err := json.Unmarshal(w.Body.Bytes(), &j); err != nil || j.Status != upscale.JobCanceled || j.Result != nil {
			t.Fatalf("DELETE of a running job: %d %s; want canceled without a result", w.Code, w.Body)
		}
		if b := e.balance("free"); b.Free != 3 || e.blobs.Len() != 0 {
			t.Errorf("after the cancel: %d free images, %d items stored; want 3 and none", b.Free, e.blobs.Len())
		}
	})
	t.Run("Finished", func(t *testing.T) {
		e := newEnv(t)
		location, _ := e.submit(keyFree, body(e.url("/small.png")))
		e.waitJob(location, keyFree)
		w := e.sendJob("DELETE", location, keyFree, "", "")
		var j upscale.Job
		if err := json.Unmarshal(w.Body.Bytes(), &j); err != nil || j.Status != upscale.JobSucceeded || e.balance("free").Free != 2 {
			t.Errorf("DELETE of a finished job: %s; want it succeeded, charged", w.Body)
		}
	})
}

// TestJobOfAnotherAccount: another account's job is 404, as an unknown
// one is, word for word; a job needs a key.
func TestJobOfAnotherAccount(t *testing.T) {
	e := newEnv(t, func(c *upscale.Config) { c.JobWorkers = -1 })
	location, _ := e.submit(keyFree, body(e.url("/small.png")))
	theirs := checkProblem(t, e.sendJob("GET", location, keyPro, "", ""), 404, "job_not_found")
	unknown := checkProblem(t, e.sendJob("GET", "/api/v1/upscale/jobs/job_nosuchjob", keyPro, "", ""), 404, "job_not_found")
	if theirs != unknown {
		t.Errorf("another account's job %+v, an unknown one %+v: want the same answer", theirs, unknown)
	}
	checkProblem(t, e.sendJob("DELETE", location, keyPro, "", ""), 404, "job_not_found")
	checkProblem(t, e.sendJob("GET", location, "", "", ""), 401, "unauthorized")
	checkProblem(t, e.sendJob("PATCH", location, keyFree, "", ""), 405, "method_not_allowed")
	if j := e.job(location, keyFree); j.Status != upscale.JobQueued {
		t.Errorf("the owner's job after the others' tries: %s, want queued", j.Status)
	}
}

// TestJobFailureNotCharged: a job the engine fails on ends failed with
// the problem the request would have had, and is not charged.
func TestJobFailureNotCharged(t *testing.T) {
	e := newEnv(t, func(c *upscale.Config) { c.Upscaler = failingUpscaler{err: upscale.ErrUpstream} })
	location, _ := e.submit(keyFree, body(e.url("/small.png")))
	j := e.waitJob(location, keyFree)
	if j.Status != upscale.JobFailed || j.Problem == nil || j.Problem.Code != "upstream_error" || j.Problem.Status != 502 {
		t.Fatalf("job %+v, want failed with upstream_error", j)
	}
	if b := e.balance("free"); b.Free != 3 || e.blobs.Len() != 0 {
		t.Errorf("after the failure: %d free images, %d items stored; want 3 and none", b.Free, e.blobs.Len())
	}
}

// TestStopJobsGivesBack: a job whose worker stops mid-run keeps its unit
// and source, and another handler on the same stores runs it to the end,
// charged once.
func TestStopJobsGivesBack(t *testing.T) {
	var queue upscale.JobQueue
	u := gatedUpscaler{entered: make(chan struct{}, 2), gate: make(chan struct{})}
	e := newEnv(t, func(c *upscale.Config) {
		c.Upscaler = u
		queue = upscale.NewMemoryJobQueue(upscale.MemoryJobQueueOptions{Now: c.Now})
		c.Jobs = queue
	})
	location, _ := e.submit(keyFree, body(e.url("/small.png")))
	<-u.entered
	drain, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := e.handler.StopJobs(drain); err != nil {
		t.Fatal(err)
	}
	if j := e.job(location, keyFree); j.Status != upscale.JobQueued || e.balance("free").Free != 2 {
		t.Fatalf("after its worker stopped: %s, %d free images; want queued, its unit held", j.Status, e.balance("free").Free)
	}
	close(u.gate)
	next, err := upscale.New(upscale.Config{Keys: e.keys, Ledger: e.ledger, Upscaler: upscaletest.PixelUpscaler{}, Blobs: e.blobs, Jobs: queue,
		Fetch: upscale.FetchPolicy{AllowPrivateNetworks: true}, Capacity: upscale.Capacity{IdleRelease: -1}, Now: e.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { next.StopJobs(context.Background()) })
	e.handler = next
	if j := e.waitJob(location, keyFree); j.Status != upscale.JobSucceeded || e.balance("free").Free != 2 || e.blobs.Len() != 1 {
		t.Errorf("run by the next handler: %+v, %d free images, %d items; want succeeded, charged once, the result alone", j, e.balance("free").Free, e.blobs.Len())
	}
}

// TestJobFormKeepsIdempotencyKeys: a request that prefers respond-async
// with an Idempotency-Key is answered as it runs, and its retry replays
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

// withoutReads hides a BlobStore's Get: a store the job form cannot keep
// sources in.
type withoutReads struct{ upscale.BlobStore }

// TestJobFormNeedsItsStores: with a BlobStore that cannot give back what
// it keeps, a request that prefers respond-async is answered as it runs,
// and the job paths know no job.
func TestJobFormNeedsItsStores(t *testing.T) {
	e := newEnv(t, func(c *upscale.Config) { c.Blobs = withoutReads{c.Blobs} })
	w := e.sendJob("POST", "/api/v1/upscale", keyFree, "respond-async", body(e.url("/small.png")))
	if w.Code != http.StatusOK || w.Header().Get("Preference-Applied") != "" {
		t.Errorf("status %d, Preference-Applied %q; want 200 and none", w.Code, w.Header().Get("Preference-Applied"))
	}
	checkProblem(t, e.sendJob("GET", "/api/v1/upscale/jobs/job_x", keyFree, "", ""), 404, "job_not_found")
}

// TestMiddlewareRoutesJobs: Middleware serves the job paths under
// Config.Path, and leaves the rest to the host.
func TestMiddlewareRoutesJobs(t *testing.T) {
	e := newEnv(t, func(c *upscale.Config) { c.JobWorkers = -1 })
	location, _ := e.submit(keyFree, body(e.url("/small.png")))
	host := e.handler.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "the host's", 418) }))
	for path, want := range map[string]int{location: 200, "/api/v1/upscalejobs/x": 418, "/other/jobs/" + strings.TrimPrefix(location, "/api/v1/upscale/jobs/"): 418} {
		r := httptest.NewRequest("GET", path, nil)
		r.Header.Set("Authorization", "Bearer "+keyFree)
		w := httptest.NewRecorder()
		host.ServeHTTP(w, r)
		if w.Code != want {
			t.Errorf("GET %s through Middleware: %d, want %d", path, w.Code, want)
		}
	}
}

// lostCommits is a ledger whose Commit charges but answers ErrUnavailable
// while lose is set: a commit whose answer is lost.
type lostCommits struct {
	*upscale.MemoryLedger
	lose atomic.Bool
}

func (l *lostCommits) Commit(ctx context.Context, id string) error {
	err := l.MemoryLedger.Commit(ctx, id)
	if l.lose.Load() {
		return fmt.Errorf("%w: the answer was lost", upscale.ErrUnavailable)
	}
	return err
}

// countingUpscaler counts its images.
type countingUpscaler struct {
	upscaletest.PixelUpscaler
	n *atomic.Int32
}

func (u countingUpscaler) Upscale(ctx context.Context, src []byte, opts upscale.Params) (upscale.Image, error) {
	u.n.Add(1)
	return u.PixelUpscaler.Upscale(ctx, src, opts)
}

// TestJobChargeSettledByTheNextRun: a run whose commit's answer is lost
// leaves its result prepared; the job runs again, the next run settles the
// charge (charging nothing more) and delivers that result: the engine ran
// once, one result is stored, one unit is charged.
func TestJobChargeSettledByTheNextRun(t *testing.T) {
	var ledger *lostCommits
	var images atomic.Int32
	e := newEnv(t, func(c *upscale.Config) {
		ledger = &lostCommits{MemoryLedger: c.Ledger.(*upscale.MemoryLedger)}
		ledger.lose.Store(true)
		c.Ledger = ledger
		c.SettleTimeout = 100 * time.Millisecond
		c.Upscaler = countingUpscaler{n: &images}
	})
	location, _ := e.submit(keyFree, body(e.url("/small.png")))
	for deadline := time.Now().Add(10 * time.Second); images.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // past the first run's settlement
	if j := e.job(location, keyFree); j.Status.Done() {
		t.Fatalf("with its commit's answer lost: %s, want the job run again", j.Status)
	}
	ledger.lose.Store(false)
	j := e.waitJob(location, keyFree)
	if j.Status != upscale.JobSucceeded || images.Load() != 1 || e.blobs.Len() != 1 || e.balance("free").Free != 2 {
		t.Errorf("job %s, %d images made, %d items stored, %d free left; want succeeded, 1, 1 (the result) and 2", j.Status, images.Load(), e.blobs.Len(), e.balance("free").Free)
	}
}
