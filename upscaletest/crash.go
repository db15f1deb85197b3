package upscaletest

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
)

// ChargeStores are the stores an Idempotency-Key's charge and answer go
// to: a ledger and an idempotency store, which may be one value (as
// sqlstore.Store is both) and must start empty.
type ChargeStores struct {
	Ledger      LedgerHarness
	Idempotency upscale.IdempotencyStore
}

// TestChargedOnceAcrossCrash checks, through two Handlers sharing the
// stores as replicas do, that a request sent with an Idempotency-Key is
// charged once however its first replica dies: a retry on the other
// replica gets 409 with the Retry-After of the lease left, then, once the
// lease has ended, the dead request's answer if it was charged (or
// result_expired once its link has expired) and a fresh run if it never
// was. newStores must return stores on clock (the ledger's
// LedgerOptions.Now, the idempotency store's clock).
func TestChargedOnceAcrossCrash(t *testing.T, newStores func(t *testing.T, clock *Clock) ChargeStores) {
	s := crashSuite{newStores: newStores}
	testCrashedRequests(t, s)
	testCrashedJobSubmission(t, s)
}

// crashSuite is what TestChargedOnceAcrossCrash's checks share: the
// stores under test, made anew for each.
type crashSuite struct {
	newStores func(t *testing.T, clock *Clock) ChargeStores
}

// The one request the suite sends, again and again: an upscale of
// crashSource, which the replicas fetch from memory, by crashKey's
// account, "acme".
const (
	crashSource = "https://images.test/a.png"
	crashBody   = `{"imageUrl": "` + crashSource + `"}`
	crashKey    = "upk_crash_0123456789abcdef"
)

// crashRig is two replicas sharing one clock, the stores under test and
// the stores every replica has in memory (keys, blobs, the job queue).
// The dying replica reaches the shared stores through a wrapper that
// kills or freezes its process; the other one gets the retries.
type crashRig struct {
	clock        *Clock
	stores       ChargeStores
	keys         *upscale.MemoryKeyStore
	blobs        *upscale.MemoryBlobStore
	jobs         *upscale.MemoryJobQueue
	dying, other *upscale.Handler
	lease        time.Duration
}

// setup returns a rig whose dying replica's stores are wrapped by wrap.
func (s crashSuite) setup(t *testing.T, wrap func(ChargeStores) ChargeStores) *crashRig {
	t.Helper()
	clock := NewClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
	stores := s.newStores(t, clock)
	ctx := context.Background()
	if err := stores.Ledger.PutAccount(ctx, upscale.Account{ID: "acme", Plan: FreePlan}); err != nil {
		t.Fatal(err)
	}
	keys := upscale.NewMemoryKeyStore()
	if err := keys.AddKey(ctx, crashKey, "acme"); err != nil {
		t.Fatal(err)
	}
	blobs, err := upscale.NewMemoryBlobStore(upscale.MemoryBlobStoreOptions{BaseURL: "https://results.test/outputs", Now: clock.Now})
	Opened(t, blobs, err)
	// The lease is twice Fetch.Timeout, EngineTimeout and ChargeTimeout.
	r := &crashRig{
		clock: clock, stores: stores, keys: keys, blobs: blobs,
		jobs:  upscale.NewMemoryJobQueue(upscale.MemoryJobQueueOptions{Now: clock.Now}),
		lease: 4400 * time.Millisecond,
	}
	r.dying, r.other = r.replica(t, wrap(stores), -1), r.replica(t, stores, -1)
	return r
}

// diesBeforeKeep returns a rig whose dying replica's process is killed as
// it would keep an answer, after its charge or its job's submission.
func (s crashSuite) diesBeforeKeep(t *testing.T) *crashRig {
	t.Helper()
	return s.setup(t, func(stores ChargeStores) ChargeStores {
		return ChargeStores{Ledger: stores.Ledger, Idempotency: crashOnKeep{stores.Idempotency}}
	})
}

// freezeBeforeCommit starts the request on the dying replica and returns
// once it has prepared its answer and froze before its commit; firstDone
// gets its answer once frozen.wake closes.
func (s crashSuite) freezeBeforeCommit(t *testing.T) (r *crashRig, frozen *freezeOnCommit, firstDone chan *httptest.ResponseRecorder) {
	t.Helper()
	frozen = &freezeOnCommit{entered: make(chan struct{}), wake: make(chan struct{})}
	r = s.setup(t, func(stores ChargeStores) ChargeStores {
		frozen.LedgerHarness = stores.Ledger
		return ChargeStores{Ledger: frozen, Idempotency: stores.Idempotency}
	})
	firstDone = make(chan *httptest.ResponseRecorder, 1)
	go func() { firstDone <- r.post(r.dying) }()
	<-frozen.entered
	return r, frozen, firstDone
}

