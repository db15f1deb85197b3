package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/client"
	"github.com/upscalekit/upscale/internal/quality"
	"github.com/upscalekit/upscale/internal/testservers"
	"github.com/upscalekit/upscale/s3store"
	"github.com/upscalekit/upscale/upscaletest"
)

// sharedStores is what replicas share: a new PostgreSQL database and a
// new bucket on an S3 server, as flags, with a client of the bucket. The
// S3 credentials are set in the environment the processes inherit.
type sharedStores struct {
	flags             []string
	database          string
	s3                *s3.Client
	bucketURL, bucket string
}

// s3Credentials sets the S3 server's credentials in this process's
// environment, once: the server is the same for every test of the
// process, so its tests may run in parallel, which t.Setenv forbids.
var s3Credentials sync.Once

func newSharedStores(t *testing.T) sharedStores {
	t.Helper()
	ctx := context.Background()
	database := testservers.PostgresDatabase(t)
	server := testservers.S3(t)
	s3Credentials.Do(func() {
		none := filepath.Join(scratch, "none") // no AWS config files
		os.Setenv("AWS_CONFIG_FILE", none)
		os.Setenv("AWS_SHARED_CREDENTIALS_FILE", none)
		os.Setenv("AWS_ACCESS_KEY_ID", server.AccessKey)
		os.Setenv("AWS_SECRET_ACCESS_KEY", server.SecretKey)
	})
	s3Client, err := s3store.NewClient(ctx, server.Endpoint, "")
	if err != nil {
		t.Fatal(err)
	}
	bucket := "replicas-" + strings.ToLower(upscale.NewKey(""))[:12]
	if _, err := s3Client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		t.Fatal(err)
	}
	return sharedStores{
		flags:    []string{"-database-url", database, "-s3-endpoint", server.Endpoint, "-s3-bucket", bucket},
		database: database,
		s3:       s3Client, bucketURL: server.Endpoint + "/" + bucket + "/", bucket: bucket,
	}
}

// admin returns the storage flags of an admin subcommand on the database.
func (s sharedStores) admin(t *testing.T) []string {
	return []string{"-database-url", s.database, "-data", t.TempDir()}
}

// objectOf returns the key of the object a link points to in the bucket,
// or "" for a link elsewhere.
func (s sharedStores) objectOf(link string) string {
	key, ok := strings.CutPrefix(strings.SplitN(link, "?", 2)[0], s.bucketURL)
	if !ok {
		return ""
	}
	return key
}

// objects returns the keys in the bucket.
func (s sharedStores) objects(t *testing.T) map[string]bool {
	t.Helper()
	out, err := s.s3.ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: &s.bucket})
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for _, o := range out.Contents {
		keys[*o.Key] = true
	}
	return keys
}

// worker is a running "standalone worker" process.
type worker struct {
	cmd     *exec.Cmd
	exited  chan error
	stderr  bytes.Buffer
	metrics string // the -metrics-addr URL, when given
}

// startWorker runs "bin worker args" and waits for its banner.
func startWorker(t *testing.T, bin string, args ...string) *worker {
	t.Helper()
	w := &worker{cmd: exec.Command(bin, append([]string{"worker"}, args...)...), exited: make(chan error, 1)}
	w.cmd.Stderr = &w.stderr
	stdout, _ := w.cmd.StdoutPipe()
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { w.exited <- w.cmd.Wait() }()
	t.Cleanup(func() { w.cmd.Process.Kill() })
	lines := bufio.NewScanner(stdout)
	banner := lines.Scan() && strings.HasPrefix(lines.Text(), "upscale standalone worker: ")
	if banner && slices.Contains(args, "-metrics-addr") {
		lines.Scan()
		w.metrics, _ = strings.CutPrefix(lines.Text(), "metrics at ")
	}
	if !banner {
		t.Fatalf("the worker did not start:\n%s", w.stderr.String())
	}
	go io.Copy(io.Discard, stdout)
	return w
}

// stop sends SIGTERM and checks for a clean exit.
func (w *worker) stop(t *testing.T) {
	t.Helper()
	w.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-w.exited; err != nil {
		t.Errorf("worker's exit after SIGTERM: %v\n%s", err, w.stderr.String())
	}
}

// hookReceiver receives webhooks signed with one secret.
type hookReceiver struct {
	url    string
	bodies chan []byte
}

func newHookReceiver(t *testing.T, secret string) *hookReceiver {
	h := &hookReceiver{bodies: make(chan []byte, 64)}
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if _, err := client.VerifyWebhook(secret, r.Header, body, time.Now()); err != nil {
			t.Errorf("webhook %s: %v", body, err)
		}
		h.bodies <- body
	}))
	t.Cleanup(receiver.Close)
	h.url = receiver.URL + "/hooks"
	return h
}

