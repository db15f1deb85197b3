package upscale_test

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/upscaletest"
)

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
	e.clock.Advance(time.Second) // past the queue's count of a second ago
	j := e.job(queued, keyFree)
	if j.Position == nil || *j.Position != 0 || j.EstimatedStart.Before(e.clock.Now().Truncate(time.Second)) {
		t.Errorf("a job queued behind a running one: position %v, estimatedStart %v; want 0 and a time from now on", j.Position, j.EstimatedStart)
	}
	close(u.Gate)
	if j := e.waitJob(queued, keyFree); j.Position != nil || !j.EstimatedStart.IsZero() {
		t.Errorf("an ended job: position %v, estimatedStart %v; want neither", j.Position, j.EstimatedStart)
	}
}