// replica starts a replica on stores and the rig's in-memory stores, with
// jobWorkers workers for the jobs, until t ends.
func (r *crashRig) replica(t *testing.T, stores ChargeStores, jobWorkers int) *upscale.Handler {
	t.Helper()
	// A ledger wrapped to freeze its commit holds no unit for a job, so
	// its replica answers every request as it runs.
	var jobs upscale.JobQueue
	if _, holds := stores.Ledger.(upscale.ReservationHolder); holds {
		jobs = r.jobs
	}
	h, err := upscale.New(upscale.Config{
		Keys: r.keys, Ledger: stores.Ledger, Upscaler: PixelUpscaler{}, Blobs: r.blobs, Idempotency: stores.Idempotency,
		Jobs: jobs, JobWorkers: jobWorkers,
		Fetch:         upscale.FetchPolicy{Timeout: time.Second, BuiltinSources: map[string][]byte{crashSource: TestImagePNG(t, 8, 6)}},
		EngineTimeout: time.Second, ChargeTimeout: 200 * time.Millisecond,
		Capacity: upscale.Capacity{IdleRelease: -1}, Now: r.clock.Now, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.StartJobs(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.StopJobs(context.Background()) })
	return h
}

// startWorker starts a third replica, which works the replicas' jobs.
func (r *crashRig) startWorker(t *testing.T) {
	t.Helper()
	r.replica(t, r.stores, 1)
}

// send sends the request to h with the key "order-17", preferring prefer.
func (r *crashRig) send(h *upscale.Handler, method, path, prefer string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(crashBody))
	req.Header.Set("Authorization", "Bearer "+crashKey)
	req.Header.Set("Idempotency-Key", `"order-17"`)
	if prefer != "" {
		req.Header.Set("Prefer", prefer)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// post sends the request to h, to be answered as it runs.
func (r *crashRig) post(h *upscale.Handler) *httptest.ResponseRecorder {
	return r.send(h, http.MethodPost, "/api/v1/upscale", "")
}

// submit sends the request to h as a job.
func (r *crashRig) submit(h *upscale.Handler) *httptest.ResponseRecorder {
	return r.send(h, http.MethodPost, "/api/v1/upscale", "respond-async")
}

// awaitJob polls the job at location through the other replica until it
// has ended, and returns it.
func (r *crashRig) awaitJob(t *testing.T, location string) upscale.Job {
	t.Helper()
	var job upscale.Job
	eventually(t, "the job at "+location+" ended", func() bool {
		if err := json.Unmarshal(r.send(r.other, http.MethodGet, location, "").Body.Bytes(), &job); err != nil {
			t.Fatal(err)
		}
		return job.Status.Done()
	})
	return job
}

// charged checks that acme has been charged want units in all.
func (r *crashRig) charged(t *testing.T, want int64) {
	t.Helper()
	b, err := r.stores.Ledger.Balance(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	if got := FreePlan.MonthlyImages - b.Free; got != want {
		t.Errorf("%d units charged, want %d", got, want)
	}
}

// linkWorks reports whether the answer's link serves an image.
func (r *crashRig) linkWorks(t *testing.T, answer []byte) bool {
	t.Helper()
	var resp struct{ URL string }
	if err := json.Unmarshal(answer, &resp); err != nil || resp.URL == "" {
		t.Fatalf("answer %s has no url", answer)
	}
	w := httptest.NewRecorder()
	r.blobs.ServeHTTP(w, httptest.NewRequest(http.MethodGet, resp.URL, nil))
	return w.Code == http.StatusOK
}

// mustBeInFlight checks that w is the 409 of a retry while the first
// request holds the key, whose Retry-After is leaseLeft in whole seconds,
// rounded up.
func mustBeInFlight(t *testing.T, w *httptest.ResponseRecorder, leaseLeft time.Duration) {
	t.Helper()
	want := int64((leaseLeft + time.Second - 1) / time.Second)
	if w.Code != http.StatusConflict || w.Header().Get("Retry-After") != strconv.FormatInt(want, 10) {
		t.Errorf("retry within the lease: %d, Retry-After %q; want 409 with Retry-After %d, the lease left", w.Code, w.Header().Get("Retry-After"), want)
	}
}

// jsonOf is v in JSON.
func jsonOf(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// crashOnKeep is an IdempotencyStore whose process dies when it would keep
// an answer: Keep fails, and nothing else is written.
type crashOnKeep struct{ upscale.IdempotencyStore }

func (crashOnKeep) Keep(context.Context, upscale.IdempotencyClaim, upscale.IdempotentAnswer) error {
	return errors.New("the process was killed")
}

// freezeOnCommit is a ledger whose process freezes in its first Commit
// until wake closes (a kill -STOP, a long pause), then carries on.
type freezeOnCommit struct {
	LedgerHarness
	entered, wake chan struct{}
	once          sync.Once
}

func (l *freezeOnCommit) Commit(ctx context.Context, reservationID string) error {
	froze := false
	l.once.Do(func() {
		froze = true
		close(l.entered)
		<-l.wake
	})
	if froze {
		ctx = context.WithoutCancel(ctx) // its deadline passed while it was frozen
	}
	return l.LedgerHarness.Commit(ctx, reservationID)
}
