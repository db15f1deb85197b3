package vips_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/engine/vips"
	"github.com/upscalekit/upscale/internal/enginebench"
)

// BenchmarkThroughput runs the engine alone and the whole handler on a
// 1024×1024 JPEG (see enginebench.Throughput).
func BenchmarkThroughput(b *testing.B) {
	enginebench.Throughput(b, vips.New(vips.Options{}), enginebench.PhotoJPEG(b, 1024), []int{2, 4}, []int{1, 2, 8})
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
