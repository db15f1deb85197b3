package upscaletest

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
)

// testCrashedRequests checks the retries of a request answered as it runs
// whose first replica died: after its charge and before it kept its
// answer, or frozen before its commit, woken within its reservation or
// after it. Each is charged once.
func testCrashedRequests(t *testing.T, s crashSuite) {
	t.Run("AfterTheCharge", func(t *testing.T) {
		// The dying replica commits the charge, then dies before it keeps
		// the answer.
		r := s.diesBeforeKeep(t)
		first := r.post(r.dying)
		if first.Code != http.StatusOK {
			t.Fatalf("the first request: %d %s", first.Code, first.Body)
		}
		r.clock.Advance(time.Second)
		mustBeInFlight(t, r.post(r.other), r.lease-time.Second)
		r.clock.Advance(r.lease)
		for range 2 {
			w := r.post(r.other)
			if w.Code != http.StatusOK || w.Header().Get("Idempotent-Replayed") != "true" || !bytes.Equal(w.Body.Bytes(), first.Body.Bytes()) {
				t.Fatalf("retry after the lease: %d %s, want the first answer replayed: %s", w.Code, w.Body, first.Body)
			}
		}
		r.charged(t, 1)
		r.clock.Advance(2 * time.Hour)
		if w := r.post(r.other); w.Code != http.StatusGone {
			t.Errorf("retry once the link expired: %d %s, want 410 result_expired", w.Code, w.Body)
		}
		r.charged(t, 1)
	})

	t.Run("BeforeTheCharge", func(t *testing.T) {
		// The dying replica stored the result and prepared the answer, and
		// freezes before its commit; the other replica's retry after the
		// lease delivers that result, charged once. When the frozen one
		// wakes, its commit charges nothing more and its answer is the same.
		r, frozen, firstDone := s.freezeBeforeCommit(t)
		mustBeInFlight(t, r.post(r.other), r.lease)
		r.clock.Advance(r.lease + time.Second)
		w := r.post(r.other)
		if w.Code != http.StatusOK || w.Header().Get("Idempotent-Replayed") != "true" || !r.linkWorks(t, w.Body.Bytes()) {
			t.Fatalf("retry after the lease: %d %s, want the frozen request's result, replayed", w.Code, w.Body)
		}
		r.charged(t, 1)
		close(frozen.wake)
		if first := <-firstDone; first.Code != http.StatusOK || !bytes.Equal(first.Body.Bytes(), w.Body.Bytes()) {
			t.Errorf("the frozen request, woken: %d %s, want the same answer %s", first.Code, first.Body, w.Body)
		}
		r.charged(t, 1)
		if again := r.post(r.other); !bytes.Equal(again.Body.Bytes(), w.Body.Bytes()) {
			t.Errorf("a later retry: %s, want %s", again.Body, w.Body)
		}
	})

	t.Run("NeverCharged", func(t *testing.T) {
		// The dying replica freezes before its commit for longer than its
		// reservation and its link last: its unit went back, so the retry
		// runs again, and the woken request's commit finds nothing to
		// charge. The woken request is told to retry, which replays the
		// answer of the request that took its key over.
		r, frozen, firstDone := s.freezeBeforeCommit(t)
		r.clock.Advance(2 * time.Hour)
		w := r.post(r.other)
		if w.Code != http.StatusOK || w.Header().Get("Idempotent-Replayed") != "" || !r.linkWorks(t, w.Body.Bytes()) {
			t.Fatalf("retry after the frozen request's reservation expired: %d %s, want a new run", w.Code, w.Body)
		}
		r.charged(t, 1)
		close(frozen.wake)
		if first := <-firstDone; first.Code != http.StatusConflict || first.Header().Get("Retry-After") != "1" {
			t.Errorf("the woken request: %d %s, Retry-After %q; want 409 with Retry-After 1", first.Code, first.Body, first.Header().Get("Retry-After"))
		}
		r.charged(t, 1)
		if again := r.post(r.dying); again.Code != http.StatusOK || again.Header().Get("Idempotent-Replayed") != "true" || !bytes.Equal(again.Body.Bytes(), w.Body.Bytes()) {
			t.Errorf("its retry: %d %s, want the answer of the request that took the key over, replayed: %s", again.Code, again.Body, w.Body)
		}
		r.charged(t, 1)
	})
}

// testCrashedJobSubmission checks the retries of a job submission whose
// first replica died after it queued the job: they get that job, and the
// unit and source are taken for it once.
func testCrashedJobSubmission(t *testing.T, s crashSuite) {
	t.Run("JobSubmission", func(t *testing.T) {
		// The dying replica queues the job, then dies before it keeps its
		// 202: the retry after the lease gets the same job, and gives back
		// the unit and the source it took itself.
		r := s.diesBeforeKeep(t)
		first := r.submit(r.dying)
		location := first.Header().Get("Location")
		if first.Code != http.StatusAccepted || location == "" {
			t.Fatalf("the first submission: %d %s", first.Code, first.Body)
		}
		r.clock.Advance(time.Second)
		mustBeInFlight(t, r.submit(r.other), r.lease-time.Second)
		r.clock.Advance(r.lease)
		for _, replayed := range []string{"", "true"} {
			w := r.submit(r.other)
			if w.Code != http.StatusAccepted || w.Header().Get("Location") != location || w.Header().Get("Idempotent-Replayed") != replayed {
				t.Fatalf("retry after the lease: %d at %q (replayed %q), want 202 at %s (replayed %q)",
					w.Code, w.Header().Get("Location"), w.Header().Get("Idempotent-Replayed"), location, replayed)
			}
		}
		r.charged(t, 1) // held for the job
		if n := r.blobs.Len(); n != 1 {
			t.Errorf("%d items stored, want 1: the job's source, not the retry's", n)
		}
		if w := r.post(r.other); w.Code != http.StatusUnprocessableEntity {
			t.Errorf("the key sent without respond-async: %d %s, want 422: it names the job", w.Code, w.Body)
		}
		r.startWorker(t)
		if job := r.awaitJob(t, location); job.Status != upscale.JobSucceeded || !r.linkWorks(t, jsonOf(t, job.Result)) {
			t.Fatalf("the job: %+v, want it succeeded with a result that works", job)
		}
		r.charged(t, 1)
	})
}
