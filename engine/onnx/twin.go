package onnx

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/upscalekit/upscale/engine/onnx/models"
	"github.com/upscalekit/upscale/internal/ncnn2onnx"
)

// TwinFloor is the least distance from float32, in dB, that MakeTwin lets
// an INT8 twin's calibration tiles have: below it a twin is refused.
const TwinFloor = 42

// DefaultTwinTarget is the distance from float32 MakeTwin keeps
// convolutions in float to reach unless told another: above the floor,
// as the waifu2x twins are (cunet's 53-57 dB), so that INT8 costs a
// network's scores hundredths of a dB, not tenths.
const DefaultTwinTarget = 48

// TwinOptions are what MakeTwin calibrates a twin on, and how near
// float32 it keeps it.
type TwinOptions struct {
	// Calibration is a directory of PNG images like those the network
	// will enlarge.
	Calibration string
	// Tile is the side of the calibration tiles, in pixels (16 or more;
	// ncnn2onnx.NewQuantization). Zero means 64.
	Tile int
	// Target is the distance from float32, in dB, that MakeTwin keeps
	// convolutions in float to reach: at least TwinFloor. Zero means
	// DefaultTwinTarget. A lower target leaves more in INT8, faster and
	// further from float32: SPAN ×2's twin at 42 has all 20 of its inner
	// convolutions in INT8 (44.9 dB) and scores Set5 ×2 0.10 dB under
	// the one at 48 (docs/engines.md).
	Target float64
}

// twinOf is the metadata key under which a twin records the digest of
// the ncnn files it was made of (readNet).
const twinOf = "upscale.int8_of"

// A Twin is a brought network's INT8 twin (Model.INT8).
type Twin struct {
	// Data is the ONNX file, in ncnn2onnx's QDQ form. Its metadata
	// records PSNR (upscale.int8_psnr), Float (upscale.int8_float) and
	// the files it was made of (upscale.int8_of).
	Data []byte
	// Float are the convolutions kept in float beyond those that read or
	// make the image (ncnn names), costliest in INT8 first: float32, or
	// bfloat16 where oneDNN runs INT8 on a CPU with it.
	Float []string
	// Quantized are the convolutions in INT8, in the network's order.
	Quantized []string
	// PSNR is the least distance of its calibration tiles' results from
	// float32's, in dB, on the runtime that made it (its float layers
	// in bfloat16 where that runtime runs INT8 so).
	PSNR float64
}

// MakeTwin makes the INT8 twin of m's network (its ncnn files, m.Param)
// on rt, calibrated on tiles of the PNG files of opts.Calibration
// (ncnn2onnx.NewQuantization). Every convolution is quantised but those
// that read or make the image, and those whose quantisation costs most:
// each is measured quantised alone, and the worst are kept in float, one
// by one, until the tiles' results are within opts.Target dB of
// float32's on rt. A twin still under TwinFloor is refused with an error
// that says how far it got, as is a Target under it.
//
// Quantisation after training rounds what each convolution reads to 256
// steps; networks whose activations span a wide range lose more than
// others (docs/engines.md measures SPAN's and Real-ESRGAN's).
func MakeTwin(ctx context.Context, rt Runtime, m Model, opts TwinOptions) (Twin, error) {
	if m.Param == "" {
		return Twin{}, errors.New("onnx: MakeTwin: a twin is made from a network's ncnn files (Model.Param)")
	}
	opts.Tile, opts.Target = cmp.Or(opts.Tile, 64), cmp.Or(opts.Target, DefaultTwinTarget)
	if !(opts.Target >= TwinFloor) {
		return Twin{}, fmt.Errorf("onnx: MakeTwin: a target of %g dB is under the %d dB a twin must keep", opts.Target, TwinFloor)
	}
	if !slices.Contains(rt.Precisions(), INT8) {
		return Twin{}, fmt.Errorf("onnx: MakeTwin: %s runs no INT8 on this CPU; try the other runtime", rt.Name())
	}
	twin, err := makeTwin(ctx, rt, m, opts)
	if err != nil {
		return Twin{}, fmt.Errorf("onnx: MakeTwin: %s: %w", m.Param, err)
	}
	return twin, nil
}

