// Command ncnn2onnx converts a neural network from ncnn's format (a .param
// file and the .bin beside it) into an ONNX model that ONNX Runtime runs
// with the same results. It implements the layers of the waifu2x models
// (convolution, deconvolution, squeeze-and-excitation blocks, crops and
// sums) and refuses any other layer, so a model it converts is converted
// exactly. The output is the same bytes for the same input.
//
//	ncnn2onnx -o model.onnx [-meta key=value ...] model.param
//
// The model's input is "input", NCHW float32 RGB in 0-1, and its output
// "output"; batch, height and width are dynamic. Its metadata records
// upscale.scale, upscale.border (input pixels lost on each side),
// upscale.multiple (input sides must be a multiple of it) and
// upscale.min_input, and each -meta pair.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/upscalekit/upscale/internal/ncnn"
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
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: ncnn2onnx -o model.onnx [-meta key=value ...] model.param")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *out == "" || flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *out, meta); err != nil {
		fmt.Fprintln(os.Stderr, "ncnn2onnx:", err)
		os.Exit(1)
	}
}

func run(paramPath, outPath string, meta [][2]string) error {
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
	model, g, err := convert(net, name, meta)
	if err != nil {
		return fmt.Errorf("%s: %w", paramPath, err)
	}
	if err := os.WriteFile(outPath, model.Marshal(), 0o644); err != nil {
		return err
	}
	fmt.Printf("%s: ×%d, border %d, sides a multiple of %d, at least %d\n", outPath, g.Scale, g.Border, g.Multiple, g.MinInput)
	return nil
}
