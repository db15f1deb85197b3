package onnx_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/engine/onnx"
	"github.com/upscalekit/upscale/engine/onnx/models"
	"github.com/upscalekit/upscale/engine/onnx/onnxtest"
)

// tilesEnv names the variable that makes BenchmarkEmulatedAVX2 the child
// it starts under emulation: it writes its results into the folder named
// and returns.
const tilesEnv = "UPSCALE_ONNX_TILES"

// emulatedCPU is qemu's model of an AMD EPYC Milan: AVX2 and FMA, no
// AVX-512 and no VNNI, the CPUs people rent whose 8-bit kernels sum
// pairs of products into 16 bits (vpmaddubsw).
const emulatedCPU = "EPYC-Milan-v1"

// BenchmarkEmulatedAVX2 runs the INT8 twin of each architecture (denoise
// none) on the conformance suite's tiles here and, in a child process,
// on an AVX2 CPU without VNNI emulated by qemu-user, on the runtime the
// -runtime flag names. It reports, per architecture, the lowest PSNR of
// each from float32 (here) and of the two from each other: the runtime's
// AVX2 arithmetic, not its speed, since emulation is about a thousand
// times slower (ONNX Runtime about 7 minutes, oneDNN about 16). It needs
// qemu-x86_64 (Debian's qemu-user) on an x86-64 machine:
//
//	go test -run '^$' -bench EmulatedAVX2 -benchtime 1x -timeout 1h ./engine/onnx -args -runtime onnxruntime
//
// For oneDNN, ONEDNN_MAX_CPU_ISA=AVX2 in the environment caps the run
// here at the kernels the emulated CPU gets, so that apart-dB shows
// whether the cap stands for a real AVX2 CPU.
func BenchmarkEmulatedAVX2(b *testing.B) {
	archs := []onnx.Architecture{onnx.CUNet, onnx.UpConv7}
	if dir := os.Getenv(tilesEnv); dir != "" {
		for _, arch := range archs {
			writeTiles(b, dir, arch, runTiles(b, arch, onnx.INT8))
		}
		return
	}
	qemu, err := exec.LookPath("qemu-x86_64")
	if err != nil || runtime.GOARCH != "amd64" {
		b.Skip("needs qemu-x86_64 (Debian's qemu-user) on x86-64")
	}
	for range b.N {
		dir := b.TempDir()
		cmd := exec.Command(qemu, "-cpu", emulatedCPU, os.Args[0], "-test.run", "^$", "-test.bench", "^BenchmarkEmulatedAVX2$", "-test.benchtime", "1x", "-runtime", *runtimeFlag)
		cmd.Env = append(os.Environ(), tilesEnv+"="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("the emulated child: %v\n%s", err, out)
		}
		for _, arch := range archs {
			float := runTiles(b, arch, onnx.FP32)
			native := runTiles(b, arch, onnx.INT8)
			emulated := readTiles(b, dir, arch, len(native))
			b.ReportMetric(lowestPSNR(native, float), string(arch)+"-native-dB")
			b.ReportMetric(lowestPSNR(emulated, float), string(arch)+"-emulated-dB")
			b.ReportMetric(lowestPSNR(emulated, native), string(arch)+"-apart-dB")
		}
	}
}

// runTiles runs arch's network for denoise none in precision on each of
// onnxtest.PhotoTiles, on the -runtime flag's runtime.
func runTiles(b *testing.B, arch onnx.Architecture, precision onnx.Precision) [][]float32 {
	rt, err := namedRuntime(*runtimeFlag)
	if err != nil {
		b.Fatal(err)
	}
	m, err := models.Load(onnx.NetworkFile(arch, upscale.DenoiseNone, precision))
	if err != nil {
		b.Fatal(err)
	}
	network, err := rt.Load(m.Data, precision, runtime.NumCPU())
	if err != nil {
		b.Fatal(err)
	}
	defer network.Close()
	var results [][]float32
	side := onnxtest.PhotoTileSide
	for _, x := range onnxtest.PhotoTiles(b) {
		out := make([]float32, 3*m.OutputSize(side)*m.OutputSize(side))
		if err := network.Run(context.Background(), x, side, side, out); err != nil {
			b.Fatal(err)
		}
		results = append(results, out)
	}
	return results
}

func tileFile(dir string, arch onnx.Architecture, i int) string {
	return filepath.Join(dir, fmt.Sprintf("%s-%d.f32", arch, i))
}

func writeTiles(b *testing.B, dir string, arch onnx.Architecture, tiles [][]float32) {
	for i, tile := range tiles {
		data, err := binary.Append(nil, binary.LittleEndian, tile)
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(tileFile(dir, arch, i), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

func readTiles(b *testing.B, dir string, arch onnx.Architecture, n int) [][]float32 {
	tiles := make([][]float32, n)
	for i := range tiles {
		data, err := os.ReadFile(tileFile(dir, arch, i))
		if err != nil {
			b.Fatal(err)
		}
		tiles[i] = make([]float32, len(data)/4)
		if _, err := binary.Decode(data, binary.LittleEndian, tiles[i]); err != nil {
			b.Fatal(err)
		}
	}
	return tiles
}

// lowestPSNR is the lowest onnx.TilePSNR of got's tiles against
// want's; +Inf when they are identical.
func lowestPSNR(got, want [][]float32) float64 {
	lowest := math.Inf(1)
	for i := range want {
		lowest = min(lowest, onnx.TilePSNR(got[i], want[i]))
	}
	return lowest
}
