package prommetrics_test

import (
	"bytes"
	"context"
	"image/png"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/prommetrics"
	"github.com/upscalekit/upscale/upscaletest"
)

const key = "upk_test_metrics_0123456789"

// newMeteredHandler is the real handler on memory stores and
// PixelUpscaler, reporting to the registry it returns with a pedantic
// check of every metric. Account acme holds key and monthly free images;
// cfg says the rest, and its Now, when set, is the stores' clock too.
func newMeteredHandler(t *testing.T, monthly int64, cfg upscale.Config) (*prometheus.Registry, *upscale.Handler) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	metrics, err := prommetrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	keys := upscale.NewMemoryKeyStore()
	keys.AddKey(ctx, key, "acme")
	ledger := upscale.NewMemoryLedger(upscale.LedgerOptions{Now: cfg.Now})
	ledger.PutAccount(ctx, upscale.Account{ID: "acme", Plan: upscale.Plan{Name: "free", MonthlyImages: monthly, MaxFileBytes: 5 << 20}})
	blobs, err := upscale.NewMemoryBlobStore(upscale.MemoryBlobStoreOptions{BaseURL: "http://localhost/outputs", Now: cfg.Now})
	upscaletest.Opened(t, blobs, err)
	cfg.Keys, cfg.Ledger, cfg.Blobs, cfg.Upscaler = keys, ledger, blobs, upscaletest.PixelUpscaler{}
	cfg.Metrics, cfg.Logger = metrics, slog.New(slog.DiscardHandler)
	h, err := upscale.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return reg, h
}

