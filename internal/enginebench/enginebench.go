// Package enginebench holds what the engines' speed and memory benchmarks
// share: timing a loop of images at a given concurrency with the process's
// peak memory, and the whole handler over HTTP to compare with the engine
// alone. It is for benchmarks: its functions fail the testing.B on error.
package enginebench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/h2non/bimg"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/internal/quality"
)

// PhotoJPEG returns a side×side JPEG (quality 90) of Set14's baboon, whose
// fur is about as costly to encode as photos get.
func PhotoJPEG(tb testing.TB, side int) []byte {
	return PhotoJPEGSized(tb, side, side)
}

// PhotoJPEGSized is PhotoJPEG at width×height, such as a phone's 4:3.
func PhotoJPEGSized(tb testing.TB, width, height int) []byte {
	out, err := makePhotoJPEG(width, height)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// MakePhotoJPEG is PhotoJPEG for a program.
func MakePhotoJPEG(side int) ([]byte, error) { return makePhotoJPEG(side, side) }

func makePhotoJPEG(width, height int) ([]byte, error) {
	src, err := os.ReadFile(quality.SetDir() + "/Set14/baboon.png")
	if err != nil {
		return nil, err
	}
	return bimg.NewImage(src).Process(bimg.Options{Width: width, Height: height, Force: true, Enlarge: true, Type: bimg.JPEG, Quality: 90})
}

// Measured is what one run of n images on one path took.
type Measured struct {
	ImagesPerSecond float64
	P50, P99        time.Duration
	PeakRSS         int64 // how far the process's peak RSS rose, in bytes; -1 if unknown
}

// Measure runs do n times on concurrency goroutines, and times them.
func Measure(b *testing.B, n, concurrency int, do func() error) Measured {
	peak := StartPeakRSS(b)
	var next atomic.Int64
	latencies := make([]time.Duration, n)
	var wg sync.WaitGroup
	start := time.Now()
	for range concurrency {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				t := time.Now()
				if err := do(); err != nil {
					b.Error(err)
					return
				}
				latencies[i] = time.Since(t)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(latencies)
	m := Measured{
		ImagesPerSecond: float64(n) / elapsed.Seconds(),
		P50:             latencies[n/2],
		P99:             latencies[min(n-1, n*99/100)],
		PeakRSS:         -1,
	}
	if grew, ok := peak(); ok {
		m.PeakRSS = grew
	}
	return m
}

// Report gives m as the benchmark's metrics, each unit prefixed by path
// ("floor-", "handler-") when two paths share one benchmark.
func (m Measured) Report(b *testing.B, path string) {
	b.ReportMetric(m.ImagesPerSecond, path+"images/s")
	b.ReportMetric(float64(m.P50.Microseconds())/1000, path+"p50-ms")
	b.ReportMetric(float64(m.P99.Microseconds())/1000, path+"p99-ms")
	if m.PeakRSS >= 0 {
		b.ReportMetric(float64(m.PeakRSS)/(1<<20), path+"peakRSS-MiB")
	}
}

// Throughput runs engine alone in a loop (the floor) and the whole
// handler over HTTP (fetch src, a JPEG, from a loopback origin, enlarge,
// store in memory, answer) at each scale and concurrency. Each run of a
// row measures b.N images on both paths back to back and reports their
// ratio, so that the ratio compares two paths under the same load on a
// shared machine; the order alternates between runs, so that drift in that
// load favours neither path.
func Throughput(b *testing.B, engine upscale.Upscaler, src []byte, scales, concurrencies []int) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/jpeg")
		w.Write(src)
	}))
	defer origin.Close()
	server := NewServer(b, engine)
	defer server.Close()
	for _, scale := range scales {
		for _, concurrency := range concurrencies {
			opts := upscale.Params{Scale: scale, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone}
			body := fmt.Sprintf(`{"imageUrl": %q, "scale": %d, "imageType": "photo", "denoise": "none"}`, origin.URL+"/photo.jpg", scale)
			floor := func() error {
				_, err := engine.Upscale(context.Background(), src, opts)
				return err
			}
			handler := func() error { return Post(server.URL, body) }
			handlerFirst := false
			b.Run(fmt.Sprintf("scale=%d/c=%d", scale, concurrency), func(b *testing.B) {
				var f, h Measured
				if handlerFirst {
					h = Measure(b, b.N, concurrency, handler)
					f = Measure(b, b.N, concurrency, floor)
				} else {
					f = Measure(b, b.N, concurrency, floor)
					h = Measure(b, b.N, concurrency, handler)
				}
				if b.N > 1 { // not the single warm-up run testing makes first
					handlerFirst = !handlerFirst
				}
				f.Report(b, "floor-")
				h.Report(b, "handler-")
				b.ReportMetric(h.ImagesPerSecond/f.ImagesPerSecond, "handler/floor")
			})
		}
	}
}

// Path is one way of doing the same work, for Interleave.
type Path struct {
	Name string
	Run  func() error
}

// Interleave runs every path once per iteration, in an order that rotates
// between iterations so that all of them meet the same load on a shared
// machine, and reports each one's milliseconds per run ("<name>-ms"). It
// returns each path's total time, for ratios between them.
func Interleave(b *testing.B, paths []Path) []time.Duration {
	total := make([]time.Duration, len(paths))
	for i := range b.N {
		for k := range paths {
			j := (i + k) % len(paths)
			start := time.Now()
			if err := paths[j].Run(); err != nil {
				b.Fatal(err)
			}
			total[j] += time.Since(start)
		}
	}
	for j, p := range paths {
		b.ReportMetric(float64(total[j].Milliseconds())/float64(b.N), p.Name+"-ms")
	}
	return total
}

