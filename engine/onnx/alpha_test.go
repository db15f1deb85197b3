package onnx

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/png"
	"math"
	"testing"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/internal/quality"
)

// rgba is an image with alpha as float planes, colour premultiplied, all
// 0-255.
type rgba struct {
	colour *quality.Image
	alpha  []float64
}

// withDisc cuts an anti-aliased disc out of hr: alpha 1 inside, 0 outside,
// averaged from 4×4 subsamples at the rim; hidden colour is black.
func withDisc(hr *quality.Image) rgba {
	out := rgba{colour: quality.NewImage(hr.W, hr.H), alpha: make([]float64, hr.W*hr.H)}
	cx, cy, r := float64(hr.W)/2, float64(hr.H)/2, 0.4*float64(min(hr.W, hr.H))
	for y := range hr.H {
		for x := range hr.W {
			inside := 0
			for sy := range 4 {
				for sx := range 4 {
					if math.Hypot(float64(x)+(float64(sx)+0.5)/4-cx, float64(y)+(float64(sy)+0.5)/4-cy) < r {
						inside++
					}
				}
			}
			i := y*hr.W + x
			a := float64(inside) / 16
			out.alpha[i] = 255 * a
			out.colour.R[i], out.colour.G[i], out.colour.B[i] = hr.R[i]*a, hr.G[i]*a, hr.B[i]*a
		}
	}
	return out
}

// shrink is quality.Shrink of the premultiplied planes and of alpha.
func (m rgba) shrink(scale int) rgba {
	a := quality.NewImage(m.colour.W, m.colour.H)
	copy(a.R, m.alpha)
	copy(a.G, m.alpha)
	copy(a.B, m.alpha)
	return rgba{colour: quality.Shrink(m.colour, scale), alpha: quality.Shrink(a, scale).R}
}

// png encodes m as an 8-bit RGBA PNG (straight colour, as PNG stores it).
func (m rgba) png(tb testing.TB) []byte {
	img := image.NewNRGBA(image.Rect(0, 0, m.colour.W, m.colour.H))
	for i, a := range m.alpha {
		c := color.NRGBA{A: quality.To8(a)}
		if c.A > 0 {
			k := 255 / float64(c.A)
			c.R, c.G, c.B = quality.To8(m.colour.R[i]*k), quality.To8(m.colour.G[i]*k), quality.To8(m.colour.B[i]*k)
		}
		img.SetNRGBA(i%m.colour.W, i/m.colour.W, c)
	}
	return quality.EncodePNG(tb, img)
}

func decodeRGBA(tb testing.TB, data []byte) rgba {
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		tb.Fatal(err)
	}
	b := img.Bounds()
	out := rgba{colour: quality.NewImage(b.Dx(), b.Dy()), alpha: make([]float64, b.Dx()*b.Dy())}
	for y := range b.Dy() {
		for x := range b.Dx() {
			c := color.NRGBAModel.Convert(img.At(b.Min.X+x, b.Min.Y+y)).(color.NRGBA)
			i := y*b.Dx() + x
			a := float64(c.A) / 255
			out.alpha[i] = float64(c.A)
			out.colour.R[i], out.colour.G[i], out.colour.B[i] = float64(c.R)*a, float64(c.G)*a, float64(c.B)*a
		}
	}
	return out
}

// over composites m over a grey background.
func (m rgba) over(grey float64) *quality.Image {
	out := quality.NewImage(m.colour.W, m.colour.H)
	for i, a := range m.alpha {
		rest := grey * (1 - a/255)
		out.R[i], out.G[i], out.B[i] = m.colour.R[i]+rest, m.colour.G[i]+rest, m.colour.B[i]+rest
	}
	return out
}

// enlargeColourOnly is the other way to enlarge alpha: the network on
// colour, alpha enlarged classically (engine/vips's photo recipe).
func (e *Engine) enlargeColourOnly(tb testing.TB, ctx context.Context, src []byte) ([]byte, error) {
	px, err := e.codec.Decode(ctx, src, upscale.Params{Scale: 2})
	if err != nil {
		return nil, err
	}
	cunet := e.archs[0]
	m := cunet.models[upscale.DenoiseNone]
	network, err := e.open(m)
	if err != nil {
		return nil, err
	}
	out := px.Like(2*px.Width, 2*px.Height, make([]uint16, 4*px.Width*px.Height*px.Bands))
	in := planes{pix: px.Pix, width: px.Width, height: px.Height, bands: px.Bands}
	o := planes{pix: out.Pix, width: out.Width, height: out.Height, bands: out.Bands}
	if err := m.run(ctx, network, in, o, e.tileOf(m), &e.buffers); err != nil {
		return nil, err
	}
	classical, err := e.codec.Encode(ctx, px, 2, upscale.Photo)
	if err != nil {
		return nil, err
	}
	alpha := decodeRGBA(tb, classical.Data).alpha
	for i, a := range alpha {
		out.Pix[i*out.Bands+3] = uint16(a) * 257
	}
	img, err := e.codec.Encode(ctx, out, 1, upscale.Photo)
	return img.Data, err
}

// BenchmarkAlpha compares the two ways of enlarging alpha on Set5 cut
// out by an anti-aliased disc, ×2: alpha through the network as a grey
// image (what the engine does), and the network on colour with alpha
// enlarged classically. Scores: PSNR of alpha, and of luma composited over
// mid grey, where a mismatch between colour and alpha at the rim shows as
// a dark or light fringe.
func BenchmarkAlpha(b *testing.B) {
	e, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	var set []rgba
	for _, hr := range quality.LoadSet(b, "Set5") {
		set = append(set, withDisc(hr.Crop(hr.W/2*2, hr.H/2*2)))
	}
	ways := map[string]func([]byte) ([]byte, error){
		"network": func(src []byte) ([]byte, error) {
			img, err := e.Upscale(context.Background(), src, upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone})
			return img.Data, err
		},
		"classical": func(src []byte) ([]byte, error) { return e.enlargeColourOnly(b, context.Background(), src) },
	}
	for _, way := range []string{"network", "classical"} {
		b.Run("alpha="+way, func(b *testing.B) {
			for range b.N {
				var alphaPSNR, compositePSNR float64
				for _, hr := range set {
					out, err := ways[way](hr.shrink(2).png(b))
					if err != nil {
						b.Fatal(err)
					}
					sr := decodeRGBA(b, out)
					alphaPSNR += quality.PSNR(hr.alpha, sr.alpha)
					want, _, _ := quality.Luma(hr.over(128), 2)
					got, _, _ := quality.Luma(sr.over(128), 2)
					compositePSNR += quality.PSNR(want, got)
				}
				b.ReportMetric(alphaPSNR/float64(len(set)), "alpha-dB")
				b.ReportMetric(compositePSNR/float64(len(set)), "composite-dB")
			}
		})
	}
}
