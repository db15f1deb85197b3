package onnx

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"

	"github.com/upscalekit/upscale/engine/onnx/models"
	"github.com/upscalekit/upscale/internal/onnxpb"
)

// readONNX reads m.ONNX, a network brought as an ONNX file: its geometry
// from its metadata where it has upscale.scale (as ncnn2onnx writes it),
// else measured on rt (measureGeometry).
func readONNX(ctx context.Context, rt Runtime, m Model) (*models.Network, error) {
	data, err := os.ReadFile(m.ONNX)
	if err != nil {
		return nil, err
	}
	file, err := onnxpb.Unmarshal(data)
	if err != nil {
		return nil, fmt.Errorf("not an ONNX file: %w", err)
	}
	if _, ok := file.MetadataValue("upscale.scale"); ok {
		n, err := models.Parse(m.Name, data)
		if err != nil {
			return nil, err
		}
		n.Source = m.ONNX
		return n, nil
	}
	n := &models.Network{Name: m.Name, Data: data, Multiple: 1, MinInput: 1, Source: m.ONNX}
	if n.Scale, n.Halo, err = measureGeometry(ctx, rt, data); err != nil {
		return nil, err
	}
	return n, nil
}

// haloMargin is how many pixels measureGeometry adds to the receptive
// field it measures.
const haloMargin = 2

// measureGeometry measures a network that keeps its borders (its
// convolutions padded) on rt: its scale, ×2 or ×4, the one whose result a
// tile takes; and its receptive field, the farthest, in source pixels,
// that a change to one pixel of a random tile moves the result (of two
// such changes), on tiles of 64, 128, then 256 pixels until the field
// fits inside one, and haloMargin more.
//
// Where a change reaches its farthest only through the kernels' corner
// taps it is small, and float32 may round it away: the margin covers
// that. A halo too wide costs time; one too narrow would show seams.
func measureGeometry(ctx context.Context, rt Runtime, data []byte) (scale, halo int, err error) {
	network, err := rt.Load(data, FP32, 0)
	if err != nil {
		return 0, 0, err
	}
	defer network.Close()
	rng := rand.New(rand.NewPCG(5, 8))
	for n := 64; n <= 256; n *= 2 {
		x := make([]float32, 3*n*n)
		for i := range x {
			x[i] = rng.Float32()
		}
		if scale == 0 {
			var errs []error
			for _, s := range []int{2, 4} {
				err := network.Run(ctx, x, n, n, make([]float32, 3*s*s*n*n))
				if err == nil {
					scale = s
					break
				}
				if ctx.Err() != nil {
					return 0, 0, ctx.Err()
				}
				errs = append(errs, fmt.Errorf("×%d: %w", s, err))
			}
			if scale == 0 {
				return 0, 0, fmt.Errorf("a network without upscale metadata must make ×2 or ×4 of a tile of any size, its borders kept (its convolutions padded); give upscale.scale, upscale.border, upscale.multiple and upscale.min_input in its metadata if it does not (%w)", errors.Join(errs...))
			}
		}
		base := make([]float32, 3*scale*scale*n*n)
		if err := network.Run(ctx, x, n, n, base); err != nil {
			return 0, 0, err
		}
		reach, edge := 0.0, false
		for _, change := range []float32{0.5, 0.25} {
			c := n / 2
			y := make([]float32, len(base))
			moved := append([]float32(nil), x...)
			for ch := range 3 {
				i := (ch*n+c)*n + c
				moved[i] = float32(math.Mod(float64(moved[i]+change), 1))
			}
			if err := network.Run(ctx, moved, n, n, y); err != nil {
				return 0, 0, err
			}
			side := scale * n
			for i := range y {
				if y[i] == base[i] {
					continue
				}
				oy, ox := i/side%side, i%side
				// The source pixel an output pixel falls in.
				d := max(math.Abs(float64(oy/scale-c)), math.Abs(float64(ox/scale-c)))
				reach = max(reach, d)
				edge = edge || oy == 0 || ox == 0 || oy == side-1 || ox == side-1
			}
		}
		if !edge {
			return scale, int(reach) + haloMargin, nil
		}
	}
	return 0, 0, errors.New("its receptive field is wider than 256 pixels")
}
