package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"sync"
	"time"
)

// The crowding scenarios: what one account's load costs another. In each,
// the normal account crowds the other one.

const (
	// fairJobsCount jobs of fairPath ×fairScale: about 0.3 s a run on the
	// classical engine, long enough to measure, short enough that the
	// queue drains in about a minute on two workers.
	fairJobsCount = 200
	fairPath      = "/photo-1024.jpg"
	fairScale     = 2
	// fair-jobs allows, besides one run and 10% of it, River's poll
	// interval (the standalone's 200 ms) for the queue to hand a freed
	// worker a job whose insert's notification it missed.
	fairPollAllowance = 200 * time.Millisecond

	// noise is what the machine's other work adds to a latency compared
	// with its baseline, as slow-key allows.
	noise = 50 * time.Millisecond
)

// fairJobs: one account submits 200 jobs from 4 clients at once, as fast
// as the API takes them; right after, another account submits one. The
// other account's job must start within one run (plus the allowance) of
// its submission, as it would in a queue that takes the accounts' jobs in
// turn; a queue in submission order starts it after the first account's
// backlog. One standalone runs the jobs on its own two workers (the
// engine's concurrency): the order is the queue's whatever process takes
// the jobs, and one process leaves both cores to the engine instead of
// an API process and two workers splitting them.
func fairJobs(r *rig) (row, error) {
	before, srv, err := r.begin()
	if err != nil {
		return row{}, err
	}
	defer srv.stop()
	since := time.Now()
	body := r.body(fairPath, fairScale, "")
	reqs, subs := r.submitEach(key, srv.base, body, fairJobsCount, 4)
	other := submitWith(client, otherKey, srv.base, body, nil)
	reqs = append(reqs, other.request)
	if other.id == "" {
		return row{}, fmt.Errorf("the other account's submission: %d %s %v", other.status, other.code, other.err)
	}
	ended, err := r.waitForJobs(since, len(subs)+1, 5*time.Minute)
	if err != nil {
		return row{}, err
	}
	j, err := r.job(otherKey, srv.base, other.id)
	if err != nil {
		return row{}, err
	}
	runs, meanRun, err := meanJobRun(srv)
	if err != nil {
		return row{}, err
	}
	var overtaken int // the first account's jobs that started while the other's waited
	err = r.db.QueryRow(`SELECT count(*) FROM river_job WHERE kind = 'upscale' AND args->>'accountId' = $1 AND attempted_at > $2 AND attempted_at < $3`,
		account, other.start, j.Started).Scan(&overtaken)
	if err != nil {
		return row{}, err
	}
	if err := srv.stop(); err != nil {
		return row{}, err
	}
	delay := j.Started.Sub(other.start)
	target := meanRun*11/10 + fairPollAllowance
	res := newRow(reqs)
	res.successes = runs
	res.notes = fmt.Sprintf("%d jobs of ×%d of %s from one account (4 clients), then one from another; %d ended, %d succeeded; mean run %v; the other account's job started %v after its submission (target %v), after %d of the first account's jobs started",
		len(subs), fairScale, fairPath, ended, runs, meanRun.Round(time.Millisecond), delay.Round(time.Millisecond), target.Round(time.Millisecond), overtaken)
	res.want(len(subs) == fairJobsCount, "every submission accepted")
	res.want(runs == len(subs)+1, "every job succeeded")
	res.want(!j.Started.IsZero() && delay <= target, "the other account's job starts within one run (+10%%, +%v)", fairPollAllowance)
	return res, res.checkLedger(r, before)
}

// meanJobRun reads from srv's metrics how many jobs it ran to success and
// their mean run.
func meanJobRun(srv *server) (int, time.Duration, error) {
	sum, err := srv.metric(`upscale_job_duration_seconds_sum{phase="run",status="succeeded"}`)
	if err != nil {
		return 0, 0, err
	}
	count, err := srv.metric(`upscale_job_duration_seconds_count{phase="run",status="succeeded"}`)
	if err != nil {
		return 0, 0, err
	}
	if count == 0 {
		return 0, 0, errors.New("no job succeeded")
	}
	return int(count), time.Duration(sum / count * float64(time.Second)), nil
}

