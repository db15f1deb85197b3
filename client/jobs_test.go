package client_test

import (
	"context"
	"errors"
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

// TestJobCalls: against the real handler, Submit queues a job (its lost
// answer retried into the same job), Wait returns it succeeded and charged
// once, Cancel cancels a queued one, and an unknown job is job_not_found.
func TestJobCalls(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a job that never ends fails the test, not the run
	defer cancel()
	var lose atomic.Int32 // answers to lose, as a broken connection would
	engine := upscaletest.GatedUpscaler{Gate: make(chan struct{})}
	api := newRealAPI(t, upscale.Config{Upscaler: engine, JobWorkers: 1}, func(api http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && lose.Add(-1) >= 0 {
				api.ServeHTTP(httptest.NewRecorder(), r)
				http.Error(w, "bad gateway", http.StatusBadGateway)
				return
			}
			api.ServeHTTP(w, r)
		})
	})
	h := api.handler
	if err := h.StartJobs(ctx); err != nil {
		t.Fatal(err)
	}
	var open sync.Once
	openGate := func() { open.Do(func() { close(engine.Gate) }) }
	defer h.StopJobs(ctx)
	defer openGate() // before StopJobs, which waits for the run
	c := &client.Client{BaseURL: api.url, Key: key}

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
	if b, _ := api.ledger.Balance(ctx, "acme"); b.Free != 4 {
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
