package onnx

import (
	"math"
	"slices"

	"github.com/upscalekit/upscale/engine/vips"
)

// noiseBlock is the side of the blocks the noise is measured in.
const noiseBlock = 8

// estimateNoise estimates the standard deviation of white noise in px's
// luma, in 8-bit grey levels. Immerkær's mask (a discrete Laplacian
// difference that cancels flat areas and ramps) responds to noise with
// mean |r| = 6σ·√(2/π) everywhere, and to texture and edges only where
// they are; so the noise is read from the quietest blocks of the image:
// the 5th percentile of the 8×8 blocks' estimates. On Set5 and Set14
// shrunk ×2, clean images read 0-2.0 (the baboon's fur the most), images
// with Gaussian noise of σ 5 in R, G and B 2.5-3.9, of σ 10 4.5-6.2.
// Blocks with any transparent pixel are left out: their flatness is not
// the image's. It returns 0 for an image with no whole opaque block.
func estimateNoise(px *vips.Pixels) float64 {
	w, h := px.Width, px.Height
	toGrey := 255 / px.Max()
	luma := make([]float32, w*h)
	opaque := make([]bool, w*h)
	for i := range luma {
		p := px.Pix[i*px.Bands : (i+1)*px.Bands]
		if px.Bands >= 3 {
			luma[i] = (0.299*p[0] + 0.587*p[1] + 0.114*p[2]) * toGrey
		} else {
			luma[i] = p[0] * toGrey
		}
		opaque[i] = !px.Alpha || p[px.Bands-1] == px.Max()
	}
	var sigmas []float64
	for top := 1; top+noiseBlock < h; top += noiseBlock {
		for left := 1; left+noiseBlock < w; left += noiseBlock {
			var sum float64
			whole := true
			for y := top; y < top+noiseBlock && whole; y++ {
				for x := left; x < left+noiseBlock; x++ {
					if !opaque[y*w+x] {
						whole = false
						break
					}
					up, here, down := luma[(y-1)*w+x-1:], luma[y*w+x-1:], luma[(y+1)*w+x-1:]
					r := up[0] - 2*up[1] + up[2] - 2*here[0] + 4*here[1] - 2*here[2] + down[0] - 2*down[1] + down[2]
					sum += math.Abs(float64(r))
				}
			}
			if whole {
				sigmas = append(sigmas, sum/(noiseBlock*noiseBlock)*math.Sqrt(math.Pi/2)/6)
			}
		}
	}
	if len(sigmas) == 0 {
		return 0
	}
	slices.Sort(sigmas)
	return sigmas[len(sigmas)/20]
}