// makeTwin is MakeTwin's work, its errors not yet prefixed.
func makeTwin(ctx context.Context, rt Runtime, m Model, opts TwinOptions) (Twin, error) {
	net, digest, err := readNet(m.Param)
	if err != nil {
		return Twin{}, err
	}
	q, err := ncnn2onnx.NewQuantization(net, opts.Calibration, opts.Tile, nil)
	if err != nil {
		return Twin{}, err
	}
	quantized := q.Quantized()
	if len(quantized) == 0 {
		return Twin{}, errors.New("no convolution between those that read and make the image to quantise")
	}
	float, err := convertNet(net, m, nil)
	if err != nil {
		return Twin{}, err
	}
	tiles, side := q.Tiles()
	want, err := runTiles(ctx, rt, float, FP32, tiles, side)
	if err != nil {
		return Twin{}, err
	}
	// distance is the twin of q's least PSNR from float32 over the tiles.
	distance := func(q *ncnn2onnx.Quantization) (float64, error) {
		twin, err := convertNet(net, m, q)
		if err != nil {
			return 0, err
		}
		got, err := runTiles(ctx, rt, twin, INT8, tiles, side)
		if err != nil {
			return 0, err
		}
		least := math.Inf(1)
		for i := range got {
			least = min(least, TilePSNR(got[i], want[i]))
		}
		return least, nil
	}
	psnr, err := distance(q)
	if err != nil {
		return Twin{}, err
	}
	// NaN is never good enough: each bar is asked as "not at least".
	var kept []string
	if !(psnr >= opts.Target) && len(quantized) > 1 {
		// Each convolution quantised alone, the costliest kept first.
		alone := make(map[string]float64, len(quantized))
		for _, c := range quantized {
			if alone[c], err = distance(q.KeepingInFloat(slices.DeleteFunc(slices.Clone(quantized), func(o string) bool { return o == c })...)); err != nil {
				return Twin{}, err
			}
		}
		costliest := slices.SortedStableFunc(slices.Values(quantized), func(a, b string) int { return cmp.Compare(alone[a], alone[b]) })
		for !(psnr >= opts.Target) && len(kept) < len(quantized)-1 {
			kept = costliest[:len(kept)+1]
			if psnr, err = distance(q.KeepingInFloat(kept...)); err != nil {
				return Twin{}, err
			}
		}
	}
	if !(psnr >= TwinFloor) {
		return Twin{}, fmt.Errorf("its INT8 twin is %.1f dB from float32 with %d of its %d quantisable convolutions kept in float, under the %d dB a twin must keep; run it in float32 or bfloat16", psnr, len(kept), len(quantized), TwinFloor)
	}
	final := q.KeepingInFloat(kept...)
	twin, err := convertNet(net, m, final, [2]string{twinOf, digest},
		[2]string{"upscale.int8_psnr", strconv.FormatFloat(psnr, 'f', 1, 64)}, [2]string{"upscale.int8_float", strings.Join(kept, ",")})
	if err != nil {
		return Twin{}, err
	}
	return Twin{Data: twin.Data, Float: slices.Clone(kept), Quantized: final.Quantized(), PSNR: psnr}, nil
}

// runTiles runs n on rt in precision on each of tiles, side × side.
func runTiles(ctx context.Context, rt Runtime, n *models.Network, precision Precision, tiles [][]float32, side int) ([][]float32, error) {
	network, err := rt.Load(n.Data, precision, 0)
	if err != nil {
		return nil, err
	}
	defer network.Close()
	out := make([][]float32, len(tiles))
	for i, x := range tiles {
		o := n.OutputSize(side)
		out[i] = make([]float32, 3*o*o)
		if err := network.Run(ctx, x, side, side, out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// TilePSNR is the PSNR of got against want, a network's results as
// planes of float32, both clipped to 0-1: the distance from float32 that
// a Twin's PSNR and TwinFloor are in.
func TilePSNR(got, want []float32) float64 {
	var sum float64
	for i := range want {
		d := float64(min(max(got[i], 0), 1)) - float64(min(max(want[i], 0), 1))
		sum += d * d
	}
	if sum == 0 {
		return math.Inf(1)
	}
	return 10 * math.Log10(float64(len(want))/sum)
}
