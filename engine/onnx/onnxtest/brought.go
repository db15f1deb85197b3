package onnxtest

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/upscalekit/upscale/engine/onnx"
	"github.com/upscalekit/upscale/internal/ncnn"
	"github.com/upscalekit/upscale/internal/ncnn2onnx"
)

// testBroughtLayers: a network of every layer the efficient networks use
// (a per-channel constant subtracted, scalar arithmetic both ways, Swish,
// Sigmoid, PReLU, a sum, Concat, PixelShuffle and a nearest ×2 added
// back), with random weights, converted by ncnn2onnx and run by rt,
// matches internal/ncnn's reference interpreter to float32's rounding;
// and so do SPAN ×2 and Real-ESRGAN's compact network, where their files
// are.
func testBroughtLayers(t *testing.T, rt onnx.Runtime) {
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
	MatchesReference(t, rt, net, randomTile(97, 9, 7), 9, 7, 1e-4)
	t.Run("SPAN", func(t *testing.T) { MatchesReference(t, rt, SPAN(t, 2), PhotoCrop(t, 12, 10), 12, 10, 1e-4) })
	t.Run("RealESRGANCompact", func(t *testing.T) {
		net, _ := RealESRGANCompact(t)
		MatchesReference(t, rt, net, PhotoCrop(t, 12, 10), 12, 10, 1e-4)
	})
}

// PhotoCrop is the top left w × h of PhotoTiles' second (a butterfly's
// wing), as a network's input. The efficient networks' activations grow
// large on noise, far from what they were trained on, where float32's
// rounding compounds: a photograph is their input.
func PhotoCrop(t testing.TB, w, h int) []float32 {
	const n = PhotoTileSide
	tile, x := PhotoTiles(t)[1], make([]float32, 3*w*h)
	for c := range 3 {
		for y := range h {
			copy(x[(c*h+y)*w:(c*h+y+1)*w], tile[(c*n+y)*n:(c*n+y)*n+w])
		}
	}
	return x
}

// MatchesReference converts net, runs it on rt in float32 on x, a w×h
// tile, and holds each output to internal/ncnn's reference interpreter
// within tol of its value (or of 1, when smaller); it returns the
// conversion's geometry.
func MatchesReference(t *testing.T, rt onnx.Runtime, net *ncnn.Net, x []float32, w, h int, tol float64) ncnn2onnx.Geometry {
	t.Helper()
	model, g, err := ncnn2onnx.Convert(net, "checked", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	network, err := rt.Load(model.Marshal(), onnx.FP32, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer network.Close()
	want := reference(t, net, x, w, h)
	got := make([]float32, len(want.Data))
	if err := network.Run(context.Background(), x, w, h, got); err != nil {
		t.Fatal(err)
	}
	for i, v := range want.Data {
		if math.Abs(float64(got[i])-v) > tol*max(1, math.Abs(v)) {
			t.Fatalf("output %d: %v, want %v", i, got[i], v)
		}
	}
	InnerMatches(t, network, x, w, h, got, want.W)
	return g
}

// InnerMatches holds network, where it is an onnx.InnerNetwork, to
// making with RunInner what Run made (want, of outW samples a row) on x,
// a w × h tile, at least margin from the result's edges, for margins from
// one sample to all but the middle row: the same bits.
func InnerMatches(t *testing.T, network onnx.Network, x []float32, w, h int, want []float32, outW int) {
	t.Helper()
	inner, ok := network.(onnx.InnerNetwork)
	if !ok {
		return
	}
	outH := len(want) / 3 / outW
	for _, margin := range []int{1, outH / 4, (outH - 1) / 2} {
		got := make([]float32, len(want))
		if err := inner.RunInner(context.Background(), x, w, h, got, margin); err != nil {
			t.Fatal(err)
		}
		for i, v := range want {
			row, col := i/outW%outH, i%outW
			if row < margin || row >= outH-margin || col < margin || col >= outW-margin {
				continue
			}
			if math.Float32bits(got[i]) != math.Float32bits(v) {
				t.Fatalf("RunInner with a margin of %d, plane %d at %d,%d: %v, want Run's %v", margin, i/(outW*outH), col, row, got[i], v)
			}
		}
	}
}

// reference is internal/ncnn's float64 result of net on x, 3 planes of
// w × h.
func reference(t *testing.T, net *ncnn.Net, x []float32, w, h int) *ncnn.Blob {
	t.Helper()
	in := ncnn.NewBlob(3, h, w)
	for i, v := range x {
		in.Data[i] = float64(v)
	}
	out, err := net.Forward(in)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Chain writes a network of three 1×1 convolutions of 3 channels each
// (the last to 3 × scale², shuffled to ×scale) as name.param and .bin in
// dir: the first scales each channel by a and adds b, the second scales
// by c and adds d, the last repeats each channel into its scale² pixels.
// The middle one alone is quantised by a twin, reading what the first
// makes. It returns the .param file's path.
func Chain(t testing.TB, dir, name string, scale int, a, b, c, d float32) string {
	t.Helper()
	out := 3 * scale * scale
	param := fmt.Sprintf("7767517\n5 5\nInput in 0 1 data\n"+
		"Convolution first 1 1 data x1 0=3 1=1 5=1 6=9\n"+
		"Convolution middle 1 1 x1 x2 0=3 1=1 5=1 6=9\n"+
		"Convolution last 1 1 x2 x3 0=%d 1=1 5=1 6=%d\n"+
		"PixelShuffle shuffle 1 1 x3 out 0=%d\n", out, 3*out, scale)
	var bin []float32
	diagonal := func(v, bias float32) {
		bin = append(bin, 0) // ncnn's flag: float32 weights follow
		for o := range 3 {
			for i := range 3 {
				bin = append(bin, map[bool]float32{true: v}[o == i])
			}
		}
		bin = append(bin, bias, bias, bias)
	}
	diagonal(a, b)
	diagonal(c, d)
	bin = append(bin, 0)
	for o := range out {
		for i := range 3 {
			bin = append(bin, map[bool]float32{true: 1}[o/(scale*scale) == i])
		}
	}
	bin = append(bin, make([]float32, out)...)
	path := filepath.Join(dir, name+".param")
	if err := os.WriteFile(path, []byte(param), 0o644); err != nil {
		t.Fatal(err)
	}
	data, _ := binary.Append(nil, binary.LittleEndian, bin)
	if err := os.WriteFile(filepath.Join(dir, name+".bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
