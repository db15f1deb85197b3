// Package periodic runs a background job at a fixed interval until it is
// stopped, for the stores' sweepers.
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
