package vips

// The quality protocol, the one the super-resolution literature reports
// Set5 and Set14 with, so the figures compare with published ones:
//
//  1. HR: the benchmark image, cropped to a multiple of the scale.
//  2. LR: HR shrunk by 1/scale with MATLAB's imresize (bicubic, a = -0.5,
//     kernel widened by the scale to antialias, symmetric edges), rounded
//     to 8 bits. Degraded cases then add noise to LR, or save it as a JPEG.
//  3. SR: the engine enlarges LR (a PNG, or that JPEG file) back to HR's
//     size, as a PNG.
//  4. Score: PSNR and SSIM (Gaussian window 11, sigma 1.5) on luma
//     (BT.601, Y = 16 + (65.481 R + 128.553 G + 24.966 B) / 255), with
//     `scale` pixels shaved from every border.

import (
	"bytes"
	"context"
	"image"
	"image/jpeg"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/h2non/bimg"

	"github.com/upscalekit/upscale"
)

// rgbImage is an image as float planes, 0-255.
type rgbImage struct {
	w, h    int
	r, g, b []float64
}

func newRGB(w, h int) *rgbImage {
	return &rgbImage{w: w, h: h, r: make([]float64, w*h), g: make([]float64, w*h), b: make([]float64, w*h)}
}

func fromImage(img image.Image) *rgbImage {
	bounds := img.Bounds()
	out := newRGB(bounds.Dx(), bounds.Dy())
	for y := range out.h {
		for x := range out.w {
			r, g, b, _ := img.At(bounds.Min.X+x, bounds.Min.Y+y).RGBA()
			i := y*out.w + x
			out.r[i], out.g[i], out.b[i] = float64(r>>8), float64(g>>8), float64(b>>8)
		}
	}
	return out
}

func decodeRGB(tb testing.TB, data []byte) *rgbImage {
	tb.Helper()
	img, _, err := image.Decode(bytes.NewReader(data))
	if err != nil {
		tb.Fatal(err)
	}
	return fromImage(img)
}

func (m *rgbImage) toNRGBA() *image.NRGBA {
	out := image.NewNRGBA(image.Rect(0, 0, m.w, m.h))
	for i := range m.r {
		out.Pix[4*i], out.Pix[4*i+1], out.Pix[4*i+2], out.Pix[4*i+3] = to8(m.r[i]), to8(m.g[i]), to8(m.b[i]), 255
	}
	return out
}

func to8(v float64) uint8 { return uint8(math.Round(min(255, max(0, v)))) }

func (m *rgbImage) png(tb testing.TB) []byte { return encodeImagePNG(tb, m.toNRGBA()) }

