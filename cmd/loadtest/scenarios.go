package main

import (
	"fmt"
	"net"
	"net/http"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/upscalekit/upscale/internal/testservers"
)

const (
	mib            = 1 << 20
	refusalP99Goal = 100 * time.Millisecond
)

// overload: clients ask for ×4 of a 1024² photo for the whole duration,
// each waiting out its Retry-After. Refusals must be quick, none of the
// engine's deadline may pass in the queue, and the engine must stay busy:
// successes are what the engine can do.
func overload(r *rig) (row, error) {
	before, srv, err := r.begin()
	if err != nil {
		return row{}, err
	}
	start := time.Now()
	reqs := r.keepPosting(key, srv.base, "/photo-1024.jpg", 4, *clients, after(*duration))
	wall := time.Since(start)
	engineSeconds, err := srv.metric(`upscale_step_duration_seconds_sum{step="engine"}`)
	if err != nil {
		return row{}, err
	}
	res := newRow(reqs)
	res.memory = fmt.Sprintf("peak %d MiB", srv.memory("VmHWM")/mib)
	if err := srv.stop(); err != nil {
		return row{}, err
	}
	busy := engineSeconds / (float64(runtime.NumCPU()) * wall.Seconds())
	res.notes = fmt.Sprintf("%d clients, %v; engine busy %.0f%% of its %d slots' time", *clients, *duration, 100*busy, runtime.NumCPU())
	res.want(res.refusalP99 < refusalP99Goal, "refusals p99 under %v", refusalP99Goal)
	res.want(res.count[http.StatusGatewayTimeout] == 0, "no 504")
	res.want(busy >= 0.9, "engine busy at least 90%% of the time")
	return res, res.checkLedger(r, before)
}

// bigSources: 100 clients at once each send a 20 MB PNG for ×2, retrying
// after refusals for up to three minutes. Peak memory must stay within the
// budget and a stated constant, and memory must go back once idle.
func bigSources(r *rig) (row, error) {
	before, srv, err := r.begin()
	if err != nil {
		return row{}, err
	}
	var mu sync.Mutex
	var reqs []request
	var wg sync.WaitGroup
	deadline := time.Now().Add(3 * time.Minute)
	for range 100 {
		wg.Go(func() {
			for {
				res := r.post(key, srv.base, "/noise.png", 2)
				mu.Lock()
				reqs = append(reqs, res)
				mu.Unlock()
				if res.status != http.StatusServiceUnavailable || time.Now().Add(res.retryAfter).After(deadline) {
					return
				}
				time.Sleep(res.retryAfter)
			}
		})
	}
	wg.Wait()
	res := newRow(reqs)
	peak := srv.memory("VmHWM")
	idle := map[time.Duration]int64{}
	idleStart := time.Now()
	for _, at := range []time.Duration{0, 10 * time.Second, 30 * time.Second, 60 * time.Second} {
		time.Sleep(time.Until(idleStart.Add(at)))
		idle[at] = srv.memory("VmRSS")
	}
	goHeld, err := goHeapHeld(srv)
	if err != nil {
		return row{}, err
	}
	if err := srv.stop(); err != nil {
		return row{}, err
	}
	res.memory = fmt.Sprintf("peak %d MiB; idle %d → %d → %d → %d MiB at 0/10/30/60 s, of which the Go heap holds %d MiB", peak/mib, idle[0]/mib, idle[10*time.Second]/mib, idle[30*time.Second]/mib, idle[60*time.Second]/mib, goHeld/mib)
	res.notes = "100 clients × one 20 MB PNG ×2, retrying after 503 for up to 3 min; budget 1 GiB"
	res.want(peak <= 1300*mib, "peak RSS at most 1.3 GiB")
	res.want(idle[60*time.Second] <= 400*mib, "idle RSS under 400 MiB within 60 s")
	return res, res.checkLedger(r, before)
}

