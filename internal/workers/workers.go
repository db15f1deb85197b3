// Package workers runs the in-memory queues' workers: a fixed number of
// goroutines that take items until stopped, and drain or cut short at
// the stop.
package workers

import (
	"context"
	"sync"
)

// Start runs the in-memory queues' workers (MemoryJobQueue's and
// MemoryWebhookQueue's): concurrency of them, each of which takes an item
// with the context its work gets (take waits, and says false once stopping
// is closed), works it, and takes the next, until the stop it returns is
// called: stop closes stopping, lets the workers finish until drain is
// done, then calls cutShort, which has their work's contexts done, and
// returns once every worker has returned.
func Start[T any](concurrency int, take func(stopping <-chan struct{}) (T, context.Context, bool), work func(context.Context, T), cutShort func()) func(drain context.Context) error {
	stopping := make(chan struct{})
	var workers sync.WaitGroup
	for range concurrency {
		workers.Go(func() {
			for {
				item, ctx, ok := take(stopping)
				if !ok {
					return
				}
				work(ctx, item)
			}
		})
	}
	var once sync.Once
	return func(drain context.Context) error {
		once.Do(func() { close(stopping) })
		ended := make(chan struct{})
		go func() {
			workers.Wait()
			close(ended)
		}()
		select {
		case <-ended:
			return nil
		case <-drain.Done():
		}
		cutShort()
		<-ended
		return nil
	}
}

// WaitToTake calls take until it takes something, waiting for wake
// between calls; false once stopping is closed.
func WaitToTake(stopping, wake <-chan struct{}, take func() bool) bool {
	for {
		select {
		case <-stopping:
			return false
		default:
		}
		if take() {
			return true
		}
		select {
		case <-stopping:
			return false
		case <-wake:
		}
	}
}