func encodeImagePNG(tb testing.TB, img image.Image) []byte {
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

func (m *rgbImage) crop(w, h int) *rgbImage {
	out := newRGB(w, h)
	for y := range h {
		copy(out.r[y*w:(y+1)*w], m.r[y*m.w:])
		copy(out.g[y*w:(y+1)*w], m.g[y*m.w:])
		copy(out.b[y*w:(y+1)*w], m.b[y*m.w:])
	}
	return out
}

// matlabShrink is MATLAB's imresize(img, 1/scale, 'bicubic'), rounded to
// 8 bits as imresize does for uint8 images.
func matlabShrink(m *rgbImage, scale int) *rgbImage {
	rows := func(in []float64, w, h, outW int) []float64 { // resizes along x
		weights, indices := resizeWeights(w, outW, scale)
		out := make([]float64, outW*h)
		for y := range h {
			for x := range outW {
				var sum float64
				for k, wt := range weights[x] {
					sum += wt * in[y*w+indices[x][k]]
				}
				out[y*outW+x] = sum
			}
		}
		return out
	}
	transpose := func(in []float64, w, h int) []float64 {
		out := make([]float64, w*h)
		for y := range h {
			for x := range w {
				out[x*h+y] = in[y*w+x]
			}
		}
		return out
	}
	outW, outH := m.w/scale, m.h/scale
	out := newRGB(outW, outH)
	for _, p := range [][2][]float64{{m.r, out.r}, {m.g, out.g}, {m.b, out.b}} {
		horizontal := rows(p[0], m.w, m.h, outW)
		vertical := rows(transpose(horizontal, outW, m.h), m.h, outW, outH)
		for i, v := range transpose(vertical, outH, outW) {
			p[1][i] = float64(to8(v))
		}
	}
	return out
}

// resizeWeights follows MATLAB's contributions(): for each output index
// the input indices (symmetric padding) and normalised cubic weights.
func resizeWeights(in, out, scale int) ([][]float64, [][]int) {
	s := 1 / float64(scale)
	width := 4 / s
	cubic := func(x float64) float64 {
		a := math.Abs(x)
		switch {
		case a <= 1:
			return 1.5*a*a*a - 2.5*a*a + 1
		case a <= 2:
			return -0.5*a*a*a + 2.5*a*a - 4*a + 2
		}
		return 0
	}
	taps := int(math.Ceil(width)) + 2
	weights, indices := make([][]float64, out), make([][]int, out)
	for i := range out {
		u := float64(i+1)/s + 0.5*(1-1/s)
		left := int(math.Floor(u - width/2))
		var sum float64
		for k := range taps {
			j := left + k
			wt := s * cubic(s*(u-float64(j)))
			idx := j - 1
			for idx < 0 || idx >= in { // symmetric padding
				if idx < 0 {
					idx = -idx - 1
				} else {
					idx = 2*in - idx - 1
				}
			}
			weights[i] = append(weights[i], wt)
			indices[i] = append(indices[i], idx)
			sum += wt
		}
		for k := range weights[i] {
			weights[i][k] /= sum
		}
	}
	return weights, indices
}

// luma is BT.601 Y on the 0-255 scale, with border pixels shaved.
func luma(m *rgbImage, shave int) (y []float64, w, h int) {
	w, h = m.w-2*shave, m.h-2*shave
	y = make([]float64, 0, w*h)
	for row := shave; row < m.h-shave; row++ {
		for col := shave; col < m.w-shave; col++ {
			i := row*m.w + col
			y = append(y, 16+(65.481*m.r[i]+128.553*m.g[i]+24.966*m.b[i])/255)
		}
	}
	return y, w, h
}

func psnr(a, b []float64) float64 {
	var se float64
	for i := range a {
		d := a[i] - b[i]
		se += d * d
	}
	return 10 * math.Log10(255*255/(se/float64(len(a))))
}

// ssim is the mean SSIM of Wang et al. (2004) over the valid region, with
// an 11×11 Gaussian window of sigma 1.5.
func ssim(a, b []float64, w, h int) float64 {
	const radius = 5
	kernel := make([]float64, 2*radius+1)
	var ksum float64
	for i := range kernel {
		d := float64(i - radius)
		kernel[i] = math.Exp(-d * d / (2 * 1.5 * 1.5))
		ksum += kernel[i]
	}
	for i := range kernel {
		kernel[i] /= ksum
	}
	// blur returns the separable Gaussian filter of f over the valid region.
	vw, vh := w-2*radius, h-2*radius
	blur := func(f func(i int) float64) []float64 {
		tmp := make([]float64, vw*h)
		for y := range h {
			for x := range vw {
				var s float64
				for k, kv := range kernel {
					s += kv * f(y*w+x+k)
				}
				tmp[y*vw+x] = s
			}
		}
		out := make([]float64, vw*vh)
		for y := range vh {
			for x := range vw {
				var s float64
				for k, kv := range kernel {
					s += kv * tmp[(y+k)*vw+x]
				}
				out[y*vw+x] = s
			}
		}
		return out
	}
	muA, muB := blur(func(i int) float64 { return a[i] }), blur(func(i int) float64 { return b[i] })
	aa := blur(func(i int) float64 { return a[i] * a[i] })
	bb := blur(func(i int) float64 { return b[i] * b[i] })
	ab := blur(func(i int) float64 { return a[i] * b[i] })
	const c1, c2 = (0.01 * 255) * (0.01 * 255), (0.03 * 255) * (0.03 * 255)
	var sum float64
	for i := range muA {
		va, vb, cov := aa[i]-muA[i]*muA[i], bb[i]-muB[i]*muB[i], ab[i]-muA[i]*muB[i]
		sum += (2*muA[i]*muB[i] + c1) * (2*cov + c2) / ((muA[i]*muA[i] + muB[i]*muB[i] + c1) * (va + vb + c2))
	}
	return sum / float64(len(muA))
}

// degradation is how a real source may be spoilt: it turns an LR image
// into the file the engine is given.
type degradation struct {
	name   string
	source func(tb testing.TB, lr *rgbImage) []byte
}

var clean = degradation{"clean", func(tb testing.TB, lr *rgbImage) []byte { return lr.png(tb) }}

func gaussianNoise(sigma float64) degradation {
	return degradation{"noise σ" + strconv.Itoa(int(sigma)), func(tb testing.TB, lr *rgbImage) []byte {
		rng := rand.New(rand.NewPCG(uint64(sigma), uint64(lr.w*lr.h))) // the same noise every run
		out := newRGB(lr.w, lr.h)
		for _, p := range [][2][]float64{{lr.r, out.r}, {lr.g, out.g}, {lr.b, out.b}} {
			for i, v := range p[0] {
				p[1][i] = float64(to8(v + sigma*rng.NormFloat64()))
			}
		}
		return out.png(tb)
	}}
}

// jpegArtefacts is LR saved as a JPEG (Go's encoder: 4:2:0, the IJG
// tables scaled to quality), which the engine is given as it is.
func jpegArtefacts(quality int) degradation {
	return degradation{"JPEG q" + strconv.Itoa(quality), func(tb testing.TB, lr *rgbImage) []byte {
		return encodeJPEG(tb, lr, quality)
	}}
}

// jpegAsPNG is LR saved as a JPEG, decoded and saved again as a PNG: the
// artefacts are there, the quantisation tables that describe them are not.
func jpegAsPNG(quality int) degradation {
	return degradation{"JPEG q" + strconv.Itoa(quality) + " as PNG", func(tb testing.TB, lr *rgbImage) []byte {
		return decodeRGB(tb, encodeJPEG(tb, lr, quality)).png(tb)
	}}
}

func encodeJPEG(tb testing.TB, m *rgbImage, quality int) []byte {
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, m.toNRGBA(), &jpeg.Options{Quality: quality}); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// score enlarges every image of set degraded by d with r at scale, and
// returns the mean PSNR and SSIM.
func score(tb testing.TB, set []*rgbImage, scale int, d degradation, r recipe) (meanPSNR, meanSSIM float64) {
	for _, hr := range set {
		hr = hr.crop(hr.w-hr.w%scale, hr.h-hr.h%scale)
		out, err := run(context.Background(), d.source(tb, matlabShrink(hr, scale)), pngFormat, scale, r, bimg.ImageMetadata{})
		if err != nil {
			tb.Fatal(err)
		}
		sr := decodeRGB(tb, out)
		a, w, h := luma(hr, scale)
		b, _, _ := luma(sr, scale)
		meanPSNR += psnr(a, b)
		meanSSIM += ssim(a, b, w, h)
	}
	return meanPSNR / float64(len(set)), meanSSIM / float64(len(set))
}

// loadSet reads testdata/sr/<name>/*.png.
func loadSet(tb testing.TB, name string) []*rgbImage {
	tb.Helper()
	files, _ := filepath.Glob(filepath.Join("../../testdata/sr", name, "*.png"))
	if len(files) == 0 {
		tb.Fatalf("no images in testdata/sr/%s", name)
	}
	var set []*rgbImage
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		set = append(set, decodeRGB(tb, data))
	}
	return set
}