// goHeapHeld is the memory the Go runtime holds from the system and has
// not given back, from the server's metrics; the rest of its RSS is C's
// (libvips, glibc's arenas) and the binary's.
func goHeapHeld(srv *server) (int64, error) {
	sys, err := srv.metric("go_memstats_heap_sys_bytes")
	if err != nil {
		return 0, err
	}
	released, err := srv.metric("go_memstats_heap_released_bytes")
	return int64(sys - released), err
}

// slowClients: 2000 connections send half a request's headers and stop,
// more than -max-connections (1024). The server's file descriptors must
// stay bounded, and a normal client must still be served.
func slowClients(r *rig) (row, error) {
	srv, err := r.start()
	if err != nil {
		return row{}, err
	}
	var conns []net.Conn
	addr := srv.base[len("http://"):]
	for range 2000 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			break
		}
		fmt.Fprintf(c, "POST /api/v1/upscale HTTP/1.1\r\nHost: %s\r\n", addr)
		conns = append(conns, c)
	}
	time.Sleep(time.Second)
	fds := srv.openFiles()
	normal := r.post(key, srv.base, "/photo-512.jpg", 2)
	for _, c := range conns {
		c.Close()
	}
	if err := srv.stop(); err != nil {
		return row{}, err
	}
	res := newRow([]request{normal})
	res.notes = fmt.Sprintf("%d slow connections open; server held %d file descriptors; a normal ×2 took %v", len(conns), fds, normal.took.Round(time.Millisecond))
	res.want(fds <= 1024+200, "file descriptors bounded by -max-connections")
	res.want(normal.status == http.StatusOK, "a normal client is served")
	res.ok = res.ok && len(conns) == 2000
	return res, nil
}

// outage: 8 clients ask for ×2 of a 512² photo for 25 s, and a prober
// sends a new request every 250 ms; the proxy in front of a backend is cut
// 5 s in, for 10 s. While it is down, new requests get only 503 with
// Retry-After, and work already done either commits once the backend is
// back (200) or is refused; service must resume within 2 s of the
// backend's return, and the ledger must be exact with no orphan result.
func outage(r *rig, name string, proxy *testservers.Proxy) (row, error) {
	before, srv, err := r.begin()
	if err != nil {
		return row{}, err
	}
	var cut, restored time.Time
	var restoreErr error
	go func() {
		time.Sleep(5 * time.Second)
		cut = time.Now()
		proxy.Cut()
		time.Sleep(10 * time.Second)
		restoreErr = proxy.Restore()
		restored = time.Now()
	}()
	stop := after(25 * time.Second)
	probes := make(chan []request, 1)
	go func() { // a new request every 250 ms, whether or not the last has its answer
		var mu sync.Mutex
		var mine []request
		var wg sync.WaitGroup
		for tick := time.Tick(250 * time.Millisecond); ; {
			select {
			case <-stop:
				wg.Wait()
				probes <- mine
				return
			case <-tick:
				wg.Go(func() {
					res := r.post(key, srv.base, "/photo-512.jpg", 2)
					mu.Lock()
					defer mu.Unlock()
					mine = append(mine, res)
				})
			}
		}
	}()
	reqs := append(r.keepPosting(key, srv.base, "/photo-512.jpg", 2, 8, stop), <-probes...)
	if restoreErr != nil {
		return row{}, restoreErr
	}
	if err := srv.stop(); err != nil {
		return row{}, err
	}
	res := newRow(reqs)
	var during []request
	bad, noRetryAfter := 0, 0
	recovery := time.Duration(-1)
	for _, q := range reqs {
		end := q.start.Add(q.took)
		if end.After(cut) && q.start.Before(restored) {
			during = append(during, q)
		}
		if q.status != http.StatusOK && q.status != http.StatusServiceUnavailable {
			bad++
		}
		if q.status == http.StatusServiceUnavailable && q.retryAfter == 0 {
			noRetryAfter++
		}
		if q.status == http.StatusOK && q.start.After(restored) && (recovery < 0 || end.Sub(restored) < recovery) {
			recovery = end.Sub(restored)
		}
	}
	downRow := newRow(during)
	res.notes = fmt.Sprintf("down 10 s under 8 clients and a prober; requests overlapping the outage: %s (503 p99 %v); first success %v after the return",
		downRow.statuses, downRow.refusalP99.Round(100*time.Microsecond), recovery.Round(10*time.Millisecond))
	res.want(bad == 0, "only 200 and 503")
	res.want(noRetryAfter == 0, "every 503 has Retry-After")
	res.want(recovery >= 0 && recovery <= 2*time.Second, "recovery within 2 s")
	return res, res.checkLedger(r, before)
}

