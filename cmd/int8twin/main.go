// Command int8twin makes the INT8 twin of a super-resolution network an
// operator brings (engine/onnx's Model.INT8; the standalone's
// networks[].int8), from its ncnn files and calibration images:
//
//	int8twin -calibration dir -o twin.onnx [-tile n] [-target dB] [-runtime onednn|onnxruntime] network.param
//
// The convolutions that read or make the image stay in float; the others
// are quantised (uint8 activations, a step per channel, int8 weights), and
// those whose quantisation costs most are kept in float until the twin's
// results on the calibration tiles are within the target (48 dB) of
// float32's, measured on the runtime named: a lower target, down to 42,
// leaves more in INT8, faster and further from float32. A twin under 42
// dB is refused (onnx.MakeTwin). It prints the distance and the
// convolutions kept.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"

	"github.com/upscalekit/upscale/engine/onednn"
	"github.com/upscalekit/upscale/engine/onnx"
)

func main() {
	out := flag.String("o", "", "write the twin to this `file`")
	calibration := flag.String("calibration", "", "calibrate on the PNG files of this `directory`: images like those the network will enlarge")
	tile := flag.Int("tile", 64, "the side of the calibration tiles, in pixels (16 or more)")
	target := flag.Float64("target", onnx.DefaultTwinTarget, "keep convolutions in float until the twin is this many `dB` from float32 (42 or more): lower is faster and less faithful")
	runtime := flag.String("runtime", "onednn", "measure the twin on this `runtime`: onednn or onnxruntime")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: int8twin -calibration dir -o twin.onnx [-tile n] [-target dB] [-runtime onednn|onnxruntime] network.param")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *out == "" || *calibration == "" || flag.NArg() != 1 || *tile < 16 || !(*target >= onnx.TwinFloor) {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, flag.Arg(0), *out, *runtime, onnx.TwinOptions{Calibration: *calibration, Tile: *tile, Target: *target}); err != nil {
		fmt.Fprintln(os.Stderr, "int8twin:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, param, out, runtime string, opts onnx.TwinOptions) error {
	var rt onnx.Runtime
	var err error
	switch runtime {
	case "onednn":
		rt, err = onednn.New()
	case "onnxruntime":
		rt, err = onnx.NewONNXRuntime(onnx.DefaultLibrary())
	default:
		err = errors.New("-runtime: want onednn or onnxruntime")
	}
	if err != nil {
		return err
	}
	name := strings.TrimSuffix(filepath.Base(param), filepath.Ext(param))
	twin, err := onnx.MakeTwin(ctx, rt, onnx.Model{Name: name, Param: param}, opts)
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, twin.Data, 0o644); err != nil {
		return err
	}
	fmt.Printf("%s: %.1f dB from float32 on %s, %d convolutions in INT8, %d more kept in float", out, twin.PSNR, rt.Name(), len(twin.Quantized), len(twin.Float))
	if len(twin.Float) > 0 {
		fmt.Printf(" (%s)", strings.Join(twin.Float, ", "))
	}
	fmt.Println()
	return nil
}
