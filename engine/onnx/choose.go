package onnx

import (
	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/engine/internal/libvips"
)

// networks maps each denoise level to the embedded network that enlarges
// with it: cunet's plain ×2 and its ×2 with denoisers 0 (the lightest) to
// 3. Both imageTypes use them: the package has no network better on
// either.
var networks = map[upscale.Denoise]string{
	upscale.DenoiseNone: "cunet-scale2x.onnx",
	upscale.DenoiseLow:  "cunet-noise0-scale2x.onnx",
	upscale.DenoiseMid:  "cunet-noise1-scale2x.onnx",
	upscale.DenoiseHigh: "cunet-noise2-scale2x.onnx",
	upscale.DenoiseMax:  "cunet-noise3-scale2x.onnx",
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
func fitLevel(px *libvips.Pixels, imageType upscale.ImageType, requested upscale.Denoise) (upscale.Denoise, error) {
	noise, err := px.Noise()
	if err != nil {
		return "", err
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
