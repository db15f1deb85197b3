package riverqueue

import "context"

// Crash ends q's process as SIGKILL would, for the conformance suite: it
// beats no more and its River clients take no more jobs, while its runs
// stay as they stand. What the runs return once the test frees them is
// recorded as a run's return after its process's lapse would be.
func Crash[TTx any](q *Queue[TTx]) {
	l := q.live
	l.turning.Lock()
	defer l.turning.Unlock()
	l.beating.Stop()
	stopped, stop := context.WithCancel(context.Background())
	stop()
	for client := range l.working {
		client.Stop(stopped) // stops fetching; returns at once
	}
}
