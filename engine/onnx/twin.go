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

// twinTarget is the distance MakeTwin keeps convolutions in float32 to
// reach: above the floor, as the waifu2x twins are (cunet's 53-57 dB),
// so that INT8 costs a network's scores hundredths of a dB, not tenths.
const twinTarget = 48

// A Twin is a brought network's INT8 twin (Model.INT8).
type Twin struct {
	// Data is the ONNX file, in ncnn2onnx's QDQ form. Its metadata
	// records PSNR (upscale.int8_psnr) and Float (upscale.int8_float).
	Data []byte
	// Float are the convolutions kept in float32 beyond those that read
	// or make the image (ncnn names), costliest in INT8 first.
	Float []string
	// Quantized are the convolutions in INT8.
	Quantized []string
	// PSNR is the least distance of its calibration tiles' results from
	// float32's, in dB.
	PSNR float64
}

// MakeTwin makes the INT8 twin of m's network (its ncnn files, m.Param)
// on rt, calibrated on side × side tiles of the PNG files of dir
// (ncnn2onnx.NewQuantization). Every convolution is quantised but those
// that read or make the image, and those whose quantisation costs most:
// each is measured quantised alone, and the worst are kept in float32,
// one by one, until the tiles' results are within twinTarget dB of
// float32's on rt. A twin still under TwinFloor is refused with an error
// that says how far it got.
//
// Quantisation after training rounds what each convolution reads to 256
// steps; networks whose activations span a wide range lose more than
// others (docs/engines.md measures SPAN's and Real-ESRGAN's).
func MakeTwin(ctx context.Context, rt Runtime, m Model, dir string, side int) (Twin, error) {
	if m.Param == "" {
		return Twin{}, errors.New("onnx: MakeTwin: a twin is made from a network's ncnn files (Model.Param)")
	}
	if !slices.Contains(rt.Precisions(), INT8) {
		return Twin{}, fmt.Errorf("onnx: MakeTwin: %s runs no INT8 on this CPU", rt.Name())
	}
	net, err := readNet(m.Param)
	if err != nil {
		return Twin{}, fmt.Errorf("onnx: MakeTwin: %s: %w", m.Param, err)
	}
	q, err := ncnn2onnx.NewQuantization(net, dir, side, nil)
	if err != nil {
		return Twin{}, fmt.Errorf("onnx: MakeTwin: %w", err)
	}
	quantized := q.Quantized()
	if len(quantized) == 0 {
		return Twin{}, fmt.Errorf("onnx: MakeTwin: %s has no convolution between those that read and make the image to quantise", m.Param)
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
			least = min(least, tilePSNR(got[i], want[i]))
		}
		return least, nil
	}
	psnr, err := distance(q)
	if err != nil {
		return Twin{}, err
	}
	var kept []string
	if psnr < twinTarget {
		// Each convolution quantised alone, the costliest kept first.
		alone := make(map[string]float64, len(quantized))
		for _, c := range quantized {
			if alone[c], err = distance(q.KeepingInFloat(slices.DeleteFunc(slices.Clone(quantized), func(o string) bool { return o == c })...)); err != nil {
				return Twin{}, err
			}
		}
		slices.SortStableFunc(quantized, func(a, b string) int { return cmp.Compare(alone[a], alone[b]) })
		for psnr < twinTarget && len(kept) < len(quantized)-1 {
			kept = quantized[:len(kept)+1]
			if psnr, err = distance(q.KeepingInFloat(kept...)); err != nil {
				return Twin{}, err
			}
		}
	}
	if psnr < TwinFloor {
		return Twin{}, fmt.Errorf("onnx: MakeTwin: %s: its INT8 twin is %.1f dB from float32 with %d of its %d quantisable convolutions in float32, under the %d dB a twin must keep; run it in float32 or bfloat16", m.Param, psnr, len(kept), len(quantized), TwinFloor)
	}
	twin, err := convertNet(net, m, q.KeepingInFloat(kept...),
		[2]string{"upscale.int8_psnr", strconv.FormatFloat(psnr, 'f', 1, 64)}, [2]string{"upscale.int8_float", strings.Join(kept, ",")})
	if err != nil {
		return Twin{}, err
	}
	return Twin{Data: twin.Data, Float: slices.Clone(kept), Quantized: slices.Clone(quantized[len(kept):]), PSNR: psnr}, nil
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

// tilePSNR is the PSNR of got against want, both clipped to 0-1.
func tilePSNR(got, want []float32) float64 {
	var sum float64
	for i := range got {
		d := float64(min(max(got[i], 0), 1)) - float64(min(max(want[i], 0), 1))
		sum += d * d
	}
	if sum == 0 {
		return math.Inf(1)
	}
	return 10 * math.Log10(float64(len(got))/sum)
}