// NewServer serves the handler with engine, in-memory stores and one
// unlimited key, for Post.
func NewServer(b *testing.B, engine upscale.Upscaler) *httptest.Server {
	server, err := StartServer(engine)
	if err != nil {
		b.Fatal(err)
	}
	return server
}

// StartServer is NewServer for a program.
func StartServer(engine upscale.Upscaler) (*httptest.Server, error) {
	ctx := context.Background()
	keys := upscale.NewMemoryKeyStore()
	ledger := upscale.NewMemoryLedger(upscale.LedgerOptions{})
	if err := errors.Join(
		ledger.PutAccount(ctx, upscale.Account{ID: "bench", Plan: upscale.Plan{Name: "unlimited", Paid: true, Unlimited: true, MaxFileBytes: 50 << 20}}),
		keys.AddKey(ctx, "bench-key-0123456789", "bench"),
	); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	server := httptest.NewServer(mux)
	blobs, err := upscale.NewMemoryBlobStore(upscale.MemoryBlobStoreOptions{BaseURL: server.URL + "/results", SweepInterval: time.Second})
	if err != nil {
		server.Close()
		return nil, err
	}
	handler, err := upscale.New(upscale.Config{Keys: keys, Ledger: ledger, Upscaler: engine, Blobs: blobs, Fetch: upscale.FetchPolicy{AllowPrivateNetworks: true}, LinkTTL: time.Second})
	if err == nil {
		err = handler.StartJobs(ctx) // for PostJob; the process's end stops them
	}
	if err != nil {
		server.Close()
		return nil, err
	}
	mux.Handle("/api/v1/upscale", handler)
	mux.Handle("/api/v1/upscale/jobs/", handler)
	mux.Handle("/results/", blobs)
	return server, nil
}

// Post asks the server at base to upscale as body says.
func Post(base, body string) error {
	resp, err := send(http.MethodPost, base+"/api/v1/upscale", body, "")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", resp.Status)
	}
	return nil
}

// PostJob asks the server at base to upscale as body says as a job (the
// job form), polls the job every 100 ms until it has ended, and returns it
// succeeded.
func PostJob(base, body string) (upscale.Job, error) {
	resp, err := send(http.MethodPost, base+"/api/v1/upscale", body, "respond-async")
	if err != nil {
		return upscale.Job{}, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return upscale.Job{}, fmt.Errorf("submission: status %s", resp.Status)
	}
	location := base + resp.Header.Get("Location")
	for {
		time.Sleep(100 * time.Millisecond)
		resp, err := send(http.MethodGet, location, "", "")
		if err != nil {
			return upscale.Job{}, err
		}
		var job upscale.Job
		err = json.NewDecoder(resp.Body).Decode(&job)
		resp.Body.Close()
		switch {
		case err != nil:
			return upscale.Job{}, fmt.Errorf("the job: %w", err)
		case job.Status == upscale.JobSucceeded:
			return job, nil
		case job.Status.Done():
			return upscale.Job{}, fmt.Errorf("the job ended %s: %+v", job.Status, job.Problem)
		}
	}
}

// send sends a request of the bench's key, with the Prefer header prefer
// unless it is empty.
func send(method, url, body, prefer string) (*http.Response, error) {
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer bench-key-0123456789")
	req.Header.Set("Content-Type", "application/json")
	if prefer != "" {
		req.Header.Set("Prefer", prefer)
	}
	return http.DefaultClient.Do(req)
}

// StartPeakRSS resets the kernel's peak-RSS mark for this process and
// returns a function that reports how far the peak has risen above the
// resident size at the reset. Where the kernel cannot reset the mark, ok is
// false and the memory bound is not checked.
func StartPeakRSS(t testing.TB) func() (grew int64, ok bool) {
	debug.FreeOSMemory()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Logf("peak memory not measured: %v", err)
		return func() (int64, bool) { return 0, false }
	}
	status := func(field string) int64 {
		kb, err := StatusKB("self", field)
		if err != nil {
			t.Fatal(err)
		}
		return kb
	}
	base := status("VmRSS")
	return func() (int64, bool) { return (status("VmHWM") - base) << 10, true }
}

// StatusKB reads a field in kB from /proc/<pid>/status ("self" for this
// process).
func StatusKB(pid, field string) (int64, error) {
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			return strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%s/status", field, pid)
}

// Process runs cmd and returns its wall time, its peak RSS in bytes and
// what it wrote. The peak is the child's VmHWM, read every 10 ms while it
// runs: the peak the kernel reports at exit (rusage's maxrss) also counts
// the parent's RSS at the fork, which exec records, and a benchmark
// process is large.
func Process(b *testing.B, cmd *exec.Cmd) (time.Duration, int64, []byte) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var peak int64
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			if err != nil {
				b.Fatalf("%s: %v\n%s", cmd.Path, err, out.Bytes())
			}
			return time.Since(start), peak << 10, out.Bytes()
		case <-tick.C:
			if kb, err := StatusKB(strconv.Itoa(cmd.Process.Pid), "VmHWM"); err == nil {
				peak = max(peak, kb)
			}
		}
	}
}
