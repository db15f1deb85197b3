package upscale_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	_ "image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

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
		u := upscaletest.GatedUpscaler{Entered: make(chan struct{}, 1), Gate: make(chan struct{})}
		e := newEnv(t, func(c *upscale.Config) { c.Upscaler = u })
		location, _ := e.submit(keyFree, body(e.url("/small.png")))
		<-u.Entered
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
	u := upscaletest.GatedUpscaler{Entered: make(chan struct{}, 2), Gate: make(chan struct{})}
	e := newEnv(t, func(c *upscale.Config) {
		c.Upscaler = u
		queue = upscale.NewMemoryJobQueue(upscale.MemoryJobQueueOptions{Now: c.Now})
		c.Jobs = queue
	})
	location, _ := e.submit(keyFree, body(e.url("/small.png")))
	<-u.Entered
	drain, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := e.handler.StopJobs(drain); err != nil {
		t.Fatal(err)
	}
	if j := e.job(location, keyFree); j.Status != upscale.JobQueued || e.balance("free").Free != 2 {
		t.Fatalf("after its worker stopped: %s, %d free images; want queued, its unit held", j.Status, e.balance("free").Free)
	}
	close(u.Gate)
	next, err := upscale.New(upscale.Config{Keys: e.keys, Ledger: e.ledger, Upscaler: upscaletest.PixelUpscaler{}, Blobs: e.blobs, Jobs: queue,
		Fetch: upscale.FetchPolicy{AllowPrivateNetworks: true}, Capacity: upscale.Capacity{IdleRelease: -1}, Now: e.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := next.StartJobs(context.Background()); err != nil {
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

// withoutHolds hides a ledger's Hold: a ledger the job form cannot keep a
// job's unit in.
type withoutHolds struct{ upscale.QuotaLedger }

// TestJobFormNeedsItsStores: with a BlobStore that cannot give back what
// it keeps, a request that prefers respond-async is answered as it runs,
// the job paths know no job, and the job gauges read -1, as for a queue
// that cannot count; a Jobs given with such stores, or with a ledger
// that cannot hold a unit, is refused by New, not silently never used.
func TestJobFormNeedsItsStores(t *testing.T) {
	e := newEnv(t, func(c *upscale.Config) { c.Blobs = withoutReads{c.Blobs} })
	w := e.sendJob("POST", "/api/v1/upscale", keyFree, "respond-async", body(e.url("/small.png")))
	if w.Code != http.StatusOK || w.Header().Get("Preference-Applied") != "" {
		t.Errorf("status %d, Preference-Applied %q; want 200 and none", w.Code, w.Header().Get("Preference-Applied"))
	}
	checkProblem(t, e.sendJob("GET", "/api/v1/upscale/jobs/job_x", keyFree, "", ""), 404, "job_not_found")
	if load := e.handler.Load(); load.JobsQueued != -1 || load.JobsRunning != -1 {
		t.Errorf("job gauges without the job form: %d queued, %d running; want -1 and -1", load.JobsQueued, load.JobsRunning)
	}
	for name, change := range map[string]func(*upscale.Config){
		"BlobReader":        func(c *upscale.Config) { c.Blobs = withoutReads{c.Blobs} },
		"ReservationHolder": func(c *upscale.Config) { c.Ledger = withoutHolds{c.Ledger} },
	} {
		cfg := upscale.Config{Keys: e.keys, Ledger: e.ledger, Upscaler: upscaletest.PixelUpscaler{}, Blobs: e.blobs, Jobs: upscale.NewMemoryJobQueue(upscale.MemoryJobQueueOptions{})}
		change(&cfg)
		if _, err := upscale.New(cfg); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("Config.Jobs with stores short of a %s: %v; want New to refuse it, naming it", name, err)
		}
	}
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

// TestJobFormWhereverMounted: a host that mounts the Handler at its own
// path, at a path holding "jobs", under http.StripPrefix, or behind
// Middleware gets the synchronous answer, and a job whose Location a GET
// reads and a DELETE cancels, through its own server.
func TestJobFormWhereverMounted(t *testing.T) {
	for _, tc := range []struct {
		name string
		path string // Config.Path; empty for the default
		// mount mounts h on the host's mux and returns the path the
		// caller posts to.
		mount func(mux *http.ServeMux, h *upscale.Handler) string
	}{
		{"ConfigPath", "/v2/enlarge", func(mux *http.ServeMux, h *upscale.Handler) string {
			mux.Handle("/v2/enlarge", h)
			mux.Handle("/v2/enlarge/jobs/", h)
			return "/v2/enlarge"
		}},
		{"OwnPathHoldingJobs", "", func(mux *http.ServeMux, h *upscale.Handler) string {
			mux.Handle("/api/jobs/upscale", h)
			mux.Handle("/api/jobs/upscale/jobs/", h)
			return "/api/jobs/upscale"
		}},
		{"StripPrefix", "", func(mux *http.ServeMux, h *upscale.Handler) string {
			mux.Handle("/svc/", http.StripPrefix("/svc", h))
			return "/svc/api/v1/upscale"
		}},
		{"Middleware", "", func(mux *http.ServeMux, h *upscale.Handler) string {
			mux.Handle("/", h.Middleware(http.NotFoundHandler()))
			return "/api/v1/upscale"
		}},
		{"SubtreeWithTrailingSlash", "", func(mux *http.ServeMux, h *upscale.Handler) string {
			mux.Handle("/enlarge/", h)
			return "/enlarge/"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, func(c *upscale.Config) {
				c.JobWorkers = -1 // the job stays queued, to be canceled
				c.Path = tc.path
			})
			mux := http.NewServeMux()
			post := tc.mount(mux, e.handler)
			host := httptest.NewServer(mux)
			defer host.Close()
			call := func(method, path, prefer, body string) (*http.Response, []byte) {
				t.Helper()
				r, _ := http.NewRequest(method, host.URL+path, strings.NewReader(body))
				r.Header.Set("Authorization", "Bearer "+keyFree)
				if prefer != "" {
					r.Header.Set("Prefer", prefer)
				}
				resp, err := http.DefaultClient.Do(r)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp, b
			}
			if resp, b := call("POST", post, "", body(e.url("/small.png"))); resp.StatusCode != http.StatusOK {
				t.Fatalf("POST %s: %d %s, want 200", post, resp.StatusCode, b)
			}
			resp, b := call("POST", post, "respond-async", body(e.url("/small.png")))
			location := resp.Header.Get("Location")
			if resp.StatusCode != http.StatusAccepted || !strings.HasPrefix(location, strings.TrimSuffix(post, "/")+"/jobs/job_") {
				t.Fatalf("POST %s as a job: %d at %q, %s; want 202 at %s/jobs/...", post, resp.StatusCode, location, b, post)
			}
			if resp, b := call("GET", location, "", ""); resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"status":"queued"`) {
				t.Errorf("GET %s: %d %s, want the job, queued", location, resp.StatusCode, b)
			}
			if resp, b := call("DELETE", location, "", ""); resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"status":"canceled"`) {
				t.Errorf("DELETE %s: %d %s, want the job, canceled", location, resp.StatusCode, b)
			}
			for _, method := range []string{"PATCH", "POST"} {
				if resp, _ := call(method, location, "", ""); resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, DELETE" {
					t.Errorf("%s %s: %d, Allow %q; want 405, GET and DELETE", method, location, resp.StatusCode, resp.Header.Get("Allow"))
				}
			}
			if b := e.balance("free"); b.Free != 2 {
				t.Errorf("%d free images left, want 2: the request charged, the job's unit back", b.Free)
			}
		})
	}
}

