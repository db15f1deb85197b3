package client_test

import (
	"bytes"
	"context"
	"errors"
	"image/png"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/client"
	"github.com/upscalekit/upscale/upscaletest"
)

// gatedEngine holds each image until gate closes.
type gatedEngine struct {
	upscaletest.PixelUpscaler
	gate chan struct{}
}

func (u gatedEngine) Upscale(ctx context.Context, src []byte, p upscale.Params) (upscale.Image, error) {
	select {
	case <-u.gate:
	case <-ctx.Done():
		return upscale.Image{}, ctx.Err()
	}
	return u.PixelUpscaler.Upscale(ctx, src, p)
}

// TestJobCalls: against the real handler, Submit queues a job (its lost
// answer retried into the same job), Wait returns it succeeded and charged
// once, Cancel cancels a queued one, and an unknown job is job_not_found.
func TestJobCalls(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a job that never ends fails the test, not the run
	defer cancel()
	keys := upscale.NewMemoryKeyStore()
	keys.AddKey(ctx, key, "acme")
	ledger := upscale.NewMemoryLedger(upscale.LedgerOptions{})
	ledger.PutAccount(ctx, upscale.Account{ID: "acme", Plan: upscale.Plan{Name: "free", MonthlyImages: 5, MaxFileBytes: 1 << 20}})
	var sample bytes.Buffer
	png.Encode(&sample, upscaletest.TestImage(8, 8))
	var api http.Handler
	var lose atomic.Int32 // answers to lose, as a broken connection would
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && lose.Add(-1) >= 0 {
			api.ServeHTTP(httptest.NewRecorder(), r)
			http.Error(w, "bad gateway", http.StatusBadGateway)
			return
		}
		api.ServeHTTP(w, r)
	}))
	defer srv.Close()
	blobs, err := upscale.NewMemoryBlobStore(upscale.MemoryBlobStoreOptions{BaseURL: srv.URL + "/results"})
	if err != nil {
		t.Fatal(err)
	}
	defer blobs.Close()
	engine := gatedEngine{gate: make(chan struct{})}
	h, err := upscale.New(upscale.Config{
		Keys: keys, Ledger: ledger, Upscaler: engine, Blobs: blobs, JobWorkers: 1, Capacity: upscale.Capacity{IdleRelease: -1},
		Fetch: upscale.FetchPolicy{BuiltinSources: map[string][]byte{"http://origin.test/a.png": sample.Bytes()}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.StartJobs(ctx); err != nil {
		t.Fatal(err)
	}
	var open sync.Once
	openGate := func() { open.Do(func() { close(engine.gate) }) }
	defer h.StopJobs(ctx)
	defer openGate() // before StopJobs, which waits for the run
	api = h.Middleware(http.NotFoundHandler())
	c := &client.Client{BaseURL: srv.URL, Key: key}

	lose.Store(1)
	first, err := c.Submit(ctx, client.Request{ImageURL: "http://origin.test/a.png", Scale: 4})
	// The lost answer's retry answers the job as it stands: the one
	// worker may have taken it.
	if err != nil || (first.Status != "queued" && first.Status != "running") || first.ID == "" {
		t.Fatalf("Submit = %+v, %v; want the job, queued or running", first, err)
	}
	second, err := c.Submit(ctx, client.Request{ImageURL: "http://origin.test/a.png"})
	if err != nil || second.Status != "queued" || second.Position == nil {
		t.Fatalf("Submit behind the first = %+v, %v; want it queued, with its position", second, err)
	}
	canceled, err := c.Cancel(ctx, second.ID)
	if err != nil || canceled.Status != "canceled" {
		t.Errorf("Cancel of a queued job = %+v, %v; want it canceled", canceled, err)
	}
	openGate()
	done, err := c.Wait(ctx, first.ID)
	if err != nil || done.Status != "succeeded" || done.Result == nil || done.Result.Via != "free_pool" || done.FinishedAt.IsZero() || done.Engine == "" {
		t.Fatalf("Wait = %+v, %v; want it succeeded, with its engine", done, err)
	}
	if b, _ := ledger.Balance(ctx, "acme"); b.Free != 4 {
		t.Errorf("free pool %d, want 4: one job charged once, the lost answer's retry the same job", b.Free)
	}
	_, err = c.Job(ctx, "job_unknown")
	if apiErr, ok := errors.AsType[*client.Error](err); !ok || apiErr.Code != "job_not_found" {
		t.Errorf("Job of an unknown ID: %v, want job_not_found", err)
	}
	third, err := c.Submit(ctx, client.Request{ImageURL: "http://origin.test/a.png", WebhookURL: "http://10.0.0.1/x"})
	if apiErr, ok := errors.AsType[*client.Error](err); !ok || apiErr.Code != "invalid_webhook_url" {
		t.Errorf("Submit with a webhook on a private address = %+v, %v; want invalid_webhook_url", third, err)
	}
}
