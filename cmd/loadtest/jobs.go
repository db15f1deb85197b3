package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"
)

// jobMix is the jobs scenario's sources, ×2 each on the learned engine:
// mostly small images, some of the sizes photos come in.
var jobMix = []struct {
	path  string
	count int
}{{"/photo-128.jpg", 100}, {"/photo-256.jpg", 60}, {"/photo-512.jpg", 40}}

// learned is how every process of the jobs scenario runs the engine: on
// oneDNN in INT8, named, so that no process measures the runtimes at
// start (a worker started again after the kill would spend seconds of
// the scenario on it) and the figures stay those of one engine.
var learned = []string{"-engine", "onnx", "-onnx-runtime", "onednn", "-onnx-precision", "int8", "-engine-timeout", "30s"}

const submitP99Goal = 100 * time.Millisecond

// jobs: the job form scaled out. First the engine's capacity: a fifth of
// the mix through the synchronous API of one standalone on the whole
// machine. Then an API process that runs no jobs and two workers, each
// pinned to one CPU; the whole mix is submitted, ten a second, and one
// worker is killed (SIGKILL) halfway and started again. Every job must
// succeed and be charged once; submissions must be answered quickly
// while the workers work, and the workers' throughput, until the last job
// not cut off by the kill, must be near the engine's capacity. The jobs
// the kill cut off run again once the worker is back: it hands back its
// own runs as it starts, under its process ID.
func jobs(r *rig) (row, error) {
	before, srv, err := r.begin(learned...)
	if err != nil {
		return row{}, err
	}
	var direct []request
	start := time.Now()
	for _, m := range jobMix {
		direct = append(direct, r.postEach(srv.base, m.path, m.count/5, 3)...)
	}
	capacity := float64(len(direct)) / time.Since(start).Seconds()
	if err := srv.stop(); err != nil {
		return row{}, err
	}

	api, err := r.start(append(learned, "-job-workers", "-1")...)
	if err != nil {
		return row{}, err
	}
	defer api.stop()
	var workers [2]*server
	defer func() {
		for _, w := range workers {
			if w != nil {
				w.stop()
			}
		}
	}()
	for cpu := range workers {
		if workers[cpu], err = r.startWorker(cpu, learned...); err != nil {
			return row{}, err
		}
	}
	var paths []string
	for _, m := range jobMix {
		for range m.count {
			paths = append(paths, m.path)
		}
	}
	// Interleaved, so that every stretch of the queue holds every size.
	var mixed []string
	for i := range paths {
		mixed = append(mixed, paths[(i*37)%len(paths)])
	}
	submits := make([]submission, len(mixed))
	var wg sync.WaitGroup
	firstSubmit := time.Now()
	// The kill and the restart happen beside the submissions, which go on
	// at their pace.
	killed := firstSubmit.Add(time.Duration(len(mixed)/2) * 100 * time.Millisecond)
	restarted := make(chan error, 1)
	time.AfterFunc(time.Until(killed), func() {
		workers[0].cmd.Process.Signal(syscall.SIGKILL)
		<-workers[0].exited
		w, err := r.startWorker(0, learned...)
		workers[0] = w
		restarted <- err
	})
	for i, path := range mixed {
		wg.Go(func() { submits[i] = r.submit(api.base, path) })
		time.Sleep(time.Until(firstSubmit.Add(time.Duration(i+1) * 100 * time.Millisecond)))
	}
	wg.Wait()
	if err := <-restarted; err != nil {
		return row{}, err
	}

	var waits []request
	for _, s := range submits {
		waits = append(waits, s.request)
	}
	res := newRow(waits)
	accepted := durations(waits, http.StatusAccepted)
	submitP50, submitP99 := percentile(accepted, 0.5), percentile(accepted, 0.99)
	// Wait for every job to end, then read each as its caller would.
	ended, err := r.waitForJobs(firstSubmit, len(mixed), 15*time.Minute)
	if err != nil {
		return row{}, err
	}
	attempts, err := r.jobAttempts()
	if err != nil {
		return row{}, err
	}
	succeeded, rescued, uncut := 0, 0, 0
	var lastUncut time.Time
	var rescueDelay time.Duration
	for _, s := range submits {
		if s.id == "" {
			continue
		}
		j, err := r.job(key, api.base, s.id)
		if err != nil {
			return row{}, err
		}
		if j.Status == "succeeded" {
			succeeded++
		}
		riverID, _, _ := strings.Cut(strings.TrimPrefix(s.id, "job_"), "_")
		if attempts["job_"+riverID+"_"] > 1 { // cut off by the kill, run again once rescued
			rescued++
			rescueDelay = max(rescueDelay, j.Finished.Sub(killed))
			continue
		}
		uncut++
		if j.Finished.After(lastUncut) {
			lastUncut = j.Finished
		}
	}
	window := lastUncut.Sub(firstSubmit).Seconds()
	throughput := float64(uncut) / window
	// How the worker that was not killed spent the window: in the engine,
	// in its jobs' runs (engine, the source's read, the result's store,
	// the charge), or waiting for River to hand it the next job.
	engineSeconds, err := workers[1].metric(`upscale_step_duration_seconds_sum{step="engine"}`)
	if err != nil {
		return row{}, err
	}
	runSeconds, err := workers[1].metric(`upscale_job_duration_seconds_sum{phase="run",status="succeeded"}`)
	if err != nil {
		return row{}, err
	}
	res.successes = len(direct) + succeeded
	res.memory = fmt.Sprintf("worker peak %d MiB", workers[1].memory("VmHWM")/mib)
	res.notes = fmt.Sprintf("%d submissions at 10/s, 202 p50 %v, p99 %v; %d jobs ended (%d succeeded); engine capacity %.2f images/s (%d synchronous), workers %.2f jobs/s until the last job the kill did not cut off (%.0f%%), the worker not killed in its engine %.0f%% and in its jobs' runs %.0f%% of that time; %d run twice (cut off by the kill), done %v after it",
		len(submits), submitP50.Round(time.Millisecond), submitP99.Round(time.Millisecond), ended, succeeded, capacity, len(direct), throughput, 100*throughput/capacity,
		100*engineSeconds/window, 100*runSeconds/window, rescued, rescueDelay.Round(time.Second))
	res.want(res.count[http.StatusAccepted] == len(mixed), "every submission accepted")
	res.want(submitP99 < submitP99Goal, "submissions p99 under %v", submitP99Goal)
	res.want(succeeded == len(mixed), "every job succeeded")
	res.want(throughput >= 0.95*capacity, "throughput within 5%% of the engine's capacity")
	return res, res.checkLedger(r, before)
}