// TestConfigPathRefused: a Config.Path the route table cannot hold is
// refused by New, named.
func TestConfigPathRefused(t *testing.T) {
	for _, path := range []string{"api/v1/upscale", "/api/v1/upscale/", "/", "/api//upscale", "/api/{v}/upscale", "/api v1", "/api/100%/upscale", "/api/été", "/api?v=1"} {
		_, err := upscale.New(upscale.Config{Keys: upscale.NewMemoryKeyStore(), Ledger: upscale.NewMemoryLedger(upscale.LedgerOptions{}),
			Upscaler: upscaletest.PixelUpscaler{}, Blobs: withoutReads{}, Path: path})
		if err == nil || !strings.Contains(err.Error(), "Config.Path") {
			t.Errorf("New with Path %q: %v, want an error naming Config.Path", path, err)
		}
	}
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

// TestNewStartsNothing: New leaves no goroutine behind; the workers start
// with StartJobs, stop with StopJobs, and may start again.
func TestNewStartsNothing(t *testing.T) {
	keys, ledger := upscale.NewMemoryKeyStore(), upscale.NewMemoryLedger(upscale.LedgerOptions{})
	blobs := newMemoryBlobs(t, upscale.MemoryBlobStoreOptions{})
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	h, err := upscale.New(upscale.Config{Keys: keys, Ledger: ledger, Upscaler: upscaletest.PixelUpscaler{}, Blobs: blobs, Capacity: upscale.Capacity{IdleRelease: -1}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 2 {
		if err := h.StartJobs(ctx); err != nil {
			t.Fatal(err)
		}
		if err := h.StartJobs(ctx); err == nil {
			t.Error("StartJobs while the workers run: no error")
		}
		if err := h.StopJobs(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestJobWaitsItsTurn: a job whose run waits for the engine behind
// requests longer than EngineTimeout is not failed for it: only the
// engine's own work is under the deadline.
func TestJobWaitsItsTurn(t *testing.T) {
	e := newEnv(t, func(c *upscale.Config) {
		c.Upscaler = slowUpscaler{took: 150 * time.Millisecond}
		c.EngineTimeout = 200 * time.Millisecond
		c.Capacity.EngineConcurrency = 1
	})
	requests := make(chan *httptest.ResponseRecorder, 3)
	for range 3 {
		go func() { requests <- e.post(keyPro, body(e.url("/small.png"))) }()
	}
	for e.hits.Load() < 3 { // the requests hold or wait for the engine
		time.Sleep(time.Millisecond)
	}
	location, _ := e.submit(keyFree, body(e.url("/small.png")))
	if j := e.waitJob(location, keyFree); j.Status != upscale.JobSucceeded {
		t.Errorf("a job that waited behind requests: %s %+v, want succeeded", j.Status, j.Problem)
	}
	for range 3 {
		<-requests
	}
}

// jobMetrics records the job form's counts.
type jobMetrics struct {
	mu       sync.Mutex
	jobsDone map[upscale.JobStatus]int
	charged  map[string]upscale.Pool // by a request's code
}

func newJobMetrics() *jobMetrics {
	return &jobMetrics{jobsDone: map[upscale.JobStatus]int{}, charged: map[string]upscale.Pool{}}
}

func (m *jobMetrics) Attach(func() upscale.Load)             {}
func (m *jobMetrics) StepDone(upscale.Step, time.Duration)   {}
func (m *jobMetrics) ImageDone(sourceBytes, outputBytes int) {}
func (m *jobMetrics) RequestDone(code string, pool upscale.Pool, took time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if pool != "" {
		m.charged[code] = pool
	}
}

func (m *jobMetrics) JobDone(status upscale.JobStatus, waited, ran time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.jobsDone[status]++
}

func (m *jobMetrics) done(status upscale.JobStatus) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.jobsDone[status]
}

// downResults is a BlobReader whose Put of a result fails with
// ErrUnavailable while down is set; a job's source is kept as ever.
type downResults struct {
	upscale.BlobReader
	down atomic.Bool
}

func (b *downResults) Put(ctx context.Context, key string, data []byte, contentType string, expires time.Time) (string, error) {
	if b.down.Load() && !strings.HasSuffix(key, ".source") {
		return "", fmt.Errorf("%w: the object store is down", upscale.ErrUnavailable)
	}
	return b.BlobReader.Put(ctx, key, data, contentType, expires)
}

// TestCancelWaitingToRunAgain: a job canceled while it waits to run again
// (its run asked to Retry, or StopJobs gave it back) is settled by the
// DELETE: its unit back, its source deleted, its canceled webhook sent,
// once; a DELETE sent again changes and counts nothing more. An accepted
// job is not counted as charged.
func TestCancelWaitingToRunAgain(t *testing.T) {
	for _, tc := range []struct {
		name string
		// leave ends the job's run under way so that it waits to run
		// again.
		leave func(t *testing.T, e *env, blobs *downResults, gate chan struct{})
		// restart starts the workers again once the job is canceled,
		// for its webhook to be delivered.
		restart bool
	}{
		{"AfterRetry", func(t *testing.T, e *env, blobs *downResults, gate chan struct{}) {
			blobs.down.Store(true)
			close(gate)
		}, false},
		{"AfterStop", func(t *testing.T, e *env, blobs *downResults, gate chan struct{}) {
			drain, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
			defer cancel()
			if err := e.handler.StopJobs(drain); err != nil {
				t.Fatal(err)
			}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := newReceiver(t, nil)
			var blobs *downResults
			metrics := newJobMetrics()
			u := upscaletest.GatedUpscaler{Entered: make(chan struct{}, 2), Gate: make(chan struct{})}
			e, _ := webhookEnv(t, rc, func(c *upscale.Config) {
				blobs = &downResults{BlobReader: c.Blobs.(upscale.BlobReader)}
				c.Blobs, c.Upscaler, c.Metrics = blobs, u, metrics
			})
			w := e.submitWithWebhook(rc.URL + "/hooks")
			if w.Code != http.StatusAccepted {
				t.Fatalf("submit: %d %s", w.Code, w.Body)
			}
			location := w.Header().Get("Location")
			<-u.Entered
			tc.leave(t, e, blobs, u.Gate)
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				j := e.job(location, keyFree)
				if j.Status == upscale.JobQueued && !j.Started.IsZero() {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("job %s, want it waiting to run again", j.Status)
				}
			}
			for range 2 {
				w := e.sendJob("DELETE", location, keyFree, "", "")
				var j upscale.Job
				if err := json.Unmarshal(w.Body.Bytes(), &j); err != nil || j.Status != upscale.JobCanceled {
					t.Fatalf("DELETE: %d %s, want canceled", w.Code, w.Body)
				}
			}
			if b := e.balance("free"); b.Free != 3 || e.blobs.Len() != 0 {
				t.Errorf("after the cancel: %d free images, %d items stored; want 3 and none", b.Free, e.blobs.Len())
			}
			if tc.restart {
				if err := e.handler.StartJobs(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			posts := rc.received(t, 1)
			if len(posts) != 1 || !strings.Contains(string(posts[0].body), `"upscale.job.canceled"`) {
				t.Errorf("webhooks %d, want one canceled", len(posts))
			}
			if n := metrics.done(upscale.JobCanceled); n != 1 {
				t.Errorf("the canceled job counted %d times, want once", n)
			}
			metrics.mu.Lock()
			defer metrics.mu.Unlock()
			if pool, ok := metrics.charged["accepted"]; ok {
				t.Errorf("an accepted job counted as charged to %s", pool)
			}
		})
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

// TestWebhookGone: a receiver that answers 410 Gone gets no more
// attempts of that webhook.
func TestWebhookGone(t *testing.T) {
	rc := newReceiver(t, func(int) int { return http.StatusGone })
	e, _ := webhookEnv(t, rc)
	if w := e.submitWithWebhook(rc.URL + "/hooks"); w.Code != http.StatusAccepted {
		t.Fatalf("submit: %d %s", w.Code, w.Body)
	}
	if posts := rc.received(t, 1); len(posts) != 1 {
		t.Errorf("%d attempts after a 410, want 1", len(posts))
	}
}

// lostPutAnswers is a BlobReader whose result Puts store the result but
// answer ErrUnavailable, and whose Deletes fail, while lose is set: a
// worker that stored a result and then lost its stores, as one that dies
// between storing and recording its result leaves it.
type lostPutAnswers struct {
	upscale.BlobReader
	lose atomic.Bool
}

func (b *lostPutAnswers) Put(ctx context.Context, key string, data []byte, contentType string, expires time.Time) (string, error) {
	url, err := b.BlobReader.Put(ctx, key, data, contentType, expires)
	if b.lose.Load() && !strings.HasSuffix(key, ".source") {
		return "", fmt.Errorf("%w: the answer was lost", upscale.ErrUnavailable)
	}
	return url, err
}

func (b *lostPutAnswers) Delete(ctx context.Context, key string, expires time.Time) error {
	if b.lose.Load() {
		return fmt.Errorf("%w: the store is down", upscale.ErrUnavailable)
	}
	return b.BlobReader.Delete(ctx, key, expires)
}

// TestJobLeavesNoOrphanResult: a result stored by a run that could
// neither record it nor delete it is deleted by the next run, which finds
// its key recorded before it was stored: one result stays, the one
// delivered.
func TestJobLeavesNoOrphanResult(t *testing.T) {
	var blobs *lostPutAnswers
	var images atomic.Int32
	e := newEnv(t, func(c *upscale.Config) {
		blobs = &lostPutAnswers{BlobReader: c.Blobs.(upscale.BlobReader)}
		blobs.lose.Store(true)
		c.Blobs, c.Upscaler = blobs, countingUpscaler{n: &images}
	})
	location, _ := e.submit(keyFree, body(e.url("/small.png")))
	for deadline := time.Now().Add(10 * time.Second); images.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	for deadline := time.Now().Add(10 * time.Second); e.job(location, keyFree).Status != upscale.JobQueued; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first run did not end")
		}
	}
	blobs.lose.Store(false) // the run after it
	j := e.waitJob(location, keyFree)
	if j.Status != upscale.JobSucceeded || images.Load() != 2 || e.blobs.Len() != 1 || e.balance("free").Free != 2 {
		t.Errorf("job %s, %d images made, %d items stored, %d free left; want succeeded, 2, 1 (the delivered result) and 2",
			j.Status, images.Load(), e.blobs.Len(), e.balance("free").Free)
	}
}

// TestJobsTakeTurns: one account's many jobs do not keep another's from
// its turn: the other's first job starts as soon as a worker is free,
// before the many's beyond their share. A queued job says where it
// stands, and a succeeded one how it was made.
func TestJobsTakeTurns(t *testing.T) {
	u := upscaletest.GatedUpscaler{Entered: make(chan struct{}, 10), Gate: make(chan struct{})}
	e := newEnv(t, func(c *upscale.Config) {
		c.Upscaler = u
		c.JobWorkers, c.JobShare = 1, 1
	})
	e.putAccount(upscale.Account{ID: "free", Plan: upscale.Plan{Name: "roomy", MonthlyImages: 10, MaxFileBytes: 1 << 20}})
	for i := range 4 {
		_, job := e.submit(keyFree, body(e.url("/small.png")))
		if i == 0 {
			<-u.Entered // the first runs
		} else if pos, ok := job["position"].(float64); !ok || int(pos) != i-1 {
			t.Errorf("the free account's job %d queued at position %v, want %d", i, job["position"], i-1)
		}
	}
	theirs, job := e.submit(keyPro, body(e.url("/small.png")))
	if pos, ok := job["position"].(float64); !ok || pos != 0 {
		t.Errorf("the other account's first job queued at position %v, want 0: next", job["position"])
	}
	u.Gate <- struct{}{} // the first job ends
	<-u.Entered
	if j := e.job(theirs, keyPro); j.Status != upscale.JobRunning {
		t.Errorf("once a worker was free, the other account's job is %s, want running before the free account's next", j.Status)
	}
	close(u.Gate)
	if j := e.waitJob(theirs, keyPro); j.Status != upscale.JobSucceeded || j.Engine != "repeat;scale=2" {
		t.Errorf("the other account's job: %s, engine %q; want succeeded, as the test engine says", j.Status, j.Engine)
	}
	w := e.sendJob("GET", theirs, keyPro, "", "")
	if got := w.Header().Get("Upscale-Engine"); got != "repeat;scale=2" {
		t.Errorf("GET of a succeeded job: Upscale-Engine %q, want the engine's", got)
	}
}

// workerCatcher is a JobQueue whose Work runs nothing but keeps the
// JobWorker, for a test to call as a queue does for a job its dead
// worker left.
type workerCatcher struct {
	*upscale.MemoryJobQueue
	worker upscale.JobWorker
}

func (q *workerCatcher) Work(ctx context.Context, concurrency int, worker upscale.JobWorker) (func(context.Context) error, error) {
	q.worker = worker
	return func(context.Context) error { return nil }, nil
}

// TestJobSettledForADeadWorker: the settlement a queue asks of a job its
// dead worker left does no work: a canceled job's unit goes back, its
// source is deleted and its canceled webhook sent; a job given up fails
// with upstream_error, its unit back. Asked twice, it counts the job once.
func TestJobSettledForADeadWorker(t *testing.T) {
	for _, tc := range []struct {
		cause  error
		status upscale.JobStatus
		event  string
	}{{upscale.ErrJobCanceled, upscale.JobCanceled, "upscale.job.canceled"}, {upscale.ErrJobGivenUp, upscale.JobFailed, "upscale.job.failed"}} {
		t.Run(string(tc.status), func(t *testing.T) {
			rc := newReceiver(t, nil)
			var queue *workerCatcher
			var images atomic.Int32
			metrics := newJobMetrics()
			e, _ := webhookEnv(t, rc, func(c *upscale.Config) {
				queue = &workerCatcher{MemoryJobQueue: upscale.NewMemoryJobQueue(upscale.MemoryJobQueueOptions{Now: c.Now})}
				c.Jobs, c.Upscaler, c.Metrics = queue, countingUpscaler{n: &images}, metrics
			})
			w := e.submitWithWebhook(rc.URL + "/hooks")
			var submitted upscale.Job
			if err := json.Unmarshal(w.Body.Bytes(), &submitted); err != nil || w.Code != http.StatusAccepted {
				t.Fatalf("submit: %d %s", w.Code, w.Body)
			}
			job, err := queue.Get(context.Background(), "free", submitted.ID)
			if err != nil {
				t.Fatal(err)
			}
			var outcome upscale.JobOutcome
			for range 2 {
				outcome = queue.worker.Settle(context.Background(), job, tc.cause)
			}
			if images.Load() != 0 || outcome.Result != nil || outcome.Retry || (tc.status == upscale.JobFailed) != (outcome.Problem != nil) {
				t.Errorf("outcome %+v after %d images; want no work, a problem for a job given up", outcome, images.Load())
			}
			if p := outcome.Problem; p != nil && (p.Status != http.StatusBadGateway || p.Code != "upstream_error") {
				t.Errorf("a job given up: problem %+v, want 502 upstream_error", p)
			}
			if b := e.balance("free"); b.Free != 3 || e.blobs.Len() != 0 {
				t.Errorf("settled: %d free images, %d items stored; want 3 and none", b.Free, e.blobs.Len())
			}
			if posts := rc.received(t, 1); len(posts) != 1 || !strings.Contains(string(posts[0].body), `"`+tc.event+`"`) {
				t.Errorf("%d webhooks, want one %s", len(posts), tc.event)
			}
			if n := metrics.done(tc.status); n != 1 {
				t.Errorf("the job counted %d times, want once", n)
			}
		})
	}
}

// deadlineQueue is a MemoryJobQueue whose runs have a deadline, as
// River's do (RunTimeout).
type deadlineQueue struct {
	*upscale.MemoryJobQueue
	runTimeout time.Duration
	runs       atomic.Int32
}

func (q *deadlineQueue) Work(ctx context.Context, concurrency int, worker upscale.JobWorker) (func(context.Context) error, error) {
	run := worker.Run
	worker.Run = func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
		q.runs.Add(1)
		ctx, cancel := context.WithTimeout(ctx, q.runTimeout)
		defer cancel()
		return run(ctx, j)
	}
	return q.MemoryJobQueue.Work(ctx, concurrency, worker)
}

// TestJobGivesUpItsTurnInTime: a job's run that waits for the engine
// until the rest of its own deadline would not cover an enlargement asks
// to run again later: it is not failed, and it succeeds once the engine
// is free.
func TestJobGivesUpItsTurnInTime(t *testing.T) {
	var queue *deadlineQueue
	e := newEnv(t, func(c *upscale.Config) {
		c.Upscaler = slowUpscaler{took: 1500 * time.Millisecond} // it keeps its slot past a request's deadline
		c.EngineTimeout, c.SettleTimeout = 1600*time.Millisecond, 50*time.Millisecond
		c.Capacity.EngineConcurrency = 1
		queue = &deadlineQueue{MemoryJobQueue: upscale.NewMemoryJobQueue(upscale.MemoryJobQueueOptions{Now: c.Now}), runTimeout: 1800 * time.Millisecond}
		c.Jobs = queue
	})
	request := make(chan *httptest.ResponseRecorder, 1)
	go func() { request <- e.post(keyPro, body(e.url("/small.png"))) }()
	for e.handler.Load().InEngine == 0 { // the request holds the engine for 1.5 s
		time.Sleep(time.Millisecond)
	}
	location, _ := e.submit(keyFree, body(e.url("/small.png")))
	if j := e.waitJob(location, keyFree); j.Status != upscale.JobSucceeded || queue.runs.Load() < 2 {
		t.Errorf("a job whose first run could not get the engine in time: %s %+v after %d runs; want succeeded on a later run",
			j.Status, j.Problem, queue.runs.Load())
	}
	<-request
}

// TestJobEstimatedStart: a queued job says when it may start once the
// server has timed an image and a worker runs: its turn among them, at
// the measured pace.
func TestJobEstimatedStart(t *testing.T) {
	u := upscaletest.GatedUpscaler{Entered: make(chan struct{}, 3), Gate: make(chan struct{})}
	e := newEnv(t, func(c *upscale.Config) { c.Upscaler, c.JobWorkers = u, 1 })
	e.putAccount(upscale.Account{ID: "free", Plan: upscale.Plan{Name: "roomy", MonthlyImages: 10, MaxFileBytes: 1 << 20}})
	timed := make(chan *httptest.ResponseRecorder, 1)
	go func() { timed <- e.post(keyPro, body(e.url("/small.png"))) }()
	<-u.Entered
	u.Gate <- struct{}{}
	checkOK(t, <-timed, upscale.PoolFree)
	e.submit(keyFree, body(e.url("/small.png")))
	<-u.Entered // the first job runs
	queued, _ := e.submit(keyFree, body(e.url("/small.png")))
	time.Sleep(1100 * time.Millisecond) // past the queue's count of a second ago
	j := e.job(queued, keyFree)
	if j.Position == nil || *j.Position != 0 || j.EstimatedStart.Before(e.clock.Now().Truncate(time.Second)) {
		t.Errorf("a job queued behind a running one: position %v, estimatedStart %v; want 0 and a time from now on", j.Position, j.EstimatedStart)
	}
	close(u.Gate)
	if j := e.waitJob(queued, keyFree); j.Position != nil || !j.EstimatedStart.IsZero() {
		t.Errorf("an ended job: position %v, estimatedStart %v; want neither", j.Position, j.EstimatedStart)
	}
}

// TestCancelSettledOnceTheLedgerAnswers: a job canceled while it waits,
// whose unit the ledger could not give back then, is settled by its
// queue's workers once the ledger answers: its unit back, its source
// deleted, counted once.
func TestCancelSettledOnceTheLedgerAnswers(t *testing.T) {
	metrics := newJobMetrics()
	e, _, ledger, _ := newFlakyEnv(t, func(c *upscale.Config) { c.Metrics, c.SettleTimeout = metrics, 50*time.Millisecond })
	if err := e.handler.StopJobs(context.Background()); err != nil {
		t.Fatal(err)
	}
	location, _ := e.submit(keyFree, body(e.url("/small.png")))
	ledger.releaseFailures.Store(1 << 30)
	if w := e.sendJob("DELETE", location, keyFree, "", ""); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"status":"canceled"`) {
		t.Fatalf("DELETE: %d %s, want canceled", w.Code, w.Body)
	}
	if b := e.balance("free"); b.Free != 2 {
		t.Fatalf("%d free images while the ledger is down, want 2: the unit still held", b.Free)
	}
	ledger.releaseFailures.Store(0)
	if err := e.handler.StartJobs(context.Background()); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); e.balance("free").Free != 3 || e.blobs.Len() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d free images, %d items stored; want 3 and none", e.balance("free").Free, e.blobs.Len())
		}
	}
	if n := metrics.done(upscale.JobCanceled); n != 1 {
		t.Errorf("the canceled job counted %d times, want once", n)
	}
}

// TestCancelAfterAnUnsettledCharge: a job canceled while its charge's
// outcome is unknown (the ledger committed, its answer lost) keeps its
// result: the run asks to Retry, and the job's settlement delivers the
// result, charged once, rather than deleting what was paid for.
func TestCancelAfterAnUnsettledCharge(t *testing.T) {
	var queue *upscale.MemoryJobQueue
	var jobID atomic.Value
	e, _, ledger, _ := newFlakyEnv(t, func(c *upscale.Config) {
		queue = upscale.NewMemoryJobQueue(upscale.MemoryJobQueueOptions{Now: c.Now})
		c.Jobs, c.SettleTimeout = queue, time.Millisecond
	})
	ledger.commitFailures.Store(1)
	ledger.commitLostAnswer = true
	ledger.onCommitFailure = func() {
		if _, err := queue.Cancel(context.Background(), "free", jobID.Load().(string)); err != nil {
			t.Error(err)
		}
	}
	if err := e.handler.StopJobs(context.Background()); err != nil {
		t.Fatal(err)
	}
	location, job := e.submit(keyFree, body(e.url("/small.png")))
	jobID.Store(job["id"].(string))
	if err := e.handler.StartJobs(context.Background()); err != nil {
		t.Fatal(err)
	}
	var got upscale.Job
	for deadline := time.Now().Add(10 * time.Second); !got.Status.Done() || got.Status == upscale.JobCanceled; time.Sleep(5 * time.Millisecond) {
		if got = e.job(location, keyFree); time.Now().After(deadline) {
			break
		}
	}
	if got.Status != upscale.JobSucceeded || got.Result == nil {
		t.Fatalf("job %+v, want succeeded with the result it was charged for", got)
	}
	if b := e.balance("free"); b.Free != 2 || e.blobs.Len() != 1 {
		t.Errorf("%d free images, %d items stored; want 2 and the result", b.Free, e.blobs.Len())
	}
}

// deadlineUpscaler records how long each Upscale had before its deadline.
type deadlineUpscaler struct {
	upscaletest.PixelUpscaler
	left chan time.Duration
}

func (u deadlineUpscaler) Upscale(ctx context.Context, src []byte, opts upscale.Params) (upscale.Image, error) {
	deadline, _ := ctx.Deadline()
	u.left <- time.Until(deadline)
	return u.PixelUpscaler.Upscale(ctx, src, opts)
}

// TestJobEngineHasTheRunsTime: a request's engine has EngineTimeout; a
// job's has what its run has left but SettleTimeout, so that an engine
// deciding by its deadline (learned or classical passes) makes a job's
// result learned where a request's would not be.
func TestJobEngineHasTheRunsTime(t *testing.T) {
	u := deadlineUpscaler{left: make(chan time.Duration, 2)}
	e := newEnv(t, func(c *upscale.Config) {
		c.Upscaler, c.EngineTimeout, c.SettleTimeout = u, 2*time.Second, 15*time.Second
		c.Jobs = upscale.NewMemoryJobQueue(upscale.MemoryJobQueueOptions{Now: c.Now, RunTimeout: 5 * time.Minute})
	})
	checkOK(t, e.post(keyFree, body(e.url("/small.png"))), upscale.PoolFree)
	if left := <-u.left; left > 2*time.Second {
		t.Errorf("a request's engine had %v, want EngineTimeout's 2s at most", left)
	}
	location, _ := e.submit(keyFree, body(e.url("/small.png")))
	if left := <-u.left; left < 4*time.Minute || left > 5*time.Minute-15*time.Second {
		t.Errorf("a job's engine had %v, want its run's 5 minutes but the 15 s to settle", left)
	}
	if j := e.waitJob(location, keyFree); j.Status != upscale.JobSucceeded {
		t.Errorf("job %s, want succeeded", j.Status)
	}
	// A run shorter than SettleTimeout gives its engine all it has, not a
	// deadline already past.
	short := deadlineUpscaler{left: make(chan time.Duration, 1)}
	e = newEnv(t, func(c *upscale.Config) {
		c.Upscaler, c.SettleTimeout = short, 15*time.Second
		c.Jobs = upscale.NewMemoryJobQueue(upscale.MemoryJobQueueOptions{Now: c.Now, RunTimeout: 10 * time.Second})
	})
	location, _ = e.submit(keyFree, body(e.url("/small.png")))
	if left := <-short.left; left < 5*time.Second {
		t.Errorf("a job in a 10 s run had %v for its engine, want about 10 s", left)
	}
	if j := e.waitJob(location, keyFree); j.Status != upscale.JobSucceeded {
		t.Errorf("the job in a short run: %s, want succeeded", j.Status)
	}
}

// TestMemoryJobQueueGivesUpOverruns: a run that overruns RunTimeout runs
// again, MaxJobAttempts times at most; then the job is given up, settled
// why ErrJobGivenUp, and failed.
func TestMemoryJobQueueGivesUpOverruns(t *testing.T) {
	q := upscale.NewMemoryJobQueue(upscale.MemoryJobQueueOptions{RunTimeout: 20 * time.Millisecond})
	now := time.Now()
	job, err := q.Submit(context.Background(), upscale.Job{AccountID: "a", Source: "s", Reservation: "r", Created: now, Expires: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	var overruns atomic.Int32
	settled := make(chan error, 2)
	stop, err := q.Work(context.Background(), 1, upscale.JobWorker{
		Run: func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
			<-ctx.Done() // never ends in time
			overruns.Add(1)
			return upscale.JobOutcome{}
		},
		Settle: func(ctx context.Context, j upscale.Job, why error) upscale.JobOutcome {
			settled <- why
			return upscale.JobOutcome{Problem: upscale.GivenUpProblem()}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop(context.Background())
	select {
	case cause := <-settled:
		if !errors.Is(cause, upscale.ErrJobGivenUp) {
			t.Errorf("settled why %v, want ErrJobGivenUp", cause)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the job was not given up")
	}
	got, err := q.Get(context.Background(), "a", job.ID)
	if err != nil || got.Status != upscale.JobFailed || got.Problem == nil || got.Problem.Code != "upstream_error" || overruns.Load() != upscale.MaxJobAttempts {
		t.Errorf("%+v, %v after %d overruns; want failed, upstream_error, after %d", got, err, overruns.Load(), upscale.MaxJobAttempts)
	}
}

// timedUpscaler is a deadlineUpscaler that tells how long it takes.
type timedUpscaler struct {
	deadlineUpscaler
	expected time.Duration
	known    bool
}

func (u timedUpscaler) EstimateDuration([]byte, upscale.Params) (time.Duration, bool, error) {
	return u.expected, u.known, nil
}

// TestJobEngineTimeFollowsItsWork: an Upscaler that tells how long a job
// takes has three times that for it, at least EngineTimeout, within its
// run's time less SettleTimeout; one that cannot tell yet has the run's.
func TestJobEngineTimeFollowsItsWork(t *testing.T) {
	for _, tc := range []struct {
		name     string
		expected time.Duration
		known    bool
		least    time.Duration
		most     time.Duration
	}{
		{"ThreeTimesItsWork", time.Minute, true, 2*time.Minute + 50*time.Second, 3 * time.Minute},
		{"AtLeastEngineTimeout", time.Second, true, 9 * time.Second, 10 * time.Second},
		{"WithinItsRun", time.Hour, true, 4 * time.Minute, 5*time.Minute - 15*time.Second},
		{"NotKnownYet", 0, false, 4 * time.Minute, 5*time.Minute - 15*time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := timedUpscaler{deadlineUpscaler{left: make(chan time.Duration, 1)}, tc.expected, tc.known}
			e := newEnv(t, func(c *upscale.Config) {
				c.Upscaler, c.EngineTimeout, c.SettleTimeout = u, 10*time.Second, 15*time.Second
				c.Jobs = upscale.NewMemoryJobQueue(upscale.MemoryJobQueueOptions{Now: c.Now, RunTimeout: 5 * time.Minute})
			})
			location, _ := e.submit(keyFree, body(e.url("/small.png")))
			if left := <-u.left; left < tc.least || left > tc.most {
				t.Errorf("expected %v (known: %v): the job's engine had %v, want %v to %v", tc.expected, tc.known, left, tc.least, tc.most)
			}
			if j := e.waitJob(location, keyFree); j.Status != upscale.JobSucceeded {
				t.Errorf("job %s, want succeeded", j.Status)
			}
		})
	}
}
