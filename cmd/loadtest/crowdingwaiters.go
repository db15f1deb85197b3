package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

const (
	waitersMaxConnections = 16
	waiterCount           = 16
	otherCalls            = 10
)

// waiters: a standalone with -max-connections 16 whose jobs no process
// works (-job-workers -1), so a job stays queued. One account submits a
// job with an Idempotency-Key, then 16 replays of it ask to wait for its
// end (Prefer: respond-async, wait=60). Another account then makes 10
// synchronous requests, one after another (×2 of a 512² photo), and the
// slowest must take at most twice the slowest of the same 10 made before
// the waiters (+50 ms): one account's waiting replays may not hold every
// connection. Every caller here is one of many: each request comes on a
// connection of its own, closed after its answer, as the waiters' are and
// a new caller's would be. The job is canceled at the end, so its unit
// is given back.
func waiters(r *rig) (row, error) {
	// The default account share (half of the places): the rig's others
	// lift it, as their load comes from one account.
	before, srv, err := r.begin("-job-workers", "-1", "-max-connections", fmt.Sprint(waitersMaxConnections), "-account-share", "0")
	if err != nil {
		return row{}, err
	}
	defer srv.stop()
	caller := &http.Client{Timeout: 3 * time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}
	alone := r.callEach(caller, otherKey, srv.base, otherCalls)

	body := r.body("/photo-512.jpg", 2, "")
	once := func(req *http.Request) { req.Header.Set("Idempotency-Key", "loadtest-waiters") }
	first := submitWith(caller, key, srv.base, body, once)
	if first.id == "" {
		return row{}, fmt.Errorf("the waiters' submission: %d %s %v", first.status, first.code, first.err)
	}
	idle := srv.openFiles()
	waited := make(chan []request, waiterCount)
	for range waiterCount {
		go func() {
			tries, _ := submitPatiently(caller, key, srv.base, body, func(req *http.Request) {
				once(req)
				req.Header.Set("Prefer", "respond-async, wait=60")
			})
			waited <- tries
		}()
		// One after another, as callers come, rather than a burst that
		// the admission queue would refuse.
		time.Sleep(100 * time.Millisecond)
	}
	// Until the server holds the waiters' connections and they wait.
	for deadline := time.Now().Add(10 * time.Second); srv.openFiles() < idle+waiterCount && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(time.Second)
	beside := r.callEach(caller, otherKey, srv.base, otherCalls)
	// The job's end, its cancellation, answers the waiters at once.
	canceled, err := r.cancel(caller, key, srv.base, first.id)
	if err != nil {
		return row{}, err
	}
	var replays []request
	for range waiterCount {
		replays = append(replays, <-waited...)
	}
	if err := srv.stop(); err != nil {
		return row{}, err
	}
	aloneRow, replayRow := newRow(alone), newRow(replays)
	res := newRow(beside)
	res.successes = aloneRow.successes + res.successes
	var replayTook time.Duration
	for _, q := range replays {
		replayTook = max(replayTook, q.took)
	}
	target := 2*aloneRow.successP99 + noise
	res.notes = fmt.Sprintf("-max-connections %d; %d replays waiting on a queued job: %s, the longest %v; the other account's %d requests one after another: alone %s, slowest %v; beside the waiters %s, slowest %v (target %v); the job then %s",
		waitersMaxConnections, waiterCount, replayRow.statuses, replayTook.Round(100*time.Millisecond), otherCalls, aloneRow.statuses, aloneRow.successP99.Round(time.Millisecond),
		res.statuses, res.successP99.Round(time.Millisecond), target.Round(time.Millisecond), canceled)
	res.want(res.count[http.StatusOK] == otherCalls, "every request of the other account served")
	res.want(res.successP99 <= target, "the other account's slowest within 2× alone (+%v)", noise)
	return res, res.checkLedger(r, before)
}

// callEach makes n synchronous requests with apiKey through c, one after
// another, each ×2 of a 512² photo.
func (r *rig) callEach(c *http.Client, apiKey, base string, n int) []request {
	var reqs []request
	for range n {
		reqs = append(reqs, postWith(c, apiKey, base, r.body("/photo-512.jpg", 2, ""), nil, nil))
	}
	return reqs
}

// cancel cancels apiKey's job id and returns its status then.
func (r *rig) cancel(c *http.Client, apiKey, base, id string) (string, error) {
	req, _ := http.NewRequest(http.MethodDelete, base+"/api/v1/upscale/jobs/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+apiKey)
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var j job
	if err := json.NewDecoder(resp.Body).Decode(&j); err != nil || resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("DELETE job %s: %s, %v", id, resp.Status, err)
	}
	return j.Status, nil
}