// submitEach submits body as a job n times with apiKey, from clients at
// once, and returns every request and the jobs accepted.
func (r *rig) submitEach(apiKey, base, body string, n, clients int) ([]request, []submission) {
	var mu sync.Mutex
	var reqs []request
	var subs []submission
	next := make(chan struct{}, n)
	for range n {
		next <- struct{}{}
	}
	close(next)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for range next {
				tries, s := submitPatiently(client, apiKey, base, body, nil)
				mu.Lock()
				reqs = append(reqs, tries...)
				if s.id != "" {
					subs = append(subs, s)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return reqs, subs
}

// submitPatiently is submitWith, sent again after each refusal (503,
// 429) once its Retry-After has passed, as a client that reads the
// contract does. It returns every try and the last.
func submitPatiently(c *http.Client, apiKey, base, body string, prepare func(*http.Request)) ([]request, submission) {
	var tries []request
	for {
		s := submitWith(c, apiKey, base, body, prepare)
		tries = append(tries, s.request)
		if s.status != http.StatusServiceUnavailable && s.status != http.StatusTooManyRequests {
			return tries, s
		}
		time.Sleep(max(s.retryAfter, 100*time.Millisecond))
	}
}

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

const (
	deadWebhooks = 96
	// How long the other account's webhook is waited for, from its job's
	// end, before the scenario gives up on it.
	webhookPatience = 150 * time.Second
)

// deadWebhook: one account's 96 jobs name a webhook receiver that accepts
// the connection and never answers, so each delivery takes its whole
// timeout (10 s); another account's job, submitted right after, names a
// receiver that answers 200 at once. Its webhook must arrive, counted
// from its job's end (the event's timestamp), within twice the slowest
// of three such jobs with no dead receiver (+50 ms): one account's dead
// receiver may not hold every deliverer. The jobs are ×2 of a 128²
// photo, so that they end within seconds and the wait is the
// deliverers'. The dead webhooks stay queued for their retries after the
// scenario, refused at once once the receiver is gone.
func deadWebhook(r *rig) (row, error) {
	for _, id := range []string{account, otherAccount} {
		if err := r.rotateWebhookSecret(id); err != nil {
			return row{}, err
		}
	}
	dead, err := startDeadReceiver()
	if err != nil {
		return row{}, err
	}
	defer dead.close()
	live, err := startReceiver()
	if err != nil {
		return row{}, err
	}
	defer live.close()
	before, srv, err := r.begin()
	if err != nil {
		return row{}, err
	}
	defer srv.stop()
	since := time.Now()
	var reqs []request
	// delivery submits one job of the other account and returns how long
	// after its end its webhook arrived, if it did within webhookPatience.
	delivery := func() (time.Duration, bool, error) {
		s := submitWith(client, otherKey, srv.base, r.body("/photo-128.jpg", 2, live.url), nil)
		reqs = append(reqs, s.request)
		if s.id == "" {
			return 0, false, fmt.Errorf("the other account's submission: %d %s %v", s.status, s.code, s.err)
		}
		if err := r.awaitJob(otherKey, srv.base, s.id, 2*time.Minute); err != nil {
			return 0, false, err
		}
		took, arrived := live.await("msg_"+s.id, time.Now().Add(webhookPatience))
		return took, arrived, nil
	}
	var alone time.Duration
	for range 3 {
		took, arrived, err := delivery()
		if err != nil {
			return row{}, err
		}
		if !arrived {
			return row{}, fmt.Errorf("a webhook with no dead receiver did not arrive within %v", webhookPatience)
		}
		alone = max(alone, took)
	}
	crowding, subs := r.submitEach(key, srv.base, r.body("/photo-128.jpg", 2, dead.url), deadWebhooks, 4)
	reqs = append(reqs, crowding...)
	beside, arrived, err := delivery()
	if err != nil {
		return row{}, err
	}
	if _, err := r.waitForJobs(since, len(subs)+4, 2*time.Minute); err != nil {
		return row{}, err
	}
	runs, _, err := meanJobRun(srv)
	if err != nil {
		return row{}, err
	}
	peak := dead.close() // so that the server's stop need not wait out the attempts under way
	if err := srv.stop(); err != nil {
		return row{}, err
	}
	res := newRow(reqs)
	res.successes = runs
	target := 2*alone + noise
	besideText := fmt.Sprintf("not within %v", webhookPatience)
	if arrived {
		besideText = beside.Round(time.Millisecond).String()
	}
	res.notes = fmt.Sprintf("%d jobs of one account with a webhook to a receiver that never answers (at most %d of its connections open at once), then one of another account with a webhook answered at once: delivered %s after its job ended (target %v); with no dead receiver, the slowest of 3: %v; %d jobs succeeded",
		len(subs), peak, besideText, target.Round(time.Millisecond), alone.Round(time.Millisecond), runs)
	res.want(len(subs) == deadWebhooks, "every submission accepted")
	res.want(runs == len(subs)+4, "every job succeeded")
	res.want(arrived && beside <= target, "the other account's webhook within 2× its time alone (+%v)", noise)
	return res, res.checkLedger(r, before)
}

// rotateWebhookSecret gives accountID a webhook signing secret, which it
// needs before its first webhookUrl, with the standalone's admin command.
func (r *rig) rotateWebhookSecret(accountID string) error {
	out, err := exec.Command(r.bin, "webhook-secret", "rotate", "--account", accountID,
		"-data", filepath.Join(r.dir, "data"), "-database-url", r.dsn).CombinedOutput()
	if err != nil {
		return fmt.Errorf("webhook-secret rotate --account %s: %v\n%s", accountID, err, out)
	}
	return nil
}

// awaitJob polls apiKey's job id until it has ended, for at most limit.
func (r *rig) awaitJob(apiKey, base, id string, limit time.Duration) error {
	for deadline := time.Now().Add(limit); ; time.Sleep(20 * time.Millisecond) {
		j, err := r.job(apiKey, base, id)
		if err != nil || !j.Finished.IsZero() {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("job %s not ended after %v", id, limit)
		}
	}
}

// receiver takes webhooks, answers 200 at once, and notes how long after
// its job's end each arrived, by its webhook-id. The end is the event's
// timestamp, when the run ended and queued the webhook: River's
// finishedAt comes later, once it has recorded the run's outcome.
type receiver struct {
	url     string
	srv     *http.Server
	mu      sync.Mutex
	arrived map[string]time.Duration
}

func startReceiver() (*receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	rc := &receiver{url: "http://" + ln.Addr().String() + "/hook", arrived: map[string]time.Duration{}}
	rc.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		at := time.Now()
		var event struct {
			Timestamp time.Time `json:"timestamp"`
		}
		if err := json.NewDecoder(req.Body).Decode(&event); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rc.mu.Lock()
		rc.arrived[req.Header.Get("Webhook-Id")] = at.Sub(event.Timestamp)
		rc.mu.Unlock()
	})}
	go rc.srv.Serve(ln)
	return rc, nil
}