// sigterm: 8 clients ask for ×4 of a 1024² photo; SIGTERM comes 5 s in,
// with a 3 s drain delay. /readyz must turn 503, every request the server
// accepted must be answered, and the process must exit cleanly.
func sigterm(r *rig) (row, error) {
	before, srv, err := r.begin("-drain-delay", "3s")
	if err != nil {
		return row{}, err
	}
	stop := make(chan struct{})
	results := make(chan []request, 1)
	go func() { results <- r.keepPosting(key, srv.base, "/photo-1024.jpg", 4, 8, stop) }()
	time.Sleep(5 * time.Second)
	signalled := time.Now()
	srv.cmd.Process.Signal(syscall.SIGTERM)
	drained := false
	for time.Since(signalled) < 3*time.Second && !drained {
		if resp, err := http.Get(srv.base + "/readyz"); err == nil {
			resp.Body.Close()
			drained = resp.StatusCode == http.StatusServiceUnavailable
		}
		time.Sleep(50 * time.Millisecond)
	}
	exitErr := <-srv.exited
	exited := time.Since(signalled)
	close(stop)
	reqs := <-results
	res := newRow(reqs)
	dropped := 0
	for _, q := range reqs {
		if q.err != nil && q.start.Before(signalled.Add(3*time.Second)) {
			dropped++ // sent before the listener closed, never answered
		}
	}
	res.notes = fmt.Sprintf("/readyz 503 while draining: %v; exit %v after %v; %d accepted requests unanswered", drained, exitErr, exited.Round(100*time.Millisecond), dropped)
	res.want(drained, "/readyz turns 503")
	res.want(exitErr == nil, "clean exit")
	res.want(dropped == 0, "every accepted request answered")
	return res, res.checkLedger(r, before)
}

// engineTimeouts: with a 2 s engine deadline, ×8 of a 1000² noise PNG
// overruns it (504), and the engine goes on past the deadline. Once it has
// returned, one client at a time asks for ×2 of a 512² photo: an idle
// engine must never refuse (the probe found every request refused for good
// after one such timeout), and /readyz must stay ready.
func engineTimeouts(r *rig) (row, error) {
	before, srv, err := r.begin("-engine-timeout", "2s")
	if err != nil {
		return row{}, err
	}
	var timeouts []request
	for range 3 {
		timeouts = append(timeouts, r.post(key, srv.base, "/noise-1000.png", 8))
	}
	// The overrunning images still hold their slots; wait them out.
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if inEngine, err := srv.metric(`upscale_engine_requests`); err == nil && inEngine == 0 {
			break
		}
	}
	var normal []request
	notReady := 0
	for stop := after(20 * time.Second); ; {
		select {
		case <-stop:
		default:
			normal = append(normal, r.post(key, srv.base, "/photo-512.jpg", 2))
			if resp, err := client.Get(srv.base + "/readyz"); err == nil {
				if resp.StatusCode != http.StatusOK {
					notReady++
				}
				resp.Body.Close()
			}
			continue
		}
		break
	}
	res := newRow(append(timeouts, normal...))
	after := newRow(normal)
	if err := srv.stop(); err != nil {
		return row{}, err
	}
	res.notes = fmt.Sprintf("3 × ×8 of noise-1000.png under -engine-timeout 2s, then %d requests one at a time: %s; /readyz not ready %d times", len(normal), after.statuses, notReady)
	res.want(after.count[http.StatusOK] == len(normal), "every request on the idle engine after the timeouts succeeds")
	res.want(notReady == 0, "/readyz ready once the engine returned")
	return res, res.checkLedger(r, before)
}