// celImage draws what imageType anime is for: flat colours inside dark,
// anti-aliased outlines, over a smooth gradient, like cel-shaded art or a
// screenshot. Each variant moves and recolours the shapes. Pixels are
// averaged from 4×4 subsamples, so edges are anti-aliased as a renderer's.
func celImage(variant, side int) *rgbImage {
	rng := rand.New(rand.NewPCG(uint64(variant), 7))
	type disc struct{ cx, cy, radius, outline, r, g, b float64 }
	var discs []disc
	for range 6 {
		discs = append(discs, disc{
			cx: rng.Float64() * float64(side), cy: rng.Float64() * float64(side),
			radius: float64(side) * (0.08 + 0.15*rng.Float64()), outline: 1 + 2*rng.Float64(),
			r: 255 * rng.Float64(), g: 255 * rng.Float64(), b: 255 * rng.Float64(),
		})
	}
	out := newRGB(side, side)
	const sub = 4
	for y := range side {
		for x := range side {
			var r, g, b float64
			for sy := range sub {
				for sx := range sub {
					px, py := float64(x)+(float64(sx)+0.5)/sub, float64(y)+(float64(sy)+0.5)/sub
					// Sky: a vertical gradient.
					cr, cg, cb := 120+100*py/float64(side), 170+60*py/float64(side), 255.0
					for _, d := range discs { // later discs cover earlier ones
						dist := math.Hypot(px-d.cx, py-d.cy)
						switch {
						case dist < d.radius-d.outline:
							cr, cg, cb = d.r, d.g, d.b
						case dist < d.radius:
							cr, cg, cb = 20, 15, 25
						}
					}
					r, g, b = r+cr, g+cg, b+cb
				}
			}
			i := y*side + x
			out.r[i], out.g[i], out.b[i] = math.Round(r/sub/sub), math.Round(g/sub/sub), math.Round(b/sub/sub)
		}
	}
	return out
}

// celSet is the generated anime benchmark: four 256×256 cel images.
func celSet() []*rgbImage {
	var set []*rgbImage
	for v := range 4 {
		set = append(set, celImage(v, 256))
	}
	return set
}

var levels = []upscale.Denoise{upscale.DenoiseNone, upscale.DenoiseLow, upscale.DenoiseMid, upscale.DenoiseHigh, upscale.DenoiseMax}

