package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/client"
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

func newSharedStores(t *testing.T) sharedStores {
	t.Helper()
	ctx := context.Background()
	database := testservers.PostgresDatabase(t)
	server := testservers.S3(t)
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_ACCESS_KEY_ID", server.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", server.SecretKey)
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

// TestWorkerKilledMidJob runs the job form as a host that scales it out
// would: two API processes that run no jobs and two worker processes, on
// one PostgreSQL database and one bucket, with the learned engine. A
// worker is killed (SIGKILL) while it runs a job and started again; River
// gives the job back after its run timeout, and every job succeeds,
// charged once, with nothing left in the bucket but the results.
func TestWorkerKilledMidJob(t *testing.T) {
	bin := buildStandalone(t)
	stores := newSharedStores(t)
	origin := newButterflyOrigin(t)
	// A run is given back 26 s after it started if its worker is alive,
	// and River rescues a dead worker's a minute after that.
	engine := append(stores.flags, "-engine", "onnx", "-engine-timeout", "10s", "-job-run-timeout", "26s")
	var apis []*client.Client
	for range 2 {
		api := startStandalone(t, bin, append(engine, "-data", t.TempDir(), "-job-workers", "-1")...)
		defer api.stop(t)
		apis = append(apis, &client.Client{BaseURL: api.base, Key: api.key})
	}
	ctx := context.Background()
	const jobs = 8 // of the demo account's 10 free images
	ids := make([]string, jobs)
	for i := range ids {
		job, err := apis[i%2].Submit(ctx, client.Request{ImageURL: origin + "/b.png", Scale: 2})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = job.ID
	}

	// The only worker takes jobs; it is killed as soon as one runs.
	first := startWorker(t, bin, append(engine, "-data", t.TempDir())...)
	var killed []string
	for deadline := time.Now().Add(time.Minute); len(killed) == 0; time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-first.exited:
			t.Fatalf("the worker exited: %v\n%s", err, first.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no job running a minute after the worker started\n%s", first.stderr.String())
		}
		for _, id := range ids {
			if job, err := apis[0].Job(ctx, id); err == nil && job.Status == string(upscale.JobRunning) {
				killed = append(killed, id)
			}
		}
	}
	first.cmd.Process.Kill()
	<-first.exited
	killedAt := time.Now()
	for range 2 { // the killed one restarted, and a second
		w := startWorker(t, bin, append(engine, "-data", t.TempDir())...)
		defer w.stop(t)
	}

	results := map[string]bool{}
	for i, id := range ids {
		waitCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		job, err := apis[(i+1)%2].Wait(waitCtx, id)
		cancel()
		if err != nil || job.Status != string(upscale.JobSucceeded) {
			t.Fatalf("job %s: %+v, %v; want succeeded", id, job, err)
		}
		if slices.Contains(killed, id) && !job.StartedAt.After(killedAt) {
			t.Errorf("job %s, running when its worker was killed, last started at %v, before the kill at %v", id, job.StartedAt, killedAt)
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
	checkUsage(t, bin, stores.admin(t), jobs, 10-jobs)
	// Each job's source was deleted when it ended, and no run left a
	// result no job links to.
	if objects := stores.objects(t); !maps.Equal(objects, results) {
		t.Errorf("bucket holds %v; want only the %d results %v", objects, len(results), results)
	}
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