// await waits until the webhook id has arrived, or until deadline, and
// returns how long after its job's end it arrived.
func (rc *receiver) await(id string, deadline time.Time) (time.Duration, bool) {
	for ; time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		rc.mu.Lock()
		took, ok := rc.arrived[id]
		rc.mu.Unlock()
		if ok {
			return took, true
		}
	}
	return 0, false
}

func (rc *receiver) close() { rc.srv.Close() }

// deadReceiver accepts connections, reads what comes, and never answers.
type deadReceiver struct {
	url        string
	ln         net.Listener
	mu         sync.Mutex
	conns      []net.Conn
	open, peak int
}

func startDeadReceiver() (*deadReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	d := &deadReceiver{url: "http://" + ln.Addr().String() + "/hook", ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			d.mu.Lock()
			d.conns = append(d.conns, c)
			d.open++
			d.peak = max(d.peak, d.open)
			d.mu.Unlock()
			go func() {
				io.Copy(io.Discard, c) // until the sender gives up
				d.mu.Lock()
				d.open--
				d.mu.Unlock()
			}()
		}
	}()
	return d, nil
}

// close closes the listener and every connection, and returns the most
// connections that were open at once.
func (d *deadReceiver) close() int {
	d.ln.Close()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		c.Close()
	}
	return d.peak
}