// rotateSecret makes the demo account's webhook secret on the database
// the storage flags name, and returns it.
func rotateSecret(t *testing.T, bin string, storage []string) string {
	t.Helper()
	secret, err := exec.Command(bin, append([]string{"webhook-secret", "rotate", "-account", "demo"}, storage...)...).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(secret))
}

// awaitSucceeded waits up to 30 s for a success webhook of each of ids,
// and fails on any other.
func (h *hookReceiver) awaitSucceeded(t *testing.T, ids []string) {
	t.Helper()
	succeeded := map[string]bool{}
	for deadline := time.After(30 * time.Second); len(succeeded) < len(ids); {
		select {
		case body := <-h.bodies:
			var event client.WebhookEvent
			if err := json.Unmarshal(body, &event); err != nil || event.Type != "upscale.job.succeeded" || !slices.Contains(ids, event.Data.ID) {
				t.Fatalf("webhook %s: want one job's success", body)
			}
			succeeded[event.Data.ID] = true
		case <-deadline:
			t.Fatalf("webhooks of %d jobs of %d after 30 s: %v", len(succeeded), len(ids), succeeded)
		}
	}
}

// TestWorkerKilledMidJob runs the job form as a host that scales it out
// would: two API processes that run no jobs and worker processes, on one
// PostgreSQL database and one bucket, with the learned engine. A worker
// is killed (SIGKILL) while it runs a job, and another started: it hands
// the dead one's run back once its beat has lapsed (30 s; the run timeout
// is the default hour). Every job succeeds within two minutes of the
// death, charged once, its webhook sent, with nothing left in the bucket
// but the results.
func TestWorkerKilledMidJob(t *testing.T) {
	t.Parallel() // waits 30 s for the killed worker's beat to lapse
	bin := buildStandalone(t)
	stores := newSharedStores(t)
	origin := newButterflyOrigin(t)
	// The workers deliver the webhooks, to a receiver on loopback.
	engine := append(stores.flags, "-engine", "onnx", "-engine-timeout", "10s", "-allow-private-sources")
	var apis []*client.Client
	for range 2 {
		api := startStandalone(t, bin, append(engine, "-data", t.TempDir(), "-job-workers", "-1")...)
		defer api.stop(t)
		apis = append(apis, &client.Client{BaseURL: api.base, Key: api.key})
	}
	hooks := newHookReceiver(t, rotateSecret(t, bin, stores.admin(t)))
	ctx := context.Background()
	const jobs = 8 // of the demo account's 10 free images
	ids := make([]string, jobs)
	for i := range ids {
		job, err := apis[i%2].Submit(ctx, client.Request{ImageURL: origin + "/b.png", Scale: 2, WebhookURL: hooks.url})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = job.ID
	}

	// The only worker takes jobs; it is killed as soon as one runs.
	first := startWorker(t, bin, append(engine, "-data", t.TempDir(), "-process-id", "worker-a")...)
	killed := running(t, apis[0], ids, first.exited, &first.stderr)
	first.cmd.Process.Kill()
	<-first.exited
	killedAt := time.Now()
	second := startWorker(t, bin, append(engine, "-data", t.TempDir(), "-process-id", "worker-b")...)
	defer second.stop(t)

	results, handedBack := map[string]bool{}, time.Duration(0)
	for i, id := range ids {
		waitCtx, cancel := context.WithDeadline(ctx, killedAt.Add(2*time.Minute))
		job, err := apis[(i+1)%2].Wait(waitCtx, id)
		cancel()
		if err != nil || job.Status != string(upscale.JobSucceeded) {
			t.Fatalf("job %s: %+v, %v; want succeeded within 2 minutes of the kill\n%s", id, job, err, second.stderr.String())
		}
		if slices.Contains(killed, id) {
			if handedBack = max(handedBack, job.StartedAt.Sub(killedAt)); !job.StartedAt.After(killedAt) || handedBack > time.Minute {
				t.Errorf("job %s, running when its worker was killed at %v, last started at %v; want within a minute after", id, killedAt, job.StartedAt)
			}
		}
		key := stores.objectOf(job.Result.URL)
		if key == "" || job.Result.Via != string(upscale.PoolFree) {
			t.Fatalf("job %s: result %+v; want a link into the bucket, paid by the free pool", id, job.Result)
		}
		if size := upscaletest.ResultPNG(t, job.Result.URL).Bounds().Size(); size.X != 512 {
			t.Errorf("job %s: result %v, want 512 wide", id, size)
		}
		results[key] = true
	}
	t.Logf("%d jobs, %d running when the worker was killed: started again %v after the kill", jobs, len(killed), handedBack.Round(100*time.Millisecond))
	hooks.awaitSucceeded(t, ids)
	checkUsage(t, bin, stores.admin(t), jobs, 10-jobs)
	// Each job's source was deleted when it ended, and no run left a
	// result no job links to.
	if objects := stores.objects(t); !maps.Equal(objects, results) {
		t.Errorf("bucket holds %v; want only the %d results %v", objects, len(results), results)
	}
}

