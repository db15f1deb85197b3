package libvips_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/h2non/bimg"
	"github.com/upscalekit/upscale"
	vips "github.com/upscalekit/upscale/engine/internal/libvips"
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
						_, err := engine.Upscale(context.Background(), src, upscale.Params{Scale: scale, ImageType: upscale.Photo, Denoise: level})
						return err
					}).Report(b, "")
				})
			}
		}
	}
}

// BenchmarkVersusPlain times the plain libvips enlargement the peers run
// (bimg's Process with Enlarge: vips_affine, bicubic, on 8-bit samples,
// JPEG quality 90) and this engine on the same 1024² JPEG, one image at a
// time, each iteration running every path once in a rotating order so
// that all of them meet the same load. It reports milliseconds per image
// for each path and each path's ratio to the plain enlargement.
func BenchmarkVersusPlain(b *testing.B) {
	src := enginebench.PhotoJPEG(b, 1024)
	engine := vips.New(vips.Options{})
	for _, scale := range []int{2, 4} {
		paths := []enginebench.Path{{Name: "plain", Run: func() error {
			_, err := bimg.NewImage(src).Process(bimg.Options{Width: 1024 * scale, Height: 1024 * scale, Enlarge: true, Quality: 90})
			return err
		}}}
		for _, p := range []struct {
			name      string
			imageType upscale.ImageType
			level     upscale.Denoise
		}{{"photo-none", upscale.Photo, upscale.DenoiseNone}, {"photo-max", upscale.Photo, upscale.DenoiseMax}, {"anime-none", upscale.Anime, upscale.DenoiseNone}} {
			opts := upscale.Params{Scale: scale, ImageType: p.imageType, Denoise: p.level}
			paths = append(paths, enginebench.Path{Name: p.name, Run: func() error {
				_, err := engine.Upscale(context.Background(), src, opts)
				return err
			}})
		}
		b.Run(fmt.Sprintf("x%d", scale), func(b *testing.B) {
			total := enginebench.Interleave(b, paths)
			for j, p := range paths[1:] {
				b.ReportMetric(float64(total[j+1])/float64(total[0]), p.Name+"/plain")
			}
		})
	}
}
