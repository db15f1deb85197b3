// Package periodic runs a background job at a fixed interval until it is
// stopped, for the stores' sweepers, and gates the sweeps of the stores
// that sweep as they are used.
package periodic

import (
	"sync"
	"time"
)

// Job is a function running every interval on its own goroutine.
type Job struct {
	stop, done chan struct{}
	once       sync.Once
}

// Start runs run every interval, first after one interval. A nonpositive
// interval starts nothing; Stop still works.
func Start(interval time.Duration, run func()) *Job {
	j := &Job{stop: make(chan struct{}), done: make(chan struct{})}
	if interval <= 0 {
		close(j.done)
		return j
	}
	go func() {
		defer close(j.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-j.stop:
				return
			case <-tick.C:
				run()
			}
		}
	}()
	return j
}

// Stop ends the job, waiting for a run in progress; calling it again does
// nothing.
func (j *Job) Stop() {
	j.once.Do(func() {
		close(j.stop)
		<-j.done
	})
}

// Gate lets a store that sweeps as it is used, instead of on a
// goroutine that would need stopping, sweep at most once a minute. Its
// owner's lock guards it.
type Gate struct{ last time.Time }

// Due reports whether a minute has passed since the last sweep, and if so
// counts this one.
func (g *Gate) Due(now time.Time) bool {
	if now.Sub(g.last) < time.Minute {
		return false
	}
	g.last = now
	return true
}