// TestWorkerRunsAnUpload: a job whose image was uploaded, submitted to
// an API process that runs no jobs, is run by a worker in another
// process on the same PostgreSQL database and bucket, which reads the
// upload from the bucket. The upload is kept there while the job waits
// and deleted once it has run; the job is charged once.
func TestWorkerRunsAnUpload(t *testing.T) {
	t.Parallel()
	bin := buildStandalone(t)
	stores := newSharedStores(t)
	api := startStandalone(t, bin, append(stores.flags, "-data", t.TempDir(), "-job-workers", "-1")...)
	defer api.stop(t)
	c := &client.Client{BaseURL: api.base, Key: api.key}
	ctx := context.Background()
	job, err := c.SubmitFile(ctx, bytes.NewReader(quality.SetFile(t, "Set5/butterfly.png")), client.Request{Scale: 2})
	if err != nil {
		t.Fatal(err)
	}
	if kept := stores.objects(t); len(kept) != 1 {
		t.Errorf("bucket holds %v while the job waits; want its upload alone", kept)
	}
	worker := startWorker(t, bin, append(stores.flags, "-data", t.TempDir())...)
	defer worker.stop(t)
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	done, err := c.Wait(waitCtx, job.ID)
	if err != nil || done.Status != string(upscale.JobSucceeded) || done.Result == nil {
		t.Fatalf("job: %+v, %v; want succeeded within a minute\nworker:\n%s", done, err, worker.stderr.String())
	}
	if size := upscaletest.ResultPNG(t, done.Result.URL).Bounds().Size(); size.X != 512 {
		t.Errorf("result %v, want the uploaded butterfly at twice its 256 pixels", size)
	}
	if objects := stores.objects(t); len(objects) != 1 || !objects[stores.objectOf(done.Result.URL)] {
		t.Errorf("bucket holds %v after the job; want its result alone", objects)
	}
	checkUsage(t, bin, stores.admin(t), 1, 9)
}

// TestWorkerDisplacedByTwin pauses a worker (SIGSTOP), starts a twin
// under its -process-id, which takes the ID over since the paused one's
// beat stands still, and resumes the first (SIGCONT): it stops working
// the queue at once and exits 1, saying why, for its supervisor to start
// it again; the twin works on. It used to stay up, taking jobs only to
// snooze them.
func TestWorkerDisplacedByTwin(t *testing.T) {
	t.Parallel() // waits on the paused worker's beats
	bin := buildStandalone(t)
	flags := []string{"-database-url", testservers.PostgresDatabase(t), "-public-url", "http://127.0.0.1:9", "-process-id", "w1"}
	first := startWorker(t, bin, append(flags, "-data", t.TempDir())...)
	if err := first.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Its banner comes once it holds the ID: two of the first's beats
	// (10 s) after it found the first's row.
	twin := startWorker(t, bin, append(flags, "-data", t.TempDir())...)
	defer twin.stop(t)
	if err := first.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	awaitDisplacedExit(t, "w1", first.exited, &first.stderr)
}

// TestServerDisplacedByTwin: as TestWorkerDisplacedByTwin, a server that
// runs no job workers (-job-workers -1, an API replica beside worker
// processes) but sends mail (-smtp-url), whose mail sender alone holds
// its -process-id. It used to exit 0, saying nothing, which a supervisor
// that restarts on failure leaves down.
func TestServerDisplacedByTwin(t *testing.T) {
	t.Parallel() // waits on the paused server's beats
	bin := buildStandalone(t)
	mail := testservers.Mailpit(t)
	flags := []string{"-database-url", testservers.PostgresDatabase(t), "-job-workers", "-1", "-process-id", "s1",
		"-smtp-url", "smtp://" + mail.SMTP, "-mail-from", "Upscale <no-reply@upscale.test>"}
	first := startStandalone(t, bin, append(flags, "-data", t.TempDir())...)
	if err := first.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Its banner comes once its mail sender holds the ID, 10 s on.
	twin := startStandalone(t, bin, append(flags, "-data", t.TempDir())...)
	defer twin.stop(t)
	if err := first.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	awaitDisplacedExit(t, "s1", first.exited, &first.stderr)
}

