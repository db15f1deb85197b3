package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/internal/enginebench"
	"github.com/upscalekit/upscale/internal/testservers"
	"github.com/upscalekit/upscale/s3store"
)

const (
	key     = "upk_loadtest_0123456789abcdef"
	account = "load"
	// The account whose sources drip, in the slow-key scenario.
	dripKey     = "upk_loadtest_drip_0123456789abcdef"
	dripAccount = "drip"
	// The account crowded by the normal one, in the crowding scenarios.
	otherKey     = "upk_loadtest_other_0123456789abcdef"
	otherAccount = "other"
)

// rig is everything the scenarios share: the standalone binary, a
// PostgreSQL database and an S3 bucket each reached through a proxy that
// can be cut, direct connections to both for the ledger check, and an
// origin serving the source images.
type rig struct {
	dir, bin, config string
	dsn              string // through pgProxy
	pgProxy, s3Proxy *testservers.Proxy
	db               *sql.DB // direct
	s3               testservers.S3Server
	bucket           string
	bucketClient     *s3.Client // direct
	origin           *http.Server
	originURL        string
	dropDatabase     func()
}

// newRig starts the rig; one that fails on the way gives back what it
// had started (its database, servers and directory).
func newRig() (_ *rig, err error) {
	r := &rig{}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	if r.dir, err = os.MkdirTemp("", "upscale-loadtest-"); err != nil {
		return nil, err
	}
	r.bin = filepath.Join(r.dir, "standalone")
	if out, err := exec.Command("go", "build", "-o", r.bin, "github.com/upscalekit/upscale/examples/standalone").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build the standalone: %v\n%s", err, out)
	}
	dsn, drop, err := testservers.NewPostgresDatabase()
	if err != nil {
		return nil, err
	}
	r.dropDatabase = drop
	if r.db, err = sql.Open("pgx", dsn); err != nil {
		return nil, err
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, err
	}
	if r.pgProxy, err = testservers.StartProxy(u.Host); err != nil {
		return nil, err
	}
	u.Host = r.pgProxy.Addr
	r.dsn = u.String()

	if r.s3, err = testservers.StartS3(); err != nil {
		return nil, err
	}
	os.Setenv("AWS_ACCESS_KEY_ID", r.s3.AccessKey)
	os.Setenv("AWS_SECRET_ACCESS_KEY", r.s3.SecretKey)
	os.Setenv("AWS_CONFIG_FILE", filepath.Join(r.dir, "none"))
	os.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(r.dir, "none"))
	ctx := context.Background()
	if r.bucketClient, err = s3store.NewClient(ctx, r.s3.Endpoint, ""); err != nil {
		return nil, err
	}
	r.bucket = "upscale-load-" + strings.ToLower(upscale.NewKey(""))[:10]
	if _, err := r.bucketClient.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &r.bucket}); err != nil {
		return nil, fmt.Errorf("create bucket: %w", err)
	}
	s3URL, _ := url.Parse(r.s3.Endpoint)
	if r.s3Proxy, err = testservers.StartProxy(s3URL.Host); err != nil {
		return nil, err
	}

	r.config = filepath.Join(r.dir, "config.json")
	config := fmt.Sprintf(`{
		"plans": {"paid": {"paid": true, "maxFileBytes": %d}},
		"accounts": [{"id": %q, "plan": "paid", "credits": 1000000000}, {"id": %q, "plan": "paid", "credits": 1000000000}, {"id": %q, "plan": "paid", "credits": 1000000000}],
		"keys": [{"key": %q, "account": %q}, {"key": %q, "account": %q}, {"key": %q, "account": %q}]
	}`, 50<<20, account, dripAccount, otherAccount, key, account, dripKey, dripAccount, otherKey, otherAccount)
	if err := os.WriteFile(r.config, []byte(config), 0o600); err != nil {
		return nil, err
	}
	// A first start creates the schema and seeds the account, so that the
	// ledger can be read before any scenario.
	srv, err := r.start()
	if err != nil {
		return nil, err
	}
	if err := srv.stop(); err != nil {
		return nil, err
	}
	return r, r.startOrigin()
}

// startOrigin serves the sources: photo-N.jpg, a N×N JPEG of a photograph
// (N 128, 256, 512 or 1024),
// noise.png, a PNG of about 20 MB that does not compress, noise-1000.png,
// one of 1000², and drip.jpg, which sends 100 bytes a second of a 1 MB
// body until the client gives up.
func (r *rig) startOrigin() error {
	photos := map[string][]byte{}
	for _, side := range []int{128, 256, 512, 1024} {
		jpg, err := enginebench.MakePhotoJPEG(side)
		if err != nil {
			return err
		}
		photos[fmt.Sprintf("/photo-%d.jpg", side)] = jpg
	}
	noise := image.NewNRGBA(image.Rect(0, 0, 2600, 2600))
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range noise.Pix {
		noise.Pix[i] = uint8(rng.Uint32())
		if i%4 == 3 {
			noise.Pix[i] = 255
		}
	}
	noise.SetNRGBA(0, 0, color.NRGBA{0, 0, 0, 255})
	var big bytes.Buffer
	if err := png.Encode(&big, noise); err != nil {
		return err
	}
	photos["/noise.png"] = big.Bytes()
	var small bytes.Buffer
	if err := png.Encode(&small, noise.SubImage(image.Rect(0, 0, 1000, 1000))); err != nil {
		return err
	}
	photos["/noise-1000.png"] = small.Bytes()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	r.originURL = "http://" + ln.Addr().String()
	r.origin = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/drip.jpg" {
			drip(w, req)
			return
		}
		data, ok := photos[req.URL.Path]
		if !ok {
			http.NotFound(w, req)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.Write(data)
	})}
	go r.origin.Serve(ln)
	return nil
}

