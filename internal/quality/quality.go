// Package quality is the benchmark protocol the engines are scored with,
// the one the super-resolution literature reports Set5 and Set14 with, so
// the figures compare with published ones:
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
//
// It is for tests and benchmarks: its functions take a testing.TB and
// fail it on error.
package quality

import (
	"bytes"
	"image"
	"image/jpeg"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"

	"github.com/upscalekit/upscale"
)

// Levels are the API's denoise levels, weakest first, as the benchmarks
// sweep them.
var Levels = []upscale.Denoise{upscale.DenoiseNone, upscale.DenoiseLow, upscale.DenoiseMid, upscale.DenoiseHigh, upscale.DenoiseMax}

// Image is an RGB image as float planes, 0-255.
type Image struct {
	W, H    int
	R, G, B []float64
}

// NewImage returns a black w×h image.
func NewImage(w, h int) *Image {
	return &Image{W: w, H: h, R: make([]float64, w*h), G: make([]float64, w*h), B: make([]float64, w*h)}
}

// FromImage converts img, dropping alpha.
func FromImage(img image.Image) *Image {
	bounds := img.Bounds()
	out := NewImage(bounds.Dx(), bounds.Dy())
	for y := range out.H {
		for x := range out.W {
			r, g, b, _ := img.At(bounds.Min.X+x, bounds.Min.Y+y).RGBA()
			i := y*out.W + x
			out.R[i], out.G[i], out.B[i] = float64(r>>8), float64(g>>8), float64(b>>8)
		}
	}
	return out
}

// Decode decodes a PNG or JPEG file.
func Decode(tb testing.TB, data []byte) *Image {
	tb.Helper()
	img, _, err := image.Decode(bytes.NewReader(data))
	if err != nil {
		tb.Fatal(err)
	}
	return FromImage(img)
}

// NRGBA rounds m to an opaque 8-bit image.
func (m *Image) NRGBA() *image.NRGBA {
	out := image.NewNRGBA(image.Rect(0, 0, m.W, m.H))
	for i := range m.R {
		out.Pix[4*i], out.Pix[4*i+1], out.Pix[4*i+2], out.Pix[4*i+3] = To8(m.R[i]), To8(m.G[i]), To8(m.B[i]), 255
	}
	return out
}

// To8 rounds and clips v to 8 bits.
func To8(v float64) uint8 { return uint8(math.Round(min(255, max(0, v)))) }

// PNG encodes m, rounded to 8 bits.
func (m *Image) PNG(tb testing.TB) []byte { return EncodePNG(tb, m.NRGBA()) }