// awaitDisplacedExit waits for the process a twin displaced under
// processID to exit, and checks that it exits 1 saying why.
func awaitDisplacedExit(t *testing.T, processID string, exited <-chan error, stderr *bytes.Buffer) {
	t.Helper()
	select {
	case err := <-exited:
		var exit *exec.ExitError
		want := fmt.Sprintf("standalone: process ID %q is now held by another live process; exiting so that a supervisor restarts this one under its own ID", processID)
		if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(stderr.String(), want) {
			t.Errorf("the displaced process's exit: %v; want status 1, saying\n%s\ngot:\n%s", err, want, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the displaced process still runs 30 s after it resumed:\n%s", stderr.String())
	}
}

// running polls c for the jobs ids until some run, for a minute at most,
// and returns those, while the process that runs them has not exited.
func running(t *testing.T, c *client.Client, ids []string, exited <-chan error, stderr *bytes.Buffer) []string {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-exited:
			t.Fatalf("the process running the jobs exited: %v\n%s", err, stderr.String())
		default:
		}
		var running []string
		for _, id := range ids {
			if job, err := c.Job(context.Background(), id); err == nil && job.Status == string(upscale.JobRunning) {
				running = append(running, id)
			}
		}
		if len(running) > 0 {
			return running
		}
		if time.Now().After(deadline) {
			t.Fatalf("no job running a minute after the process started\n%s", stderr.String())
		}
	}
}

// TestStandaloneKilledMidJob: the standalone on SQLite, killed (SIGKILL)
// while it runs jobs and started again on its -data, hands its runs back
// at once: every job succeeds within two minutes of the restart, charged
// once, and its webhook is sent, although the run timeout is an hour.
func TestStandaloneKilledMidJob(t *testing.T) {
	bin := buildStandalone(t)
	data := t.TempDir()
	origin := newButterflyOrigin(t)
	flags := []string{"-data", data, "-engine", "onnx", "-engine-timeout", "10s"}
	first := startStandalone(t, bin, flags...)
	hooks := newHookReceiver(t, rotateSecret(t, bin, []string{"-data", data}))
	c := &client.Client{BaseURL: first.base, Key: first.key}
	ctx := context.Background()
	const jobs = 6 // of the demo account's 10 free images
	ids := make([]string, jobs)
	for i := range ids {
		job, err := c.Submit(ctx, client.Request{ImageURL: origin + "/b.png", Scale: 2, WebhookURL: hooks.url})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = job.ID
	}
	killed := running(t, c, ids, first.exited, &first.stderr)
	first.cmd.Process.Kill()
	<-first.exited

	restarted := startStandalone(t, bin, flags...)
	restartedAt := time.Now()
	c = &client.Client{BaseURL: restarted.base, Key: restarted.key}
	for _, id := range ids {
		waitCtx, cancel := context.WithDeadline(ctx, restartedAt.Add(2*time.Minute))
		job, err := c.Wait(waitCtx, id)
		cancel()
		if err != nil || job.Status != string(upscale.JobSucceeded) {
			t.Fatalf("job %s (running when killed: %v): %+v, %v; want succeeded within 2 minutes of the restart\n%s",
				id, slices.Contains(killed, id), job, err, restarted.stderr.String())
		}
	}
	t.Logf("%d jobs, %d running when killed: all succeeded %v after the restart", jobs, len(killed), time.Since(restartedAt).Round(100*time.Millisecond))
	hooks.awaitSucceeded(t, ids)
	restarted.stop(t)
	checkUsage(t, bin, []string{"-data", data}, jobs, 10-jobs)
}

