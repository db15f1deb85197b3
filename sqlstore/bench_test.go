package sqlstore_test

import (
	"context"
	"errors"
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

// BenchmarkAuthenticate measures a request's key lookup on each engine,
// straight from the database and through an upscale.CachedKeyStore (its
// default 5 s TTL, so all but the first lookup are answered from memory),
// for a hot key and for a stream of unknown keys (each new, as in a flood
// of guesses: the cache cannot help those, and must not cost them much).
func BenchmarkAuthenticate(b *testing.B) {
	const key = "upk_bench_0123456789abcdef"
	for _, name := range []string{"SQLite", "PostgreSQL"} {
		for _, cached := range []bool{false, true} {
			s := open(b, engines[name](b), upscale.LedgerOptions{})
			ctx := context.Background()
			if err := s.PutAccount(ctx, upscale.Account{ID: "acme", Plan: upscale.Plan{Name: "free", MonthlyImages: 1}}); err != nil {
				b.Fatal(err)
			}
			if err := s.AddKey(ctx, key, "acme"); err != nil {
				b.Fatal(err)
			}
			var keys upscale.KeyStore = s
			mode := "direct"
			if cached {
				c := upscale.NewCachedKeyStore(s, upscale.CachedKeyStoreOptions{})
				b.Cleanup(func() { c.Close() })
				keys, mode = c, "cached"
			}
			b.Run(name+"/hot/"+mode, func(b *testing.B) {
				for b.Loop() {
					if _, err := keys.Authenticate(ctx, key); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(name+"/unknown/"+mode, func(b *testing.B) {
				for i := 0; b.Loop(); i++ {
					if _, err := keys.Authenticate(ctx, fmt.Sprintf("upk_bench_unknown_%012d", i)); !errors.Is(err, upscale.ErrUnauthorized) {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
