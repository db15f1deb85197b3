package riverqueue

import (
	"context"

	"github.com/riverqueue/river/rivertype"

	"github.com/upscalekit/upscale/internal/periodic"
)

// Crash ends q's process as SIGKILL would, for the conformance suite: it
// beats no more and its River clients take no more jobs, while its runs
// stay as they stand, until the test's end frees them.
func Crash[TTx any](q *Queue[TTx]) {
	l := q.live
	l.turning.Lock()
	defer l.turning.Unlock()
	l.beating.Stop()
	l.mu.Lock()
	l.watchdog.Stop() // a dead process stops nothing
	l.mu.Unlock()
	stopped, stop := context.WithCancel(context.Background())
	stop()
	for client := range l.working {
		client.Stop(stopped) // stops fetching; returns at once
	}
}

// Pause stops q's beats and its watchdog, as SIGSTOP stops its process's
// timers; its River clients fetch on, so a test pauses it with no job
// queued. resume beats at once, as the beat due meanwhile does after
// SIGCONT, and on.
func Pause[TTx any](q *Queue[TTx]) (resume func()) {
	l := q.live
	l.turning.Lock()
	defer l.turning.Unlock()
	l.beating.Stop()
	l.mu.Lock()
	l.watchdog.Stop()
	l.mu.Unlock()
	return func() {
		l.turning.Lock()
		defer l.turning.Unlock()
		l.beat()
		l.beating = periodic.Start(l.interval(), l.beat)
	}
}

// Working is the Stopped channels of the River clients q works with
// (Work, Deliver, SendMail), those whose stops have not yet returned:
// each is closed once its client fetches and runs no more.
func Working[TTx any](q *Queue[TTx]) []<-chan struct{} {
	l := q.live
	l.turning.Lock()
	defer l.turning.Unlock()
	var stopped []<-chan struct{}
	for client := range l.working {
		stopped = append(stopped, client.Stopped())
	}
	return stopped
}

// JobRow is River's row of the job riverID, as q's database holds it.
func JobRow[TTx any](ctx context.Context, q *Queue[TTx], riverID int64) (*rivertype.JobRow, error) {
	return q.client.JobGet(ctx, riverID)
}
