package sqlstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/upscalekit/upscale"
)

// BenchmarkReserveCommit measures one charged request's ledger work (a
// reservation and its commit) on each engine, with 1, 8 and 64 goroutines
// charging one unlimited account at once: the contended case, as every
// request of a busy customer touches the same row.
func BenchmarkReserveCommit(b *testing.B) {
	for _, name := range []string{"SQLite", "PostgreSQL"} {
		for _, workers := range []int{1, 8, 64} {
			b.Run(fmt.Sprintf("%s/goroutines=%d", name, workers), func(b *testing.B) {
				s := open(b, engines[name](b), upscale.LedgerOptions{})
				ctx := context.Background()
				unlimited := upscale.Plan{Name: "unlimited", Paid: true, Unlimited: true}
				if err := s.PutAccount(ctx, upscale.Account{ID: "busy", Plan: unlimited}); err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				var wg sync.WaitGroup
				next := make(chan struct{})
				for range workers {
					wg.Go(func() {
						for range next {
							r, err := s.Reserve(ctx, "busy", false)
							if err == nil {
								err = s.Commit(ctx, r.ID)
							}
							if err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				for range b.N {
					next <- struct{}{}
				}
				close(next)
				wg.Wait()
			})
		}
	}
}
