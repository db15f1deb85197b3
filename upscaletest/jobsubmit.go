package upscaletest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
)

// testJobQueueSubmit checks TestJobQueue's submissions: a job kept as it
// was given, once per submission, counted, in its priority's turn.
func testJobQueueSubmit(t *testing.T, s jobQueueSuite) {
	ctx, start, newQueue, job, submit, result := context.Background(), s.start, s.newQueue, s.job, s.submit, jobResult
	t.Run("SubmitAndGet", func(t *testing.T) {
		q := newQueue(t, NewClock(start))
		want := job("one", "a")
		id := submit(t, q, want)["one"]
		got, err := q.Get(ctx, "a", id)
		if err != nil {
			t.Fatal(err)
		}
		if got.ID != id || got.AccountID != want.AccountID || got.KeyID != want.KeyID || got.Params != want.Params || got.Source != want.Source ||
			got.Reservation != want.Reservation || got.Pool != want.Pool || got.Webhook != want.Webhook || !got.Created.Equal(want.Created) ||
			!got.Expires.Equal(want.Expires) || got.Status != upscale.JobQueued || !got.Started.IsZero() {
			t.Errorf("Get = %+v, want %+v, queued", got, want)
		}
		if !strings.HasPrefix(id, "job_") || strings.Contains(id, "/") {
			t.Errorf("ID %q: want one that begins with job_ and holds no /", id)
		}
		other := submit(t, q, job("two", "a"))["two"]
		if other == id {
			t.Errorf("two jobs with the ID %q", id)
		}
		for _, tc := range []struct{ account, id string }{{"b", id}, {"a", "no-such-job"}, {"a", id + "x"}} {
			if _, err := q.Get(ctx, tc.account, tc.id); !errors.Is(err, upscale.ErrNotFound) {
				t.Errorf("Get(%q, %q): %v, want ErrNotFound", tc.account, tc.id, err)
			}
			if _, err := q.Cancel(ctx, tc.account, tc.id); !errors.Is(err, upscale.ErrNotFound) {
				t.Errorf("Cancel(%q, %q): %v, want ErrNotFound", tc.account, tc.id, err)
			}
		}
		if got, _ := q.Get(ctx, "a", id); got.Status != upscale.JobQueued {
			t.Errorf("after another account's Cancel: %s, want queued", got.Status)
		}
	})

	t.Run("SubmitOnce", func(t *testing.T) {
		q := newQueue(t, NewClock(start))
		named := func(name, account, submission string) upscale.Job {
			j := job(name, account)
			j.Submission = submission
			return j
		}
		// Concurrent Submits of one Submission keep one job, whoever's.
		kept := make([]upscale.Job, 4)
		var submits sync.WaitGroup
		for i := range kept {
			submits.Go(func() {
				var err error
				if kept[i], err = q.Submit(ctx, named(fmt.Sprintf("try-%d", i), "a", "key-1")); err != nil {
					t.Errorf("Submit: %v", err)
				}
			})
		}
		submits.Wait()
		for _, k := range kept[1:] {
			if k.ID != kept[0].ID || k.Source != kept[0].Source || k.Reservation != kept[0].Reservation {
				t.Fatalf("Submits of one Submission kept %+v and %+v, want one job", kept[0], k)
			}
		}
		got, err := q.Get(ctx, "a", kept[0].ID)
		if err != nil || got.Source != kept[0].Source || got.Reservation != "reservation-"+got.Source {
			t.Fatalf("Get(%s) = %+v, %v, want the kept job", kept[0].ID, got, err)
		}
		// Another Submission, another account, or none: a job each.
		ids := map[string]bool{kept[0].ID: true}
		for _, j := range []upscale.Job{named("other-key", "a", "key-2"), named("other-account", "b", "key-1"), named("none-1", "a", ""), named("none-2", "a", "")} {
			id := submit(t, q, j)[j.Source]
			if ids[id] {
				t.Errorf("Submit(%s) returned the job %s again", j.Source, id)
			}
			ids[id] = true
		}
		// A job that has ended is still the Submission's.
		if _, err := q.Cancel(ctx, "a", kept[0].ID); err != nil {
			t.Fatal(err)
		}
		again, err := q.Submit(ctx, named("after-cancel", "a", "key-1"))
		if err != nil || again.ID != kept[0].ID || again.Status != upscale.JobCanceled {
			t.Errorf("Submit after the job was canceled = %+v, %v, want the canceled job %s", again, err, kept[0].ID)
		}
	})

	t.Run("SubmitOnceExpires", func(t *testing.T) {
		clock := NewClock(start)
		q := newQueue(t, clock)
		old := job("old", "a")
		old.Submission, old.Expires = "key", start.Add(time.Minute)
		oldID := submit(t, q, old)["old"]
		clock.Advance(2 * time.Minute)
		fresh := job("fresh", "a")
		fresh.Submission = "key"
		got, err := q.Submit(ctx, fresh)
		if err != nil || got.ID == oldID || got.Source != "fresh" || got.Status != upscale.JobQueued {
			t.Errorf("Submit after the Submission's job expired = %+v, %v, want a new job", got, err)
		}
	})

	t.Run("Counts", func(t *testing.T) {
		q := newQueue(t, NewClock(start))
		counter, ok := q.(upscale.JobCounter)
		if !ok {
			t.Skip("not a JobCounter")
		}
		first, second, third := job("one", "a"), job("two", "a"), job("three", "b")
		first.SourcePixels, second.SourcePixels, third.SourcePixels = 100, 20, 3
		second.Created, third.Created = start.Add(time.Second), start.Add(2*time.Second)
		submit(t, q, first, second, third)
		if n, err := counter.CountAccountJobs(ctx, "a"); err != nil || n != 2 {
			t.Errorf("CountAccountJobs(a) = %d, %v; want 2 queued", n, err)
		}
		release := make(chan struct{})
		started := make(chan struct{}, 3)
		work(t, q, 1, func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
			started <- struct{}{}
			<-release
			return upscale.JobOutcome{Result: result(j.Source)}
		})
		<-started
		// A count may lag the state by River's own bookkeeping; it
		// settles within moments.
		var counts upscale.JobCounts
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			var err error
			if counts, err = counter.CountJobs(ctx); err != nil {
				t.Fatal(err)
			}
			if counts.Queued == 2 && counts.Running == 1 {
				break
			}
		}
		n, err := counter.CountAccountJobs(ctx, "a")
		close(release)
		if counts.Queued != 2 || counts.Running != 1 || counts.QueuedPixels != 23 || !counts.OldestQueued.Equal(second.Created) {
			t.Errorf("CountJobs = %+v; want 2 queued of 23 pixels, the oldest submitted at %v, and 1 running", counts, second.Created)
		}
		if err != nil || n != 2 {
			t.Errorf("CountAccountJobs(a) with one running = %d, %v; want 2", n, err)
		}
	})

	t.Run("Priority", func(t *testing.T) {
		q := newQueue(t, NewClock(start))
		var jobs []upscale.Job
		for _, spec := range []struct {
			name, account string
			priority      int
		}{{"a-1", "a", 1}, {"a-2", "a", 2}, {"a-3", "a", 3}, {"b-1", "b", 1}, {"a-4", "a", upscale.JobPriorities}, {"c-2", "c", 2}} {
			j := job(spec.name, spec.account)
			j.Priority = spec.priority
			jobs = append(jobs, j)
		}
		ids := submit(t, q, jobs...)
		want := []string{"a-1", "b-1", "a-2", "c-2", "a-3", "a-4"}
		account := func(name string) string { return name[:1] }
		for position, name := range want {
			got, err := q.Get(ctx, account(name), ids[name])
			if err != nil || got.Position == nil || *got.Position != position || got.Priority == 0 {
				t.Errorf("Get(%s) = %+v, %v; want it queued at position %d", name, got, err, position)
			}
		}
		var mu sync.Mutex
		var order []string
		work(t, q, 1, func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
			mu.Lock()
			order = append(order, j.Source)
			mu.Unlock()
			return upscale.JobOutcome{Result: result(j.Source)}
		})
		for _, j := range jobs {
			if got := waitDone(t, q, j.AccountID, ids[j.Source]); got.Position != nil {
				t.Errorf("%s ended with a position, %d", j.Source, *got.Position)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if fmt.Sprint(order) != fmt.Sprint(want) {
			t.Errorf("ran %v, want %v: every job of a lower priority first, oldest first within one", order, want)
		}
	})
}