// slowKey: four clients with the normal key ask for ×2 of a 512² photo,
// one after another, first alone for 20 s, then for 20 s beside twenty
// clients of another account whose sources drip 100 bytes a second and
// who repeat their requests after each refusal. The normal clients must
// get no refusal, and their p99 must stay within 10% of the baseline plus
// 50 ms (the machine's noise): the dripping account holds at most its
// share of the places.
func slowKey(r *rig) (row, error) {
	return besideDrips(r, 20*time.Second, func(base string, stop <-chan struct{}) []request {
		return r.keepPosting(dripKey, base, "/drip.jpg", 2, 20, stop)
	})
}

// slowUploads is slow-key with uploads: the other account's twenty
// clients each upload a 512² photo at 100 bytes a second, for 25 s. An
// upload is read on a place, never on an engine slot, and cut at the
// fetch timeout (20 s): the normal key is served as in slow-key, and
// every dripped upload is refused (429 beyond the account's share, 400
// when cut), at least one of them cut, none charged.
func slowUploads(r *rig) (row, error) {
	var drips row
	res, err := besideDrips(r, 25*time.Second, func(base string, stop <-chan struct{}) []request {
		reqs := keepSending(20, stop, func() request { return r.dripUpload(dripKey, base, "/photo-512.jpg") })
		drips = newRow(reqs)
		return reqs
	})
	res.want(drips.count[http.StatusOK] == 0 && drips.count[http.StatusBadRequest] > 0 && drips.count[http.StatusBadRequest]+drips.count[http.StatusTooManyRequests] == drips.requests,
		"every dripped upload refused, at least one cut at the fetch timeout")
	return res, err
}

// besideDrips is slow-key's measure: four clients of the normal key ask
// for ×2 of a 512² photo one after another, alone for 20 s, then for
// phase beside the other account's clients that drip. The normal key
// must get no refusal, and its p99 stay within 10% of alone plus 50 ms.
func besideDrips(r *rig, phase time.Duration, drip func(base string, stop <-chan struct{}) []request) (row, error) {
	before, srv, err := r.begin("-account-share", "0") // the default: half of the places
	if err != nil {
		return row{}, err
	}
	alone := newRow(r.keepPosting(key, srv.base, "/photo-512.jpg", 2, 4, after(20*time.Second)))
	stop := after(phase)
	dripped := make(chan []request, 1)
	go func() { dripped <- drip(srv.base, stop) }()
	besideReqs := r.keepPosting(key, srv.base, "/photo-512.jpg", 2, 4, stop)
	srv.stop() // ends the dripping still under way
	drips := newRow(<-dripped)
	beside := newRow(besideReqs)
	// The ledger check counts the normal account's successes.
	res := beside
	res.successes = alone.successes + beside.successes
	res.notes = fmt.Sprintf("normal key alone: %s, p99 %v; beside the dripping account: %s, p99 %v; dripping account: %s",
		alone.statuses, alone.successP99.Round(time.Millisecond), beside.statuses, beside.successP99.Round(time.Millisecond), drips.statuses)
	res.want(beside.count[http.StatusOK] == beside.requests, "no refusal of the normal key")
	res.want(beside.successP99 <= alone.successP99*11/10+50*time.Millisecond, "the normal key's p99 within 10%% (+50 ms) of alone")
	return res, res.checkLedger(r, before)
}
