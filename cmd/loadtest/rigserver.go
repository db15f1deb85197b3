package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/upscalekit/upscale/internal/enginebench"
)

// server is one running standalone.
type server struct {
	cmd      *exec.Cmd
	base     string
	metrics  string
	exited   chan error
	log      *os.File
	stopOnce sync.Once
	stopErr  error
}

// start runs the standalone against the rig's database, bucket and
// origin, with extra flags, and waits for its banner.
func (r *rig) start(extra ...string) (*server, error) {
	return r.launch([]string{r.bin}, extra)
}

// startWorker runs a standalone worker on the rig's database and bucket,
// with extra flags, and waits for its banner; its base is empty. As if on
// an engine machine of its own, it is pinned to one CPU and runs at nice
// 10, so that the API, the database and S3 have the CPU when they need it.
// Its process ID is its CPU's: a worker started again on a CPU is the one
// that ran there.
func (r *rig) startWorker(cpu int, extra ...string) (*server, error) {
	return r.launch([]string{"taskset", "-c", strconv.Itoa(cpu), "nice", "-n", "10", r.bin, "worker", "-process-id", fmt.Sprintf("worker-%d", cpu)}, extra)
}

// launch runs command (the standalone, or the standalone worker) with the
// rig's flags and extra, and waits for its banner.
func (r *rig) launch(command, extra []string) (*server, error) {
	args := append([]string{
		"-addr", "127.0.0.1:0", "-config", r.config, "-data", filepath.Join(r.dir, "data"),
		"-database-url", r.dsn, "-s3-bucket", r.bucket, "-s3-endpoint", "http://" + r.s3Proxy.Addr,
		"-allow-private-sources", "-metrics-addr", "127.0.0.1:0", "-drain-delay", "0",
		// The scenarios' clients stand for many callers but share one key;
		// only slow-key, which measures the share, lowers it again.
		"-account-share", "1000",
	}, extra...)
	log, err := os.CreateTemp(r.dir, "standalone-*.log")
	if err != nil {
		return nil, err
	}
	s := &server{cmd: exec.Command(command[0], append(command[1:], args...)...), exited: make(chan error, 1), log: log}
	s.cmd.Stderr = log
	// A pipe of our own, not StdoutPipe: Wait closes that one, and must
	// not be called while it is read (os/exec), but Wait runs from the
	// start here, to tell when the server exits.
	stdout, child, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	s.cmd.Stdout = child
	err = s.cmd.Start()
	child.Close()
	if err != nil {
		stdout.Close()
		return nil, err
	}
	go func() { s.exited <- s.cmd.Wait() }()
	lines := bufio.NewScanner(stdout)
	started := false
	for (!started || s.metrics == "") && lines.Scan() {
		if v, ok := strings.CutPrefix(lines.Text(), "upscale standalone listening on "); ok {
			s.base, _, _ = strings.Cut(v, " ")
			started = true
		}
		started = started || strings.HasPrefix(lines.Text(), "upscale standalone worker: ")
		if v, ok := strings.CutPrefix(lines.Text(), "metrics at "); ok {
			s.metrics = v
		}
	}
	go func() {
		io.Copy(io.Discard, stdout) // until the server exits
		stdout.Close()
	}()
	if !started || s.metrics == "" {
		s.cmd.Process.Kill()
		out, _ := os.ReadFile(log.Name())
		return nil, fmt.Errorf("the standalone did not start:\n%s", out)
	}
	return s, nil
}

// begin reads the ledger, for the check after a scenario, and starts the
// scenario's server.
func (r *rig) begin(extra ...string) (ledger, *server, error) {
	before, err := r.readLedger()
	if err != nil {
		return ledger{}, nil, err
	}
	srv, err := r.start(extra...)
	return before, srv, err
}

// stop sends SIGTERM and waits for the exit; called again, it returns
// the first call's outcome, so that a scenario may stop its server before
// its ledger check and defer a stop for its early returns.
func (s *server) stop() error {
	s.stopOnce.Do(func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case s.stopErr = <-s.exited:
		case <-time.After(2 * time.Minute):
			s.cmd.Process.Kill()
			s.stopErr = fmt.Errorf("still running 2 minutes after SIGTERM")
		}
	})
	return s.stopErr
}

// memory reads a field of the server's /proc status (VmRSS, VmHWM) in
// bytes.
func (s *server) memory(field string) int64 {
	kb, _ := enginebench.StatusKB(strconv.Itoa(s.cmd.Process.Pid), field)
	return kb << 10
}

// openFiles counts the server's file descriptors.
func (s *server) openFiles() int {
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", s.cmd.Process.Pid))
	return len(fds)
}

// metric reads one sample, such as
// upscale_step_duration_seconds_sum{step="engine"}, from the server's
// metrics.
func (s *server) metric(sample string) (float64, error) {
	resp, err := http.Get(s.metrics)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		if v, ok := strings.CutPrefix(lines.Text(), sample+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("no %s in the metrics", sample)
}
