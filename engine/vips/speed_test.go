package vips_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/h2non/bimg"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/engine/vips"
)

// photoJPEG returns a side×side JPEG (quality 90) of Set14's baboon, whose
// fur is about as costly to encode as photos get.
func photoJPEG(tb testing.TB, side int) []byte {
	src, err := os.ReadFile("../../testdata/sr/Set14/baboon.png")
	if err != nil {
		tb.Fatal(err)
	}
	out, err := bimg.NewImage(src).Process(bimg.Options{Width: side, Height: side, Force: true, Enlarge: true, Type: bimg.JPEG, Quality: 90})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// measured is what one run of n images on one path took.
type measured struct {
	imagesPerSecond float64
	p50, p99        time.Duration
	peakRSS         int64 // how far the process's peak RSS rose, in bytes; -1 if unknown
}

// measure runs do n times on concurrency goroutines, and times them.
func measure(b *testing.B, n, concurrency int, do func() error) measured {
	peak := startPeakRSS(b)
	var next atomic.Int64
	latencies := make([]time.Duration, n)
	var wg sync.WaitGroup
	start := time.Now()
	for range concurrency {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				t := time.Now()
				if err := do(); err != nil {
					b.Error(err)
					return
				}
				latencies[i] = time.Since(t)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(latencies)
	m := measured{
		imagesPerSecond: float64(n) / elapsed.Seconds(),
		p50:             latencies[n/2],
		p99:             latencies[min(n-1, n*99/100)],
		peakRSS:         -1,
	}
	if grew, ok := peak(); ok {
		m.peakRSS = grew
	}
	return m
}

// report gives m as the benchmark's metrics, each unit prefixed by path
// ("floor-", "handler-") when two paths share one benchmark.
func (m measured) report(b *testing.B, path string) {
	b.ReportMetric(m.imagesPerSecond, path+"images/s")
	b.ReportMetric(float64(m.p50.Microseconds())/1000, path+"p50-ms")
	b.ReportMetric(float64(m.p99.Microseconds())/1000, path+"p99-ms")
	if m.peakRSS >= 0 {
		b.ReportMetric(float64(m.peakRSS)/(1<<20), path+"peakRSS-MiB")
	}
}

// BenchmarkThroughput runs the engine alone in a loop (the floor) and the
// whole handler over HTTP (fetch from a loopback origin, enlarge, store in
// memory, answer) on a 1024×1024 JPEG. Each run of a row measures b.N
// images on both paths back to back and reports their ratio, so that the
// ratio compares two paths under the same load on a shared machine; the
// order alternates between runs, so that drift in that load favours
// neither path.
func BenchmarkThroughput(b *testing.B) {
	src := photoJPEG(b, 1024)
	engine := vips.New(vips.Options{})
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/jpeg")
		w.Write(src)
	}))
	defer origin.Close()
	server := newBenchServer(b, engine)
	defer server.Close()
	for _, scale := range []int{2, 4} {
		for _, concurrency := range []int{1, 2, 8} {
			opts := upscale.Options{Scale: scale, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone}
			body := fmt.Sprintf(`{"imageUrl": %q, "scale": %d, "imageType": "photo", "denoise": "none"}`, origin.URL+"/photo.jpg", scale)
			floor := func() error {
				_, err := engine.Upscale(context.Background(), src, opts)
				return err
			}
			handler := func() error { return post(server.URL, body) }
			handlerFirst := false
			b.Run(fmt.Sprintf("scale=%d/c=%d", scale, concurrency), func(b *testing.B) {
				var f, h measured
				if handlerFirst {
					h = measure(b, b.N, concurrency, handler)
					f = measure(b, b.N, concurrency, floor)
				} else {
					f = measure(b, b.N, concurrency, floor)
					h = measure(b, b.N, concurrency, handler)
				}
				if b.N > 1 { // not the single warm-up run testing makes first
					handlerFirst = !handlerFirst
				}
				f.report(b, "floor-")
				h.report(b, "handler-")
				b.ReportMetric(h.imagesPerSecond/f.imagesPerSecond, "handler/floor")
			})
		}
	}
}

// BenchmarkLargeScale enlarges a 512×512 JPEG ×8 and ×16, and a 4096×4096
// one ×2, one at a time, without denoising and with the spec's default
// (max), whose filter works on a copy of the source.
func BenchmarkLargeScale(b *testing.B) {
	engine := vips.New(vips.Options{})
	for _, side := range []int{512, 4096} {
		src := photoJPEG(b, side)
		scales := []int{8, 16}
		if side == 4096 {
			scales = []int{2}
		}
		for _, scale := range scales {
			for _, level := range []upscale.Denoise{upscale.DenoiseNone, upscale.DenoiseMax} {
				b.Run(fmt.Sprintf("%d/x%d/%s", side, scale, level), func(b *testing.B) {
					measure(b, b.N, 1, func() error {
						_, err := engine.Upscale(context.Background(), src, upscale.Options{Scale: scale, ImageType: upscale.Photo, Denoise: level})
						return err
					}).report(b, "")
				})
			}
		}
	}
}

func newBenchServer(b *testing.B, engine upscale.Upscaler) *httptest.Server {
	ctx := context.Background()
	keys := upscale.NewMemoryKeyStore()
	ledger := upscale.NewMemoryLedger(upscale.LedgerOptions{})
	if err := errors.Join(
		ledger.PutAccount(ctx, upscale.Account{ID: "bench", Plan: upscale.Plan{Name: "unlimited", Paid: true, Unlimited: true, MaxFileBytes: 50 << 20}}),
		keys.Add(ctx, "bench-key-0123456789", "bench"),
	); err != nil {
		b.Fatal(err)
	}
	mux := http.NewServeMux()
	server := httptest.NewServer(mux)
	blobs, err := upscale.NewMemoryBlobStore(upscale.MemoryBlobStoreOptions{BaseURL: server.URL + "/results", CleanupInterval: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	handler, err := upscale.New(upscale.Config{Keys: keys, Ledger: ledger, Upscaler: engine, Blobs: blobs, AllowPrivateNetworks: true, LinkTTL: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	mux.Handle("/api/v1/upscale", handler)
	mux.Handle("/results/", blobs)
	return server
}

func post(base, body string) error {
	req, _ := http.NewRequest(http.MethodPost, base+"/api/v1/upscale", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer bench-key-0123456789")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", resp.Status)
	}
	return nil
}
