// Command ncnn2onnx converts a neural network from ncnn's format (a .param
// file and the .bin beside it) into an ONNX model that ONNX Runtime runs
// with the same results. It implements the layers of the waifu2x models
// and of the efficient networks since (SPAN, Real-ESRGAN's compact ones)
// and refuses any other layer, so a model it converts is converted
// exactly (internal/ncnn2onnx). The output is the same bytes for the same
// input.
//
//	ncnn2onnx -o model.onnx [-meta key=value ...] [-int8 dir [-float layers] [-tile n]] model.param
//
// The model's input is "input", NCHW float32 RGB in 0-1, and its output
// "output"; batch, height and width are dynamic. Its metadata records
// upscale.scale, upscale.border (input pixels lost on each side),
// upscale.multiple (input sides must be a multiple of it) and
// upscale.min_input, and each -meta pair.
//
// With -int8, the convolutions, sums, crops and squeeze-and-excitation
// layers that -float does not name are written in ONNX's QDQ form (int8
// weights per output channel, uint8 activations per tensor), with the
// activations' ranges calibrated on tiles of the PNG files in dir by
// internal/ncnn's float64 interpreter (quantize.go); the output is still
// the same bytes for the same input.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/upscalekit/upscale/internal/ncnn"
	"github.com/upscalekit/upscale/internal/ncnn2onnx"
)

// metaFlags collects repeated -meta key=value flags.
type metaFlags [][2]string

func (m *metaFlags) String() string { return fmt.Sprint(*m) }

func (m *metaFlags) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", s)
	}
	*m = append(*m, [2]string{k, v})
	return nil
}

func main() {
	out := flag.String("o", "", "write the ONNX model to this `file`")
	var meta metaFlags
	flag.Var(&meta, "meta", "add a `key=value` pair to the model's metadata (repeatable)")
	var q int8Flags
	flag.StringVar(&q.calibration, "int8", "", "quantise the convolutions to INT8, calibrated on the PNG files of this `directory`")
	flag.StringVar(&q.float, "float", "", "with -int8, keep these convolution `layers` (comma-separated ncnn names) in float32")
	flag.IntVar(&q.tile, "tile", 64, "with -int8, the side of the calibration tiles, in pixels")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: ncnn2onnx -o model.onnx [-meta key=value ...] [-int8 dir [-float layers] [-tile n]] model.param")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *out == "" || flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *out, meta, q); err != nil {
		fmt.Fprintln(os.Stderr, "ncnn2onnx:", err)
		os.Exit(1)
	}
}

// int8Flags are the flags of an INT8 conversion.
type int8Flags struct {
	calibration, float string
	tile               int
}

// quantization calibrates net on the tiles the flags name, or returns
// nil without -int8.
func (f int8Flags) quantization(net *ncnn.Net) (*ncnn2onnx.Quantization, error) {
	if f.calibration == "" {
		return nil, nil
	}
	var float []string
	if f.float != "" {
		float = strings.Split(f.float, ",")
	}
	return ncnn2onnx.NewQuantization(net, f.calibration, f.tile, float)
}

func run(paramPath, outPath string, meta [][2]string, q int8Flags) error {
	param, err := os.ReadFile(paramPath)
	if err != nil {
		return err
	}
	binPath := strings.TrimSuffix(paramPath, ".param") + ".bin"
	bin, err := os.ReadFile(binPath)
	if err != nil {
		return err
	}
	net, err := ncnn.Parse(param, bin)
	if err != nil {
		return fmt.Errorf("%s: %w", paramPath, err)
	}
	name := strings.TrimSuffix(filepath.Base(paramPath), ".param")
	quant, err := q.quantization(net)
	if err != nil {
		return fmt.Errorf("%s: %w", paramPath, err)
	}
	model, g, err := ncnn2onnx.Convert(net, name, meta, quant)
	if err != nil {
		return fmt.Errorf("%s: %w", paramPath, err)
	}
	if err := os.WriteFile(outPath, model.Marshal(), 0o644); err != nil {
		return err
	}
	fmt.Printf("%s: ×%d, border %d, sides a multiple of %d, at least %d", outPath, g.Scale, g.Border, g.Multiple, g.MinInput)
	if g.Halo > 0 {
		fmt.Printf(", halo %d", g.Halo)
	}
	fmt.Println()
	return nil
}
