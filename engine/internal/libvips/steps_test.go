package libvips

import (
	"context"
	"fmt"
	"testing"

	"github.com/h2non/bimg"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/internal/enginebench"
)

// BenchmarkSteps profiles the pipeline by adding one step at a time, in
// turn within each iteration: the difference between consecutive rows is
// what that step costs.
func BenchmarkSteps(b *testing.B) {
	src := enginebench.PhotoJPEG(b, 1024)
	meta, err := bimg.NewImage(src).Metadata()
	if err != nil {
		b.Fatal(err)
	}
	photo := recipeFor(upscale.Params{ImageType: upscale.Photo, Denoise: upscale.DenoiseNone})
	max := recipeFor(upscale.Params{ImageType: upscale.Photo, Denoise: upscale.DenoiseMax})
	steps := []struct {
		name string
		r    recipe
	}{
		{"1-nearest", recipe{interpolator: "nearest"}},
		{"2-bicubic", recipe{interpolator: "bicubic"}},
		{"3-sharpen", recipe{interpolator: "bicubic", sharpen: photo.sharpen, sharpenSigma: photo.sharpenSigma}},
		{"4-clamp", photo},
		{"5-denoise-max", max},
	}
	for _, scale := range []int{2, 4} {
		var paths []enginebench.Path
		for _, step := range steps {
			paths = append(paths, enginebench.Path{Name: step.name, Run: func() error {
				_, err := run(context.Background(), src, jpegFormat, geometry{scale: scale}, step.r, meta)
				return err
			}})
		}
		b.Run(fmt.Sprintf("x%d", scale), func(b *testing.B) { enginebench.Interleave(b, paths) })
	}
}