// EncodePNG encodes img.
func EncodePNG(tb testing.TB, img image.Image) []byte {
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// Crop returns the top-left w×h of m.
func (m *Image) Crop(w, h int) *Image {
	out := NewImage(w, h)
	for y := range h {
		copy(out.R[y*w:(y+1)*w], m.R[y*m.W:])
		copy(out.G[y*w:(y+1)*w], m.G[y*m.W:])
		copy(out.B[y*w:(y+1)*w], m.B[y*m.W:])
	}
	return out
}

// Shrink is MATLAB's imresize(img, 1/scale, 'bicubic'), rounded to
// 8 bits as imresize does for uint8 images.
func Shrink(m *Image, scale int) *Image {
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
	outW, outH := m.W/scale, m.H/scale
	out := NewImage(outW, outH)
	for _, p := range [][2][]float64{{m.R, out.R}, {m.G, out.G}, {m.B, out.B}} {
		horizontal := rows(p[0], m.W, m.H, outW)
		vertical := rows(transpose(horizontal, outW, m.H), m.H, outW, outH)
		for i, v := range transpose(vertical, outH, outW) {
			p[1][i] = float64(To8(v))
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

// Luma is BT.601 Y on the 0-255 scale, with border pixels shaved.
func Luma(m *Image, shave int) (y []float64, w, h int) {
	w, h = m.W-2*shave, m.H-2*shave
	y = make([]float64, 0, w*h)
	for row := shave; row < m.H-shave; row++ {
		for col := shave; col < m.W-shave; col++ {
			i := row*m.W + col
			y = append(y, 16+(65.481*m.R[i]+128.553*m.G[i]+24.966*m.B[i])/255)
		}
	}
	return y, w, h
}

// PSNR is the peak signal-to-noise ratio of b against a, on 0-255.
func PSNR(a, b []float64) float64 {
	var se float64
	for i := range a {
		d := a[i] - b[i]
		se += d * d
	}
	return 10 * math.Log10(255*255/(se/float64(len(a))))
}

// SSIM is the mean SSIM of Wang et al. (2004) over the valid region, with
// an 11×11 Gaussian window of sigma 1.5.
func SSIM(a, b []float64, w, h int) float64 {
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

// Degradation is how a real source may be spoilt: it turns an LR image
// into the file the engine is given.
type Degradation struct {
	Name   string
	Source func(tb testing.TB, lr *Image) []byte
}

// Clean is LR as it is, as a PNG.
var Clean = Degradation{"clean", func(tb testing.TB, lr *Image) []byte { return lr.PNG(tb) }}

// GaussianNoise is LR with white noise of standard deviation sigma added
// to every sample, the same noise every run, as a PNG.
func GaussianNoise(sigma float64) Degradation {
	return Degradation{"noise σ" + strconv.Itoa(int(sigma)), func(tb testing.TB, lr *Image) []byte {
		rng := rand.New(rand.NewPCG(uint64(sigma), uint64(lr.W*lr.H))) // the same noise every run
		out := NewImage(lr.W, lr.H)
		for _, p := range [][2][]float64{{lr.R, out.R}, {lr.G, out.G}, {lr.B, out.B}} {
			for i, v := range p[0] {
				p[1][i] = float64(To8(v + sigma*rng.NormFloat64()))
			}
		}
		return out.PNG(tb)
	}}
}

// JPEG is LR saved as a JPEG (Go's encoder: 4:2:0, the IJG
// tables scaled to quality), which the engine is given as it is.
func JPEG(quality int) Degradation {
	return Degradation{"JPEG q" + strconv.Itoa(quality), func(tb testing.TB, lr *Image) []byte {
		return EncodeJPEG(tb, lr, quality)
	}}
}

// JPEGAsPNG is LR saved as a JPEG, decoded and saved again as a PNG: the
// artefacts are there, the quantisation tables that describe them are not.
func JPEGAsPNG(quality int) Degradation {
	return Degradation{"JPEG q" + strconv.Itoa(quality) + " as PNG", func(tb testing.TB, lr *Image) []byte {
		return Decode(tb, EncodeJPEG(tb, lr, quality)).PNG(tb)
	}}
}

// EncodeJPEG encodes m with Go's encoder at quality.
func EncodeJPEG(tb testing.TB, m *Image, quality int) []byte {
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, m.NRGBA(), &jpeg.Options{Quality: quality}); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// LoadSet reads the module's testdata/sr/<name>/*.png (Set5, Set14).
func LoadSet(tb testing.TB, name string) []*Image {
	tb.Helper()
	files, _ := filepath.Glob(filepath.Join(SetDir(), name, "*.png"))
	if len(files) == 0 {
		tb.Fatalf("no images in testdata/sr/%s", name)
	}
	var set []*Image
	for _, f := range files {
		set = append(set, Decode(tb, SetFile(tb, filepath.Join(name, filepath.Base(f)))))
	}
	return set
}

// SetFile reads one file of the module's testdata/sr, named by its path
// there ("Set14/baboon.png").
func SetFile(tb testing.TB, name string) []byte {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join(SetDir(), name))
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// SetDir is the module's testdata/sr, wherever the test runs from.
func SetDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", "sr")
}

// Score enlarges every image of set, degraded by d, by scale with
// enlarge, and returns the mean PSNR and SSIM.
func Score(tb testing.TB, set []*Image, scale int, d Degradation, enlarge func(src []byte) ([]byte, error)) (meanPSNR, meanSSIM float64) {
	tb.Helper()
	for _, hr := range set {
		hr = hr.Crop(hr.W-hr.W%scale, hr.H-hr.H%scale)
		out, err := enlarge(d.Source(tb, Shrink(hr, scale)))
		if err != nil {
			tb.Fatal(err)
		}
		sr := Decode(tb, out)
		a, w, h := Luma(hr, scale)
		b, _, _ := Luma(sr, scale)
		meanPSNR += PSNR(a, b)
		meanSSIM += SSIM(a, b, w, h)
	}
	return meanPSNR / float64(len(set)), meanSSIM / float64(len(set))
}

// CelImage draws what imageType anime is for: flat colours inside dark,
// anti-aliased outlines, over a smooth gradient, like cel-shaded art or a
// screenshot. Each variant moves and recolours the shapes. Pixels are
// averaged from 4×4 subsamples, so edges are anti-aliased as a renderer's.
func CelImage(variant, side int) *Image {
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
	out := NewImage(side, side)
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
			out.R[i], out.G[i], out.B[i] = math.Round(r/sub/sub), math.Round(g/sub/sub), math.Round(b/sub/sub)
		}
	}
	return out
}

// CelSet is the generated anime benchmark: four 256×256 cel images.
func CelSet() []*Image {
	var set []*Image
	for v := range 4 {
		set = append(set, CelImage(v, 256))
	}
	return set
}
