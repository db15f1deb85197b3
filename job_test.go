package upscale_test

import (
	"encoding/json"
	"image"
	_ "image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
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
