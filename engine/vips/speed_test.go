package vips_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/engine/vips"
	"github.com/upscalekit/upscale/internal/enginebench"
)

// BenchmarkThroughput runs the engine alone in a loop (the floor) and the
// whole handler over HTTP (fetch from a loopback origin, enlarge, store in
// memory, answer) on a 1024×1024 JPEG. Each run of a row measures b.N
// images on both paths back to back and reports their ratio, so that the
// ratio compares two paths under the same load on a shared machine; the
// order alternates between runs, so that drift in that load favours
// neither path.
func BenchmarkThroughput(b *testing.B) {
	src := enginebench.PhotoJPEG(b, 1024)
	engine := vips.New(vips.Options{})
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/jpeg")
		w.Write(src)
	}))
	defer origin.Close()
	server := enginebench.NewServer(b, engine)
	defer server.Close()
	for _, scale := range []int{2, 4} {
		for _, concurrency := range []int{1, 2, 8} {
			opts := upscale.Options{Scale: scale, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone}
			body := fmt.Sprintf(`{"imageUrl": %q, "scale": %d, "imageType": "photo", "denoise": "none"}`, origin.URL+"/photo.jpg", scale)
			floor := func() error {
				_, err := engine.Upscale(context.Background(), src, opts)
				return err
			}
			handler := func() error { return enginebench.Post(server.URL, body) }
			handlerFirst := false
			b.Run(fmt.Sprintf("scale=%d/c=%d", scale, concurrency), func(b *testing.B) {
				var f, h enginebench.Measured
				if handlerFirst {
					h = enginebench.Measure(b, b.N, concurrency, handler)
					f = enginebench.Measure(b, b.N, concurrency, floor)
				} else {
					f = enginebench.Measure(b, b.N, concurrency, floor)
					h = enginebench.Measure(b, b.N, concurrency, handler)
				}
				if b.N > 1 { // not the single warm-up run testing makes first
					handlerFirst = !handlerFirst
				}
				f.Report(b, "floor-")
				h.Report(b, "handler-")
				b.ReportMetric(h.ImagesPerSecond/f.ImagesPerSecond, "handler/floor")
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
		src := enginebench.PhotoJPEG(b, side)
		scales := []int{8, 16}
		if side == 4096 {
			scales = []int{2}
		}
		for _, scale := range scales {
			for _, level := range []upscale.Denoise{upscale.DenoiseNone, upscale.DenoiseMax} {
				b.Run(fmt.Sprintf("%d/x%d/%s", side, scale, level), func(b *testing.B) {
					enginebench.Measure(b, b.N, 1, func() error {
						_, err := engine.Upscale(context.Background(), src, upscale.Options{Scale: scale, ImageType: upscale.Photo, Denoise: level})
						return err
					}).Report(b, "")
				})
			}
		}
	}
}
