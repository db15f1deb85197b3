package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"sync"
	"time"
)

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