// postEach posts path n times for ×2 with the rig's key, from clients
// at once, and returns the outcomes.
func (r *rig) postEach(base, path string, n, clients int) []request {
	var mu sync.Mutex
	var reqs []request
	var wg sync.WaitGroup
	next := make(chan struct{}, n)
	for range n {
		next <- struct{}{}
	}
	close(next)
	for range clients {
		wg.Go(func() {
			for range next {
				res := r.post(key, base, path, 2)
				mu.Lock()
				reqs = append(reqs, res)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return reqs
}

// submission is a job-form POST's outcome and the job it created.
type submission struct {
	request
	id string
}

// submit asks base for ×2 of the origin's path as a job.
func (r *rig) submit(base, path string) submission {
	return submitWith(client, key, base, r.body(path, 2, ""), nil)
}

// submitWith submits body as a job with apiKey through c, the request
// changed by prepare when not nil.
func submitWith(c *http.Client, apiKey, base, body string, prepare func(*http.Request)) submission {
	var created struct {
		ID string `json:"id"`
	}
	res := postWith(c, apiKey, base, body, func(req *http.Request) {
		req.Header.Set("Prefer", "respond-async")
		if prepare != nil {
			prepare(req)
		}
	}, &created)
	return submission{request: res, id: created.ID}
}

// job is the job resource as the loadtest reads it.
type job struct {
	Status   string    `json:"status"`
	Started  time.Time `json:"startedAt"`
	Finished time.Time `json:"finishedAt"`
}

// job reads apiKey's job id.
func (r *rig) job(apiKey, base, id string) (job, error) {
	req, _ := http.NewRequest(http.MethodGet, base+"/api/v1/upscale/jobs/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+apiKey)
	resp, err := client.Do(req)
	if err != nil {
		return job{}, err
	}
	defer resp.Body.Close()
	var j job
	if err := json.NewDecoder(resp.Body).Decode(&j); err != nil || resp.StatusCode != http.StatusOK {
		return job{}, fmt.Errorf("GET job %s: %s, %v", id, resp.Status, err)
	}
	return j, nil
}

// waitForJobs waits until n jobs of the queue created since then have
// ended, as River's table says, and returns how many have: the table
// keeps the jobs of the scenarios before.
func (r *rig) waitForJobs(since time.Time, n int, limit time.Duration) (int, error) {
	var ended int
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(time.Second) {
		if err := r.db.QueryRow(`SELECT count(*) FROM river_job WHERE kind = 'upscale' AND finalized_at IS NOT NULL AND created_at >= $1`, since).Scan(&ended); err != nil {
			return 0, err
		}
		if ended >= n {
			break
		}
	}
	return ended, nil
}

// jobAttempts reads from River's table how often each job was taken, by
// the API's job ID (riverqueue's "job_<River's ID>_<tag>").
func (r *rig) jobAttempts() (map[string]int, error) {
	rows, err := r.db.Query(`SELECT id, attempt FROM river_job WHERE kind = 'upscale'`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	attempts := map[string]int{}
	for rows.Next() {
		var id int64
		var attempt int
		if err := rows.Scan(&id, &attempt); err != nil {
			return nil, err
		}
		attempts[fmt.Sprintf("job_%d_", id)] = attempt
	}
	return attempts, rows.Err()
}

// durations returns the times of the requests answered with status.
func durations(reqs []request, status int) []time.Duration {
	var d []time.Duration
	for _, q := range reqs {
		if q.status == status {
			d = append(d, q.took)
		}
	}
	return d
}
