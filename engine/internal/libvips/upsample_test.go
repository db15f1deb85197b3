package libvips

import (
	"context"
	"image"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/h2non/bimg"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/internal/quality"
)

// catmullRom is the reference: centred Catmull-Rom sampling, result
// coordinate X taking the source at (X + 0.5) / scale - 0.5, edges
// repeated, computed directly in float64.
func catmullRom(src *image.NRGBA, scale int) func(x, y, c int) float64 {
	w, h := src.Bounds().Dx(), src.Bounds().Dy()
	weights := func(t float64) [4]float64 {
		return [4]float64{
			((-0.5*t+1)*t - 0.5) * t,
			(1.5*t-2.5)*t*t + 1,
			((-1.5*t+2)*t + 0.5) * t,
			(0.5*t - 0.5) * t * t,
		}
	}
	clampTo := func(i, n int) int { return min(max(i, 0), n-1) }
	return func(x, y, c int) float64 {
		u, v := (float64(x)+0.5)/float64(scale)-0.5, (float64(y)+0.5)/float64(scale)-0.5
		i, j := int(math.Floor(u)), int(math.Floor(v))
		wx, wy := weights(u-float64(i)), weights(v-float64(j))
		var sum float64
		for b := range 4 {
			for a := range 4 {
				p := src.NRGBAAt(clampTo(i-1+a, w), clampTo(j-1+b, h))
				sum += wx[a] * wy[b] * float64([]uint8{p.R, p.G, p.B}[c])
			}
		}
		return sum
	}
}

// TestUpsampleIsCentredCatmullRom: the enlargement pass (upsample.c)
// computes centred Catmull-Rom, edges repeated, to within rounding, at
// every scale it takes.
func TestUpsampleIsCentredCatmullRom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	src := image.NewNRGBA(image.Rect(0, 0, 13, 9))
	for i := range src.Pix {
		src.Pix[i] = uint8(rng.IntN(256))
		if i%4 == 3 {
			src.Pix[i] = 255
		}
	}
	data := quality.EncodePNG(t, src)
	for _, scale := range []int{2, 3, 4, 8, 16} {
		out, err := run(context.Background(), data, pngFormat, geometry{scale: scale}, recipe{interpolator: "bicubic"}, bimg.ImageMetadata{})
		if err != nil {
			t.Fatal(err)
		}
		got := quality.Decode(t, out)
		want := catmullRom(src, scale)
		worst := 0.0
		for y := range got.H {
			for x := range got.W {
				for c, plane := range [][]float64{got.R, got.G, got.B} {
					ref := min(max(math.Round(want(x, y, c)), 0), 255)
					worst = max(worst, math.Abs(plane[y*got.W+x]-ref))
				}
			}
		}
		if worst > 1 {
			t.Errorf("×%d: differs from centred Catmull-Rom by up to %v grey levels", scale, worst)
		}
	}
}

// TestCleanSourceNotFiltered: a denoise level leaves a clean source as
// none does, byte for byte, and still filters a noisy one and a
// compressed JPEG.
func TestCleanSourceNotFiltered(t *testing.T) {
	lr := quality.Shrink(quality.LoadSet(t, "Set5")[1], 2)
	for _, tc := range []struct {
		source   quality.Degradation
		filtered bool
	}{{quality.Clean, false}, {quality.GaussianNoise(10), true}, {quality.JPEG(50), true}} {
		src := tc.source.Source(t, lr)
		var results [2][]byte
		for i, level := range []denoising{{}, denoiseLevels[upscale.DenoiseMax]} {
			meta, err := bimg.NewImage(src).Metadata()
			if err != nil {
				t.Fatal(err)
			}
			r := recipeFor(upscale.Params{Scale: 2, ImageType: upscale.Photo})
			r.denoise = level
			if results[i], err = run(context.Background(), src, pngFormat, geometry{scale: 2}, r, meta); err != nil {
				t.Fatal(err)
			}
		}
		if filtered := string(results[0]) != string(results[1]); filtered != tc.filtered {
			t.Errorf("%s: filtered %v, want %v", tc.source.Name, filtered, tc.filtered)
		}
	}
}
