package libvips

import (
	"github.com/upscalekit/upscale"
)

// recipe is how one imageType and denoise level enlarge an image.
type recipe struct {
	interpolator string // libvips interpolator nickname
	denoise      denoising
	sharpen      float64 // unsharp-mask amount, on the source; 0 is off
	sharpenSigma float64 // in source pixels
	clamp        bool    // clamp each result pixel to the range of its 3×3 source pixels (needs bicubic)
}

// denoising is one denoise level's filter (denoise.c); the zero value is
// off.
type denoising struct {
	noise float64 // drop DCT coefficients below noise × the measured noise sigma
	quant float64 // and, for a JPEG source, below quant × the step JPEG rounded them to
	step  int     // shift between block grids, in pixels
}

// recipeFor chooses the recipe for opts. Every value was chosen by the
// quality benchmark (BENCHMARKS.md, make bench):
//
//   - photo: an unsharp mask on the source (amount 0.5, sigma 1 source
//     pixel), centred bicubic, and a clamp of each result pixel to the range
//     of its 3×3 source neighbourhood, so the sharpening cannot overshoot
//     into halos: +0.9 dB over plain bicubic at ×2, +0.7 at ×4, and above
//     plain nohalo. Nohalo with the same mask scores 0.3 dB more, but in
//     libvips 8.14 it takes about 15 times as long (2.4 s against 0.16 s for
//     a 1024² JPEG at ×2, on one thread), so bicubic it is. Sharpening the
//     source rather than the result costs 0.1 dB and saves all but 1/s² of
//     the work.
//   - anime: a stronger, tighter mask (amount 1.5, sigma 0.75), which pays
//     on flat colours and outlines, where the clamp keeps edges free of
//     ringing, and costs on photographic texture.
//
// Denoise levels filter the source before it is sharpened and enlarged
// (denoise.c): in 8×8 DCT blocks on grids 2 pixels apart, every
// coefficient below k times the noise measured in that plane is dropped,
// and for a JPEG source also below a fraction of the step JPEG rounded it
// to; the luma blocks are then moved back to what the JPEG file allows. A
// source with nothing to remove (cleanNoise) is not filtered at all:
//
//	none  no filtering
//	low   k = 1.5, 1/4 step
//	mid   k = 2, 1/2 step
//	high  k = 2.5, 1/2 step
//	max   k = 3, 3/4 step
func recipeFor(opts upscale.Params) recipe {
	r := recipe{interpolator: "bicubic", sharpen: 0.5, sharpenSigma: 1, clamp: true}
	if opts.ImageType == upscale.Anime {
		r.sharpen, r.sharpenSigma = 1.5, 0.75
	}
	r.denoise = denoiseLevels[opts.Denoise]
	return r
}

var denoiseLevels = map[upscale.Denoise]denoising{
	upscale.DenoiseNone: {},
	upscale.DenoiseLow:  {noise: 1.5, quant: 0.25, step: 2},
	upscale.DenoiseMid:  {noise: 2, quant: 0.5, step: 2},
	upscale.DenoiseHigh: {noise: 2.5, quant: 0.5, step: 2},
	upscale.DenoiseMax:  {noise: 3, quant: 0.75, step: 2},
}

// A denoise level filters a source only when it has something to remove:
// its noise (Pixels.Noise) reads at least cleanNoise, or it is a JPEG
// below cleanJPEGQuality. Otherwise the filter would only cost detail (max
// cost clean Set5 ×2 0.33 dB) and time (three times the enlargement's),
// so max, the API's default, costs a clean source what none costs.
const (
	cleanNoise       = 2.3
	cleanJPEGQuality = 90
)
