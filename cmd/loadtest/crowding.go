package main

import (
	"errors"
	"fmt"
	"net/http"
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