// TestJobFormOnRealStores runs the job form's flows through the
// standalone on SQLite with result files, and on PostgreSQL with S3, River
// in both: refusals at submission create no job, the quota is judged at
// submission, queued and running jobs are canceled without a charge, and
// wait=N answers inline; the ledger and the stores hold exactly what the
// one success left. An API process that runs no jobs takes the
// submissions, a worker process runs them.
func TestJobFormOnRealStores(t *testing.T) {
	bin := buildStandalone(t)
	for _, tc := range []struct {
		name string
		// stores returns the storage flags of the servers and of the
		// admin subcommands, and the keys of the results and sources the
		// stores hold.
		stores func(t *testing.T) (flags, admin []string, kept func() []string)
	}{
		{"SQLite", func(t *testing.T) ([]string, []string, func() []string) {
			data := t.TempDir()
			return []string{"-data", data}, []string{"-data", data}, func() []string { return dataFiles(t, filepath.Join(data, "outputs")) }
		}},
		{"PostgreSQL", func(t *testing.T) ([]string, []string, func() []string) {
			stores := newSharedStores(t)
			return append(stores.flags, "-data", t.TempDir()), stores.admin(t), func() []string { return slices.Collect(maps.Keys(stores.objects(t))) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			storage, admin, kept := tc.stores(t)
			// Sources are the server's own samples, so the address policy
			// stays on and refuses loopback, for sources and webhooks.
			api := startStandalone(t, bin, append(storage, "-engine", "onnx", "-job-workers", "-1", "-allow-private-sources=false")...)
			defer api.stop(t)
			c := &client.Client{BaseURL: api.base, Key: api.key}
			photo := client.Request{ImageURL: api.base + "/samples/photo.png"}

			for _, tc := range []struct {
				req    client.Request
				status int
				code   string
			}{
				{client.Request{ImageURL: "http://127.0.0.1:9/a.png"}, http.StatusBadRequest, "source_forbidden"},
				{client.Request{ImageURL: photo.ImageURL, WebhookURL: "http://127.0.0.1:9/hooks"}, http.StatusBadRequest, "invalid_webhook_url"},
			} {
				if _, err := c.Submit(ctx, tc.req); !isProblem(err, tc.status, tc.code) {
					t.Errorf("submit %+v: %v; want %d %s", tc.req, err, tc.status, tc.code)
				}
			}
			// With no worker, jobs wait, each holding one of the ten free
			// images: the eleventh is refused at submission.
			var queued []string
			for range 10 {
				j, err := c.Submit(ctx, photo)
				if err != nil {
					t.Fatal(err)
				}
				queued = append(queued, j.ID)
			}
			if _, err := c.Submit(ctx, photo); !isProblem(err, http.StatusTooManyRequests, "quota_exhausted") {
				t.Errorf("an eleventh submission: %v; want 429 quota_exhausted", err)
			}
			for _, id := range queued {
				if j, err := c.Cancel(ctx, id); err != nil || j.Status != string(upscale.JobCanceled) {
					t.Fatalf("cancel queued job %s: %+v, %v", id, j, err)
				}
			}
			checkUsage(t, bin, admin, 0, 10)

			w := startWorker(t, bin, append(storage, "-engine", "onnx", "-public-url", api.base)...)
			defer w.stop(t)
			// A small image within wait=30 is answered as the request
			// would have been.
			req, _ := http.NewRequest(http.MethodPost, api.base+"/api/v1/upscale", strings.NewReader(`{"imageUrl": "`+photo.ImageURL+`", "scale": 2}`))
			req.Header.Set("Authorization", "Bearer "+api.key)
			req.Header.Set("Prefer", "respond-async, wait=30")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var inline client.Response
			json.NewDecoder(resp.Body).Decode(&inline)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || inline.Via != string(upscale.PoolFree) {
				t.Fatalf("wait=30: %d %+v; want 200 from the free pool\nworker:\n%s", resp.StatusCode, inline, w.stderr.String())
			}
			if size := upscaletest.ResultPNG(t, inline.URL).Bounds().Size(); size.X != 512 {
				t.Errorf("inline result %v, want 512 wide", size)
			}

			// ×4 runs two learned passes: canceled while it runs, it stops.
			big := photo
			big.Scale = 4
			j, err := c.Submit(ctx, big)
			if err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(time.Minute); j.Status != string(upscale.JobRunning); time.Sleep(20 * time.Millisecond) {
				if j, err = c.Job(ctx, j.ID); err != nil || time.Now().After(deadline) || j.Done() {
					t.Fatalf("job %+v, %v; want it running", j, err)
				}
			}
			if j, err = c.Cancel(ctx, j.ID); err != nil || j.Status != string(upscale.JobCanceled) || j.Result != nil {
				t.Fatalf("cancel a running job: %+v, %v; want canceled, without a result", j, err)
			}
			checkUsage(t, bin, admin, 1, 9)
			if got := kept(); len(got) != 1 {
				t.Errorf("the stores hold %q; want only the inline result", got)
			}
		})
	}
}

// isProblem reports whether err is the API's problem status, code.
func isProblem(err error, status int, code string) bool {
	var p *client.Error
	return errors.As(err, &p) && p.Status == status && p.Code == code
}

// dataFiles returns the files dirstore keeps under dir, without their
// metadata or its own hidden files (the link secret).
func dataFiles(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasSuffix(path, ".meta") && !strings.HasPrefix(d.Name(), ".") {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}
