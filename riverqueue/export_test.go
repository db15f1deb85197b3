package riverqueue

import "context"

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