const (
	// mixedJobs jobs of fairPath ×fairScale in each half of the mixed
	// scenario, beside requests of mixedPath ×2 offered every
	// mixedInterval.
	mixedJobs     = 100
	mixedPath     = "/photo-256.jpg"
	mixedInterval = 100 * time.Millisecond
)

// mixed: jobs and synchronous requests on one standalone (the classical
// engine's two slots: one for job runs, one kept for requests). First
// mixedJobs jobs alone, their throughput measured from the first run's
// start to the last one's end; then as many again with requests offered
// beside them, ten a second. Every request must be run or refused at once
// (503 with Retry-After), never answered 504 because of the jobs, and the
// jobs' throughput must stay within 10% of what it was alone. The row's
// latencies are the requests'.
func mixed(r *rig) (row, error) {
	before, srv, err := r.begin()
	if err != nil {
		return row{}, err
	}
	defer srv.stop()
	body := r.body(fairPath, fairScale, "")
	alone, err := r.jobThroughput(srv, body)
	if err != nil {
		return row{}, err
	}
	var mu sync.Mutex
	var reqs []request
	var offered sync.WaitGroup
	stop := make(chan struct{})
	go func() {
		tick := time.NewTicker(mixedInterval)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				offered.Go(func() {
					res := r.post(key, srv.base, mixedPath, 2)
					mu.Lock()
					reqs = append(reqs, res)
					mu.Unlock()
				})
			}
		}
	}()
	beside, err := r.jobThroughput(srv, body)
	close(stop)
	offered.Wait()
	if err != nil {
		return row{}, err
	}
	runs, _, err := meanJobRun(srv)
	if err != nil {
		return row{}, err
	}
	if err := srv.stop(); err != nil {
		return row{}, err
	}
	res := newRow(reqs)
	res.successes += runs
	refused := res.count[http.StatusServiceUnavailable]
	res.notes = fmt.Sprintf("%d jobs of ×%d of %s alone: %.2f jobs/s; %d more beside requests of ×2 of %s offered every %v: %.2f jobs/s (%.0f%%); the requests: 200 p99 %v, 503 %.0f%% (%d of %d); %d jobs succeeded",
		mixedJobs, fairScale, fairPath, alone, mixedJobs, mixedPath, mixedInterval, beside, 100*beside/alone,
		res.successP99.Round(time.Millisecond), 100*float64(refused)/float64(max(len(reqs), 1)), refused, len(reqs), runs)
	res.want(res.count[http.StatusGatewayTimeout] == 0, "no request answered 504")
	res.want(res.count[http.StatusOK]+refused == len(reqs), "every request run or refused 503")
	res.want(runs == 2*mixedJobs, "every job succeeded")
	res.want(beside >= 0.9*alone, "the jobs' throughput beside requests within 10%% of alone")
	return res, res.checkLedger(r, before)
}

// jobThroughput submits mixedJobs jobs of body to srv, waits for them to
// end, and returns how many ended a second, from the first run's start to
// the last one's end.
func (r *rig) jobThroughput(srv *server, body string) (float64, error) {
	since := time.Now()
	_, subs := r.submitEach(key, srv.base, body, mixedJobs, 4)
	if len(subs) != mixedJobs {
		return 0, fmt.Errorf("%d of %d submissions accepted", len(subs), mixedJobs)
	}
	if _, err := r.waitForJobs(since, mixedJobs, 5*time.Minute); err != nil {
		return 0, err
	}
	var first, last time.Time
	err := r.db.QueryRow(`SELECT min(attempted_at), max(finalized_at) FROM river_job WHERE kind = 'upscale' AND created_at >= $1`, since).Scan(&first, &last)
	if err != nil {
		return 0, err
	}
	return float64(mixedJobs) / last.Sub(first).Seconds(), nil
}