// TestMetrics: after one request of each kind, every metric is there with
// the right labels and values, and the registry passes Prometheus's lint.
func TestMetrics(t *testing.T) {
	var source bytes.Buffer
	png.Encode(&source, upscaletest.TestImage(16, 12))
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(source.Bytes()) }))
	defer origin.Close()
	ctx := context.Background()
	// The handler's clock runs, so that the job's run takes time, and
	// jumps past the job count's caching.
	var ahead atomic.Int64
	reg, h := newMeteredHandler(t, 2, upscale.Config{
		Capacity: upscale.Capacity{EngineConcurrency: 2, QueueLength: 3},
		Fetch:    upscale.FetchPolicy{AllowPrivateNetworks: true},
		Now:      func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) },
	})
	if err := h.StartJobs(ctx); err != nil {
		t.Fatal(err)
	}
	defer h.StopJobs(ctx)
	send := func(method, key, prefer string, wantStatus int) {
		t.Helper()
		r := httptest.NewRequest(method, "/api/v1/upscale", strings.NewReader(`{"imageUrl": "`+origin.URL+`/a.png"}`))
		r.Header.Set("Authorization", "Bearer "+key)
		if prefer != "" {
			r.Header.Set("Prefer", prefer)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != wantStatus {
			t.Fatalf("%s: status %d, want %d: %s", method, w.Code, wantStatus, w.Body)
		}
	}
	send(http.MethodPost, key, "", http.StatusOK)
	send(http.MethodPost, key, "respond-async, wait=10", http.StatusOK) // a job, answered inline
	send(http.MethodPost, key, "", http.StatusTooManyRequests)          // the two free images are spent
	send(http.MethodPost, "upk_test_unknown_0123456789", "", http.StatusUnauthorized)
	send(http.MethodGet, key, "", http.StatusMethodNotAllowed)

	ahead.Add(int64(time.Second)) // past the job count's second of caching, which the job's submission took
	// The job's run is recorded as it ends, after its answer.
	var families []*dto.MetricFamily
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var err error
		if families, err = reg.Gather(); err != nil {
			t.Fatal(err)
		}
		if _, ended := value(families, "upscale_job_duration_seconds", map[string]string{"phase": "run"}); ended || time.Now().After(deadline) {
			break
		}
	}
	checks := []struct {
		name   string
		labels map[string]string
		want   float64 // a counter's or gauge's value, a histogram's count
	}{
		{"upscale_requests_total", map[string]string{"code": "ok", "pool": "free_pool"}, 2},
		{"upscale_requests_total", map[string]string{"code": "quota_exhausted", "pool": "none"}, 1},
		{"upscale_requests_total", map[string]string{"code": "unauthorized", "pool": "none"}, 1},
		{"upscale_requests_total", map[string]string{"code": "method_not_allowed", "pool": "none"}, 1},
		{"upscale_request_duration_seconds", nil, 5},
		{"upscale_step_duration_seconds", map[string]string{"step": "fetch"}, 2},
		{"upscale_step_duration_seconds", map[string]string{"step": "queue"}, 2},
		{"upscale_step_duration_seconds", map[string]string{"step": "engine"}, 2},
		{"upscale_step_duration_seconds", map[string]string{"step": "store"}, 2},
		{"upscale_source_bytes_total", nil, float64(2 * source.Len())},
		{"upscale_job_duration_seconds", map[string]string{"status": "succeeded", "phase": "wait"}, 1},
		{"upscale_job_duration_seconds", map[string]string{"status": "succeeded", "phase": "run"}, 1},
		{"upscale_queued_jobs", nil, 0},
		{"upscale_running_jobs", nil, 0},
		{"upscale_oldest_queued_job_age_seconds", nil, 0},
		{"upscale_queued_job_source_megapixels", nil, 0},
		{"upscale_in_flight_requests", nil, 0},
		{"upscale_job_waiters", nil, 0},
		{"upscale_queued_requests", nil, 0},
		{"upscale_engine_requests", nil, 0},
		{"upscale_admission_capacity_requests", nil, 5},
		{"upscale_memory_in_use_bytes", nil, 0},
		{"upscale_memory_budget_bytes", nil, 1 << 30},
	}
	for _, c := range checks {
		if got, ok := value(families, c.name, c.labels); !ok || got != c.want {
			t.Errorf("%s%v = %v (found: %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	if got, _ := value(families, "upscale_output_bytes_total", nil); got <= float64(2*source.Len()) {
		t.Errorf("upscale_output_bytes_total = %v, want more than the sources' %d bytes", got, 2*source.Len())
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", err, problems)
	}
}

// TestQueuedWork: the gauges an autoscaler reads count the queued jobs,
// the oldest one's wait and their source megapixels.
func TestQueuedWork(t *testing.T) {
	var source bytes.Buffer
	png.Encode(&source, upscaletest.TestImage(1000, 500)) // half a megapixel
	clock := upscaletest.NewClock(time.Now())
	reg, h := newMeteredHandler(t, 5, upscale.Config{
		JobWorkers: -1, // the jobs stay queued
		Fetch:      upscale.FetchPolicy{BuiltinSources: map[string][]byte{"https://img.test/a.png": source.Bytes()}},
		Now:        clock.Now,
	})
	for range 3 {
		r := httptest.NewRequest(http.MethodPost, "/api/v1/upscale", strings.NewReader(`{"imageUrl": "https://img.test/a.png"}`))
		r.Header.Set("Authorization", "Bearer "+key)
		r.Header.Set("Prefer", "respond-async")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusAccepted {
			t.Fatalf("submit: %d %s", w.Code, w.Body)
		}
	}
	clock.Advance(90 * time.Second) // also past the count's second of caching
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{
		"upscale_queued_jobs": 3, "upscale_oldest_queued_job_age_seconds": 90, "upscale_queued_job_source_megapixels": 1.5,
	} {
		if got, ok := value(families, name, nil); !ok || got != want {
			t.Errorf("%s = %v (found: %v), want %v", name, got, ok, want)
		}
	}
}

// TestNewRefusesASecondHandlerOnOneRegistry: two sets of the same names
// on one registry would clash; New says so at once, and two handlers
// each wrapped with a label of their own are fine.
func TestNewRefusesASecondHandlerOnOneRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := prommetrics.New(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := prommetrics.New(reg); err == nil {
		t.Error("a second New on the same registry succeeded")
	}
	labelled := prometheus.NewRegistry()
	for _, name := range []string{"public", "internal"} {
		if _, err := prommetrics.New(prometheus.WrapRegistererWith(prometheus.Labels{"handler": name}, labelled)); err != nil {
			t.Errorf("New for handler %q with a distinguishing label: %v", name, err)
		}
	}
}

// value finds the metric of family name whose labels include labels.
func value(families []*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if want, ok := labels[l.GetName()]; ok && want != l.GetValue() {
					continue metrics
				}
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue(), true
			case m.Gauge != nil:
				return m.GetGauge().GetValue(), true
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}
