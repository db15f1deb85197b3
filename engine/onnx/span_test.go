package onnx_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/upscalekit/upscale/engine/onnx"
	"github.com/upscalekit/upscale/engine/onnx/onnxtest"
	"github.com/upscalekit/upscale/internal/ncnn"
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

// TestConvertedLayersMatchNCNN: a network of every layer the efficient
// networks use (a per-channel constant subtracted, scalar arithmetic
// both ways, Swish, Sigmoid, PReLU, a sum, Concat, PixelShuffle and a
// nearest ×2 added back), with random weights, converted by ncnn2onnx and
// run by ONNX Runtime, matches internal/ncnn's reference interpreter to
// float32's rounding, on any machine: SPAN's own files are not needed.
func TestConvertedLayersMatchNCNN(t *testing.T) {
	param := `7767517
18 23
Input in 0 1 data
Split sd 1 2 data d1 d2
MemoryData mean 0 1 m 0=1 1=1 2=3
BinaryOp sub 2 1 d1 m x1 0=1
BinaryOp mul 1 1 x1 x2 0=2 1=1 2=2.5
Convolution c1 1 1 x2 c1o 0=8 1=3 4=1 5=1 6=216
Split s1 1 3 c1o a b c
Swish sw 1 1 a swo
Sigmoid sg 1 1 b sgo
PReLU pr 1 1 c pro 0=8
BinaryOp add 2 1 swo sgo addo 0=0
BinaryOp rsub 1 1 pro rso 0=7 1=1 2=1.0
BinaryOp div 1 1 rso dvo 0=3 1=1 2=4.0
Concat cat 2 1 addo dvo cato
Convolution c2 1 1 cato c2o 0=12 1=3 4=1 5=1 6=1728
PixelShuffle ps 1 1 c2o pso 0=2
Interp up 1 1 d2 upo 0=1 1=2.0 2=2.0
BinaryOp add2 2 1 pso upo out 0=0
`
	rng := rand.New(rand.NewPCG(3, 4))
	random := func(n int, scale float32) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = (rng.Float32()*2 - 1) * scale
		}
		return v
	}
	var bin bytes.Buffer
	for _, a := range [][]float32{{0.45, 0.44, 0.40}, {0}, random(216, 0.3), random(8, 0.1), random(8, 0.5), {0}, random(1728, 0.1), random(12, 0.1)} {
		binary.Write(&bin, binary.LittleEndian, a) // {0}: the tag of float32 weights
	}
	net, err := ncnn.Parse([]byte(param), bin.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	checkAgainstReference(t, net, 9, 7, 1e-4)
}

// checkAgainstReference converts net, runs it with ONNX Runtime in
// float32 on a random w×h tile, and holds each output to internal/ncnn's
// reference interpreter within tol of its value (or of 1, when smaller);
// it returns the conversion's geometry.
func checkAgainstReference(t *testing.T, net *ncnn.Net, w, h int, tol float64) ncnn2onnx.Geometry {
	t.Helper()
	model, g, err := ncnn2onnx.Convert(net, "checked", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := onnx.NewONNXRuntime(onnx.DefaultLibrary())
	if err != nil {
		t.Fatal(err)
	}
	network, err := rt.Load(model.Marshal(), onnx.FP32, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer network.Close()
	in, x := ncnn.NewBlob(3, h, w), make([]float32, 3*w*h)
	rng := rand.New(rand.NewPCG(uint64(w), uint64(h)))
	for i := range x {
		x[i] = rng.Float32()
		in.Data[i] = float64(x[i])
	}
	want, err := net.Forward(in)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]float32, len(want.Data))
	if err := network.Run(context.Background(), x, w, h, got); err != nil {
		t.Fatal(err)
	}
	for i, v := range want.Data {
		if math.Abs(float64(got[i])-v) > tol*max(1, math.Abs(v)) {
			t.Fatalf("output %d: %v, want %v", i, got[i], v)
		}
	}
	return g
}