// drip sends 100 bytes a second of a 1 MB body until the client goes.
func drip(w http.ResponseWriter, req *http.Request) {
	w.Header().Set("Content-Length", strconv.Itoa(mib))
	chunk := make([]byte, 100)
	for {
		if _, err := w.Write(chunk); err != nil {
			return
		}
		w.(http.Flusher).Flush()
		select {
		case <-req.Context().Done():
			return
		case <-time.After(time.Second):
		}
	}
}

func (r *rig) close() {
	if r.origin != nil {
		r.origin.Close()
	}
	for _, p := range []*testservers.Proxy{r.pgProxy, r.s3Proxy} {
		if p != nil {
			p.Close()
		}
	}
	if r.db != nil {
		r.db.Close()
	}
	if r.dropDatabase != nil {
		r.dropDatabase()
	}
	testservers.Stop()
	if *keep {
		fmt.Fprintln(os.Stderr, "loadtest: logs kept in", r.dir)
		return
	}
	if r.dir != "" {
		os.RemoveAll(r.dir)
	}
}

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

// ledger is what the database and the bucket hold, for the check that a
// scenario charged exactly its successes and left nothing behind.
type ledger struct {
	credits, openReservations, results int64
}

func (r *rig) readLedger() (ledger, error) {
	var l ledger
	// Every account's, as the crowding scenarios charge two.
	if err := r.db.QueryRow(`SELECT sum(credits) FROM accounts`).Scan(&l.credits); err != nil {
		return l, err
	}
	if err := r.db.QueryRow(`SELECT count(*) FROM reservations`).Scan(&l.openReservations); err != nil {
		return l, err
	}
	pages := s3.NewListObjectsV2Paginator(r.bucketClient, &s3.ListObjectsV2Input{Bucket: &r.bucket})
	for pages.HasMorePages() {
		page, err := pages.NextPage(context.Background())
		if err != nil {
			return l, err
		}
		l.results += int64(len(page.Contents))
	}
	return l, nil
}

// check compares the ledger after a scenario with the one before it.
func (r *rig) check(before ledger, successes int) (string, bool, error) {
	after, err := r.readLedger()
	if err != nil {
		return "", false, err
	}
	charged, stored := before.credits-after.credits, after.results-before.results
	ok := charged == int64(successes) && stored == int64(successes) && after.openReservations == 0
	return fmt.Sprintf("%d charged, %d stored, %d open", charged, stored, after.openReservations), ok, nil
}

// request is one POST's outcome.
type request struct {
	start      time.Time
	took       time.Duration
	status     int // 0: no answer (err)
	code       string
	retryAfter time.Duration // 0 if absent
	err        error
}

var client = &http.Client{
	Timeout:   5 * time.Minute,
	Transport: &http.Transport{MaxIdleConnsPerHost: 1000, MaxConnsPerHost: 0},
}

// post asks base, with apiKey, to enlarge the origin's path by scale.
func (r *rig) post(apiKey, base, path string, scale int) request {
	return r.postAs(apiKey, base, path, scale, nil, nil)
}

// postAs is post with the request changed by prepare, when not nil, and
// the answer's body decoded into answer, when not nil.
func (r *rig) postAs(apiKey, base, path string, scale int, prepare func(*http.Request), answer any) request {
	return postWith(client, apiKey, base, r.body(path, scale, ""), prepare, answer)
}

// body is a request's JSON: ×scale of the origin's path, posted to
// webhook once it ends as a job, when webhook is not empty.
func (r *rig) body(path string, scale int, webhook string) string {
	fields := map[string]any{"imageUrl": r.originURL + path, "scale": scale}
	if webhook != "" {
		fields["webhookUrl"] = webhook
	}
	raw, _ := json.Marshal(fields)
	return string(raw)
}

// postWith posts body to base's API with apiKey through c, as postAs
// does.
func postWith(c *http.Client, apiKey, base, body string, prepare func(*http.Request), answer any) request {
	req, _ := http.NewRequest(http.MethodPost, base+"/api/v1/upscale", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	if prepare != nil {
		prepare(req)
	}
	res := request{start: time.Now()}
	resp, err := c.Do(req)
	res.took = time.Since(res.start)
	if err != nil {
		res.err = err
		return res
	}
	defer resp.Body.Close()
	res.status = resp.StatusCode
	raw, _ := io.ReadAll(resp.Body)
	var problem struct {
		Code string `json:"code"`
	}
	json.Unmarshal(raw, &problem)
	res.code = problem.Code
	if answer != nil {
		json.Unmarshal(raw, answer)
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
		res.retryAfter = time.Duration(s) * time.Second
	}
	return res
}

// keepPosting has n clients post path by scale with apiKey until stop,
// each waiting out the Retry-After of a refusal, as a client that reads
// the contract does, and returns every outcome.
func (r *rig) keepPosting(apiKey, base, path string, scale, n int, stop <-chan struct{}) []request {
	results := make(chan []request, n)
	for range n {
		go func() {
			var mine []request
			for {
				select {
				case <-stop:
					results <- mine
					return
				default:
				}
				res := r.post(apiKey, base, path, scale)
				mine = append(mine, res)
				wait := res.retryAfter
				if res.err != nil {
					wait = 100 * time.Millisecond
				}
				select {
				case <-stop:
				case <-time.After(wait):
				}
			}
		}()
	}
	var all []request
	for range n {
		all = append(all, <-results...)
	}
	return all
}

func after(d time.Duration) <-chan struct{} {
	c := make(chan struct{})
	time.AfterFunc(d, func() { close(c) })
	return c
}