func TestAnimeBeatsPhotoOnCelImages(t *testing.T) {
	cels := celSet()
	for _, scale := range []int{2, 4} {
		photo, _ := score(t, cels, scale, clean, recipeFor(upscale.Options{Scale: scale, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone}))
		anime, _ := score(t, cels, scale, clean, recipeFor(upscale.Options{Scale: scale, ImageType: upscale.Anime, Denoise: upscale.DenoiseNone}))
		if anime <= photo {
			t.Errorf("×%d on the cel images: anime %.2f dB, photo %.2f dB; want anime ahead", scale, anime, photo)
		}
	}
}

// TestDenoiseIsMonotonic enlarges one noisy image at every level: each
// level must move the result further from the undenoised one than the
// level below it does.
func TestDenoiseIsMonotonic(t *testing.T) {
	butterfly := loadSet(t, "Set5")[1]
	noisy := gaussianNoise(15).source(t, matlabShrink(butterfly, 2))
	var plain *rgbImage
	previous := -1.0
	for _, level := range levels {
		out, err := run(context.Background(), noisy, pngFormat, 2, recipeFor(upscale.Options{Scale: 2, Denoise: level}), bimg.ImageMetadata{})
		if err != nil {
			t.Fatal(err)
		}
		result := decodeRGB(t, out)
		if plain == nil {
			plain = result
			continue
		}
		a, _, _ := luma(plain, 0)
		b, _, _ := luma(result, 0)
		change := 255 / math.Pow(10, psnr(a, b)/20) // RMS difference
		if change <= previous {
			t.Errorf("denoise %s changes the result by %.2f (RMS), no more than the level below (%.2f)", level, change, previous)
		}
		previous = change
	}
}

// BenchmarkQuality scores every imageType and denoise level on Set5 and
// Set14 against bicubic and plain nohalo; run it once (-benchtime 1x).
func BenchmarkQuality(b *testing.B) {
	for _, set := range []string{"Set5", "Set14"} {
		images := loadSet(b, set)
		for _, scale := range []int{2, 4} {
			recipes := []struct {
				name string
				r    recipe
			}{{"bicubic", recipe{interpolator: "bicubic"}}, {"nohalo", recipe{interpolator: "nohalo"}}}
			for _, imageType := range []upscale.ImageType{upscale.Photo, upscale.Anime} {
				for _, level := range levels {
					recipes = append(recipes, struct {
						name string
						r    recipe
					}{string(imageType) + "-" + string(level), recipeFor(upscale.Options{Scale: scale, ImageType: imageType, Denoise: level})})
				}
			}
			for _, rc := range recipes {
				b.Run(set+"/x"+strconv.Itoa(scale)+"/"+rc.name, func(b *testing.B) {
					for range b.N {
						p, s := score(b, images, scale, clean, rc.r)
						b.ReportMetric(p, "dB")
						b.ReportMetric(s, "SSIM")
					}
				})
			}
		}
	}
}

// BenchmarkDenoise scores each denoise level (photo, ×2, Set5) on sources
// spoilt by Gaussian noise and by JPEG compression.
func BenchmarkDenoise(b *testing.B) {
	images := loadSet(b, "Set5")
	for _, d := range []degradation{clean, gaussianNoise(5), gaussianNoise(15), gaussianNoise(25), jpegArtefacts(30), jpegArtefacts(60), jpegAsPNG(30)} {
		for _, level := range levels {
			b.Run(d.name+"/"+string(level), func(b *testing.B) {
				for range b.N {
					p, s := score(b, images, 2, d, recipeFor(upscale.Options{Scale: 2, ImageType: upscale.Photo, Denoise: level}))
					b.ReportMetric(p, "dB")
					b.ReportMetric(s, "SSIM")
				}
			})
		}
	}
}

// BenchmarkAnime compares the two imageTypes on the generated cel images
// and on Set14's comic and ppt3.
func BenchmarkAnime(b *testing.B) {
	sets := map[string][]*rgbImage{"cel": celSet()}
	for _, name := range []string{"comic", "ppt3"} {
		data, err := os.ReadFile("../../testdata/sr/Set14/" + name + ".png")
		if err != nil {
			b.Fatal(err)
		}
		sets[name] = []*rgbImage{decodeRGB(b, data)}
	}
	for _, name := range []string{"cel", "comic", "ppt3"} {
		for _, scale := range []int{2, 4} {
			for _, imageType := range []upscale.ImageType{upscale.Photo, upscale.Anime} {
				b.Run(name+"/x"+strconv.Itoa(scale)+"/"+string(imageType), func(b *testing.B) {
					for range b.N {
						p, s := score(b, sets[name], scale, clean, recipeFor(upscale.Options{Scale: scale, ImageType: imageType, Denoise: upscale.DenoiseNone}))
						b.ReportMetric(p, "dB")
						b.ReportMetric(s, "SSIM")
					}
				})
			}
		}
	}
}
