package onnx_test

import (
	"context"
	"math"
	"testing"

	"github.com/upscalekit/upscale/engine/onnx"
	"github.com/upscalekit/upscale/engine/onnx/onnxtest"
	"github.com/upscalekit/upscale/internal/ncnn2onnx"
	"github.com/upscalekit/upscale/internal/quality"
)

// spanScores are the PSNRs ../shared/models/span/README.md gives a
// correct conversion of SPAN ch48, per image of Set5 and Set14 (×2) and
// of Set5 (×4), in the project's protocol (internal/quality).
var spanScores = map[int]map[string]float64{
	2: {"Set5/baby": 38.93, "Set5/bird": 42.85, "Set5/butterfly": 35.17, "Set5/head": 36.02, "Set5/woman": 36.36,
		"Set14/baboon": 26.32, "Set14/barbara": 29.17, "Set14/bridge": 29.49, "Set14/coastguard": 31.29, "Set14/comic": 30.01,
		"Set14/face": 36.00, "Set14/flowers": 35.08, "Set14/foreman": 37.06, "Set14/man": 31.55, "Set14/monarch": 40.26,
		"Set14/pepper": 37.13, "Set14/ppt3": 34.50, "Set14/zebra": 34.60},
	4: {"Set5/baby": 33.71, "Set5/bird": 34.66, "Set5/butterfly": 28.18, "Set5/head": 32.95, "Set5/woman": 30.19},
}

// spanHalo is how far the image's edge is repeated around it: more than
// SPAN's receptive field (21 source pixels), so that the network's own
// zero padding never reaches the image, as the engine's tiles read
// repeated edge pixels beyond it.
const spanHalo = 24

// TestSPANConversionScores: SPAN ch48's ncnn files, converted by
// ncnn2onnx and run by ONNX Runtime in float32 on each whole image with
// its edge repeated beyond it, score what the README of
// ../shared/models/span gives a correct conversion, within 0.05 dB on
// every image: 18 at ×2, 5 at ×4 in one pass. A wrong weight layout, a
// PixelShuffle in the other order or a constant misapplied moves a score
// by decibels.
func TestSPANConversionScores(t *testing.T) {
	rt, err := onnx.NewONNXRuntime(onnx.DefaultLibrary())
	if err != nil {
		t.Fatal(err)
	}
	for scale, want := range spanScores {
		model, g, err := ncnn2onnx.Convert(onnxtest.SPAN(t, scale), "span", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if g != (ncnn2onnx.Geometry{Scale: scale, Border: 0, Multiple: 1, MinInput: 1, Halo: 21}) {
			t.Errorf("×%d: geometry %+v, want ×%d with no border and a halo of 21, its receptive field", scale, g, scale)
		}
		network, err := rt.Load(model.Marshal(), onnx.FP32, 0)
		if err != nil {
			t.Fatal(err)
		}
		for name, score := range want {
			hr := quality.Decode(t, quality.SetFile(t, name+".png"))
			got, _ := quality.Score(t, []*quality.Image{hr}, scale, quality.Clean, func(src []byte) ([]byte, error) {
				return enlargeWhole(t, network, quality.Decode(t, src), scale).PNG(t), nil
			})
			if math.Abs(got-score) > 0.05 {
				t.Errorf("×%d %s: %.2f dB, want %.2f ± 0.05", scale, name, got, score)
			}
		}
		network.Close()
	}
}

// enlargeWhole runs network on lr in one tile, its edge repeated
// spanHalo pixels beyond it, and cuts the result to lr's size × scale.
func enlargeWhole(t *testing.T, network onnx.Network, lr *quality.Image, scale int) *quality.Image {
	t.Helper()
	w, h := lr.W+2*spanHalo, lr.H+2*spanHalo
	in := make([]float32, 3*w*h)
	for c, plane := range [][]float64{lr.R, lr.G, lr.B} {
		for y := range h {
			for x := range w {
				sy, sx := min(max(y-spanHalo, 0), lr.H-1), min(max(x-spanHalo, 0), lr.W-1)
				in[(c*h+y)*w+x] = float32(plane[sy*lr.W+sx] / 255)
			}
		}
	}
	out := make([]float32, len(in)*scale*scale)
	if err := network.Run(context.Background(), in, w, h, out); err != nil {
		t.Fatal(err)
	}
	sr := quality.NewImage(lr.W*scale, lr.H*scale)
	for c, plane := range [][]float64{sr.R, sr.G, sr.B} {
		for y := range sr.H {
			for x := range sr.W {
				plane[y*sr.W+x] = float64(quality.To8(255 * float64(out[(c*h*scale+y+spanHalo*scale)*w*scale+x+spanHalo*scale])))
			}
		}
	}
	return sr
}
