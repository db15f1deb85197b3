package upscaletest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
)

// testJobQueueCancels checks TestJobQueue's cancels: of queued jobs, of
// jobs waiting to run again and of running ones, each settled.
func testJobQueueCancels(t *testing.T, s jobQueueSuite) {
	ctx, start, newQueue, job, submit, result := context.Background(), s.start, s.newQueue, s.job, s.submit, jobResult
	t.Run("CancelQueued", func(t *testing.T) {
		q := newQueue(t, NewClock(start))
		id := submit(t, q, job("canceled", "a"))["canceled"]
		got, err := q.Cancel(ctx, "a", id)
		if err != nil || got.Status != upscale.JobCanceled || !got.Started.IsZero() {
			t.Fatalf("Cancel = %+v, %v; want canceled, never started", got, err)
		}
		ran, settled := make(chan string, 2), make(chan string, 2)
		workWith(t, q, 1, settles(ran, settled))
		waitDone(t, q, "a", submit(t, q, job("after", "a"))["after"])
		if name := <-ran; name != "after" {
			t.Errorf("the canceled job ran")
		}
		awaitSettled(t, q, settled, "canceled", id)
	})

	t.Run("CanceledRunRetriesItsSettlement", func(t *testing.T) {
		q := newQueue(t, NewClock(start))
		id := submit(t, q, job("unsettled", "a"))["unsettled"]
		started, settled := make(chan struct{}), make(chan string, 2)
		workWith(t, q, 1, upscale.JobWorker{
			Run: func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
				close(started)
				<-ctx.Done()
				return upscale.JobOutcome{Retry: true} // its settlement failed
			},
			Settle: settles(nil, settled).Settle,
		})
		<-started
		if _, err := q.Cancel(ctx, "a", id); err != nil {
			t.Fatal(err)
		}
		awaitSettled(t, q, settled, "unsettled", id)
	})

	t.Run("CancelWaitingToRunAgain", func(t *testing.T) {
		q := newQueue(t, NewClock(start))
		retried := submit(t, q, job("retried", "a"))["retried"]
		runs := make(chan string, 4)
		halt := work(t, q, 1, func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
			runs <- j.Source
			return upscale.JobOutcome{Retry: true}
		})
		if name := <-runs; name != "retried" {
			t.Fatalf("ran %s", name)
		}
		halt()
		stopped := submit(t, q, job("stopped", "a"))["stopped"]
		cutShort(t, q, func(context.Context) {}, func(context.Context) {})
		for name, id := range map[string]string{"retried": retried, "stopped": stopped} {
			got, err := q.Cancel(ctx, "a", id)
			if err != nil || got.Status != upscale.JobCanceled || got.Started.IsZero() {
				t.Errorf("Cancel(%s) waiting to run again = %+v, %v; want canceled at once, started before", name, got, err)
			}
		}
		settled := make(chan string, 2)
		workWith(t, q, 1, settles(runs, settled))
		waitDone(t, q, "a", submit(t, q, job("after", "a"))["after"])
		if name := <-runs; name != "after" {
			t.Errorf("%s ran again after it was canceled", name)
		}
		for range 2 {
			select {
			case got := <-settled:
				if !strings.HasSuffix(got, " "+upscale.ErrJobCanceled.Error()) {
					t.Errorf("settled %q, want the cause ErrJobCanceled", got)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the canceled jobs were not settled")
			}
		}
	})

	t.Run("CancelRunning", func(t *testing.T) {
		q := newQueue(t, NewClock(start))
		id := submit(t, q, job("running", "a"))["running"]
		started, sawDone := make(chan struct{}), make(chan error, 1)
		work(t, q, 1, func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
			close(started)
			<-ctx.Done()
			sawDone <- context.Cause(ctx)
			p := upscale.Problem{Status: 504, Code: "timeout"} // what a run cut short reports
			return upscale.JobOutcome{Problem: &p}
		})
		<-started
		if _, err := q.Cancel(ctx, "a", id); err != nil {
			t.Fatal(err)
		}
		select {
		case cause := <-sawDone:
			if !errors.Is(cause, upscale.ErrJobCanceled) {
				t.Errorf("the run's context ended with cause %v, want ErrJobCanceled", cause)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the run's context was not done after Cancel")
		}
		if got := waitDone(t, q, "a", id); got.Status != upscale.JobCanceled || got.Problem != nil || got.Started.IsZero() {
			t.Errorf("after Cancel: %+v, want canceled, started, no problem", got)
		}
	})

	t.Run("ResultOutlivesCancel", func(t *testing.T) {
		q := newQueue(t, NewClock(start))
		id := submit(t, q, job("paid", "a"))["paid"]
		started, release := make(chan struct{}), make(chan struct{})
		work(t, q, 1, func(ctx context.Context, j upscale.Job) upscale.JobOutcome {
			close(started)
			<-release // charged already when Cancel comes
			return upscale.JobOutcome{Result: result(j.Source)}
		})
		<-started
		if _, err := q.Cancel(ctx, "a", id); err != nil {
			t.Fatal(err)
		}
		close(release)
		if got := waitDone(t, q, "a", id); got.Status != upscale.JobSucceeded || got.Result == nil {
			t.Errorf("a run that returned its result after Cancel: %+v, want succeeded", got)
		}
		if got, err := q.Cancel(ctx, "a", id); err != nil || got.Status != upscale.JobSucceeded {
			t.Errorf("Cancel of a finished job = %+v, %v; want it as it ended", got, err)
		}
	})
}
