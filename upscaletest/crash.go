package upscaletest

import (
	"bytes"
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
	const source = "https://images.test/a.png"
	body := `{"imageUrl": "` + source + `"}`
	type rig struct {
		clock        *Clock
		stores       ChargeStores
		dying, other *upscale.Handler
		blobs        *upscale.MemoryBlobStore
		lease        time.Duration
		// worker starts a third replica, which works the replicas' jobs.
		worker func()
	}
	// setup returns a rig whose dying replica's stores are wrapped by wrap.
	setup := func(t *testing.T, wrap func(ChargeStores) ChargeStores) rig {
		t.Helper()
		clock := NewClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
		stores := newStores(t, clock)
		ctx := context.Background()
		if err := stores.Ledger.PutAccount(ctx, upscale.Account{ID: "acme", Plan: FreePlan}); err != nil {
			t.Fatal(err)
		}
		keys := upscale.NewMemoryKeyStore()
		if err := keys.AddKey(ctx, "upk_crash_0123456789abcdef", "acme"); err != nil {
			t.Fatal(err)
		}
		blobs, err := upscale.NewMemoryBlobStore(upscale.MemoryBlobStoreOptions{BaseURL: "https://results.test/outputs", Now: clock.Now})
		Opened(t, blobs, err)
		jobs := upscale.NewMemoryJobQueue(upscale.MemoryJobQueueOptions{Now: clock.Now})
		replica := func(s ChargeStores, jobWorkers int) *upscale.Handler {
			// A ledger wrapped to freeze its commit holds no unit for a
			// job, so its replica answers every request as it runs.
			var replicaJobs upscale.JobQueue
			if _, holds := s.Ledger.(upscale.ReservationHolder); holds {
				replicaJobs = jobs
			}
			h, err := upscale.New(upscale.Config{
				Keys: keys, Ledger: s.Ledger, Upscaler: PixelUpscaler{}, Blobs: blobs, Idempotency: s.Idempotency,
				Jobs: replicaJobs, JobWorkers: jobWorkers,
				Fetch:         upscale.FetchPolicy{Timeout: time.Second, BuiltinSources: map[string][]byte{source: TestImagePNG(t, 8, 6)}},
				EngineTimeout: time.Second, ChargeTimeout: 200 * time.Millisecond,
				Capacity: upscale.Capacity{IdleRelease: -1}, Now: clock.Now, Logger: slog.New(slog.DiscardHandler),
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
		// The lease is twice Fetch.Timeout, EngineTimeout and ChargeTimeout.
		return rig{
			clock: clock, stores: stores, dying: replica(wrap(stores), -1), other: replica(stores, -1), blobs: blobs, lease: 4400 * time.Millisecond,
			worker: func() { replica(stores, 1) },
		}
	}
	// send sends the request with the key "order-17", preferring prefer.
	send := func(h *upscale.Handler, method, path, prefer string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, path, strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer upk_crash_0123456789abcdef")
		r.Header.Set("Idempotency-Key", `"order-17"`)
		if prefer != "" {
			r.Header.Set("Prefer", prefer)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	post := func(h *upscale.Handler) *httptest.ResponseRecorder {
		return send(h, http.MethodPost, "/api/v1/upscale", "")
	}
	charged := func(t *testing.T, s ChargeStores, want int64) {
		t.Helper()
		b, err := s.Ledger.Balance(context.Background(), "acme")
		if err != nil {
			t.Fatal(err)
		}
		if got := FreePlan.MonthlyImages - b.Free; got != want {
			t.Errorf("%d units charged, want %d", got, want)
		}
	}
	mustBeInFlight := func(t *testing.T, w *httptest.ResponseRecorder, leaseLeft time.Duration) {
		t.Helper()
		want := int64((leaseLeft + time.Second - 1) / time.Second)
		if w.Code != http.StatusConflict || w.Header().Get("Retry-After") != strconv.FormatInt(want, 10) {
			t.Errorf("retry within the lease: %d, Retry-After %q; want 409 with Retry-After %d, the lease left", w.Code, w.Header().Get("Retry-After"), want)
		}
	}
	// linkWorks reports whether the answer's link serves an image.
	linkWorks := func(t *testing.T, blobs *upscale.MemoryBlobStore, answer []byte) bool {
		t.Helper()
		var resp struct{ URL string }
		if err := json.Unmarshal(answer, &resp); err != nil || resp.URL == "" {
			t.Fatalf("answer %s has no url", answer)
		}
		w := httptest.NewRecorder()
		blobs.ServeHTTP(w, httptest.NewRequest(http.MethodGet, resp.URL, nil))
		return w.Code == http.StatusOK
	}

	// freezeBeforeCommit starts the request on the dying replica and
	// returns once it has prepared its answer and froze before its commit;
	// firstDone gets its answer once frozen.wake closes.
	freezeBeforeCommit := func(t *testing.T) (r rig, frozen *freezeOnCommit, firstDone chan *httptest.ResponseRecorder) {
		t.Helper()
		frozen = &freezeOnCommit{entered: make(chan struct{}), wake: make(chan struct{})}
		r = setup(t, func(s ChargeStores) ChargeStores {
			frozen.LedgerHarness = s.Ledger
			return ChargeStores{Ledger: frozen, Idempotency: s.Idempotency}
		})
		firstDone = make(chan *httptest.ResponseRecorder, 1)
		go func() { firstDone <- post(r.dying) }()
		<-frozen.entered
		return r, frozen, firstDone
	}

	t.Run("AfterTheCharge", func(t *testing.T) {
		// The dying replica commits the charge, then dies before it keeps
		// the answer.
		r := setup(t, func(s ChargeStores) ChargeStores {
			return ChargeStores{Ledger: s.Ledger, Idempotency: crashOnKeep{s.Idempotency}}
		})
		first := post(r.dying)
		if first.Code != http.StatusOK {
			t.Fatalf("the first request: %d %s", first.Code, first.Body)
		}
		r.clock.Advance(time.Second)
		mustBeInFlight(t, post(r.other), r.lease-time.Second)
		r.clock.Advance(r.lease)
		for range 2 {
			w := post(r.other)
			if w.Code != http.StatusOK || w.Header().Get("Idempotent-Replayed") != "true" || !bytes.Equal(w.Body.Bytes(), first.Body.Bytes()) {
				t.Fatalf("retry after the lease: %d %s, want the first answer replayed: %s", w.Code, w.Body, first.Body)
			}
		}
		charged(t, r.stores, 1)
		r.clock.Advance(2 * time.Hour)
		if w := post(r.other); w.Code != http.StatusGone {
			t.Errorf("retry once the link expired: %d %s, want 410 result_expired", w.Code, w.Body)
		}
		charged(t, r.stores, 1)
	})

	t.Run("BeforeTheCharge", func(t *testing.T) {
		// The dying replica stored the result and prepared the answer, and
		// freezes before its commit; the other replica's retry after the
		// lease delivers that result, charged once. When the frozen one
		// wakes, its commit charges nothing more and its answer is the same.
		r, frozen, firstDone := freezeBeforeCommit(t)
		mustBeInFlight(t, post(r.other), r.lease)
		r.clock.Advance(r.lease + time.Second)
		w := post(r.other)
		if w.Code != http.StatusOK || w.Header().Get("Idempotent-Replayed") != "true" || !linkWorks(t, r.blobs, w.Body.Bytes()) {
			t.Fatalf("retry after the lease: %d %s, want the frozen request's result, replayed", w.Code, w.Body)
		}
		charged(t, r.stores, 1)
		close(frozen.wake)
		if first := <-firstDone; first.Code != http.StatusOK || !bytes.Equal(first.Body.Bytes(), w.Body.Bytes()) {
			t.Errorf("the frozen request, woken: %d %s, want the same answer %s", first.Code, first.Body, w.Body)
		}
		charged(t, r.stores, 1)
		if again := post(r.other); !bytes.Equal(again.Body.Bytes(), w.Body.Bytes()) {
			t.Errorf("a later retry: %s, want %s", again.Body, w.Body)
		}
	})

	t.Run("NeverCharged", func(t *testing.T) {
		// The dying replica freezes before its commit for longer than its
		// reservation and its link last: its unit went back, so the retry
		// runs again, and the woken request's commit finds nothing to
		// charge. The woken request is told to retry, which replays the
		// answer of the request that took its key over.
		r, frozen, firstDone := freezeBeforeCommit(t)
		r.clock.Advance(2 * time.Hour)
		w := post(r.other)
		if w.Code != http.StatusOK || w.Header().Get("Idempotent-Replayed") != "" || !linkWorks(t, r.blobs, w.Body.Bytes()) {
			t.Fatalf("retry after the frozen request's reservation expired: %d %s, want a new run", w.Code, w.Body)
		}
		charged(t, r.stores, 1)
		close(frozen.wake)
		if first := <-firstDone; first.Code != http.StatusConflict || first.Header().Get("Retry-After") != "1" {
			t.Errorf("the woken request: %d %s, Retry-After %q; want 409 with Retry-After 1", first.Code, first.Body, first.Header().Get("Retry-After"))
		}
		charged(t, r.stores, 1)
		if again := post(r.dying); again.Code != http.StatusOK || again.Header().Get("Idempotent-Replayed") != "true" || !bytes.Equal(again.Body.Bytes(), w.Body.Bytes()) {
			t.Errorf("its retry: %d %s, want the answer of the request that took the key over, replayed: %s", again.Code, again.Body, w.Body)
		}
		charged(t, r.stores, 1)
	})

	t.Run("JobSubmission", func(t *testing.T) {
		// The dying replica queues the job, then dies before it keeps its
		// 202: the retry after the lease gets the same job, and gives back
		// the unit and the source it took itself.
		r := setup(t, func(s ChargeStores) ChargeStores {
			return ChargeStores{Ledger: s.Ledger, Idempotency: crashOnKeep{s.Idempotency}}
		})
		submit := func(h *upscale.Handler) *httptest.ResponseRecorder {
			return send(h, http.MethodPost, "/api/v1/upscale", "respond-async")
		}
		first := submit(r.dying)
		location := first.Header().Get("Location")
		if first.Code != http.StatusAccepted || location == "" {
			t.Fatalf("the first submission: %d %s", first.Code, first.Body)
		}
		r.clock.Advance(time.Second)
		mustBeInFlight(t, submit(r.other), r.lease-time.Second)
		r.clock.Advance(r.lease)
		for _, replayed := range []string{"", "true"} {
			w := submit(r.other)
			if w.Code != http.StatusAccepted || w.Header().Get("Location") != location || w.Header().Get("Idempotent-Replayed") != replayed {
				t.Fatalf("retry after the lease: %d at %q (replayed %q), want 202 at %s (replayed %q)",
					w.Code, w.Header().Get("Location"), w.Header().Get("Idempotent-Replayed"), location, replayed)
			}
		}
		charged(t, r.stores, 1) // held for the job
		if n := r.blobs.Len(); n != 1 {
			t.Errorf("%d items stored, want 1: the job's source, not the retry's", n)
		}
		if w := post(r.other); w.Code != http.StatusUnprocessableEntity {
			t.Errorf("the key sent without respond-async: %d %s, want 422: it names the job", w.Code, w.Body)
		}
		r.worker()
		var job upscale.Job
		for deadline := time.Now().Add(10 * time.Second); !job.Status.Done() && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if err := json.Unmarshal(send(r.other, http.MethodGet, location, "").Body.Bytes(), &job); err != nil {
				t.Fatal(err)
			}
		}
		if job.Status != upscale.JobSucceeded || !linkWorks(t, r.blobs, jsonOf(t, job.Result)) {
			t.Fatalf("the job: %+v, want it succeeded with a result that works", job)
		}
		charged(t, r.stores, 1)
	})
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
