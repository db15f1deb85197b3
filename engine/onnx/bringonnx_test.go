package onnx

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/upscalekit/upscale/internal/ncnn"
	"github.com/upscalekit/upscale/internal/ncnn2onnx"
)

// TestMeasureGeometry: a network of three padded 3×3 convolutions then a
// pixel shuffle, with random weights, measures what its layers say: ×2,
// and a receptive field of 3 source pixels, read with haloMargin more.
func TestMeasureGeometry(t *testing.T) {
	param := `7767517
5 5
Input in 0 1 data
Convolution c1 1 1 data a 0=8 1=3 4=1 5=1 6=216
Convolution c2 1 1 a b 0=8 1=3 4=1 5=1 6=576
Convolution c3 1 1 b c 0=12 1=3 4=1 5=1 6=864
PixelShuffle ps 1 1 c out 0=2
`
	rng := rand.New(rand.NewPCG(1, 2))
	var bin bytes.Buffer
	for _, n := range []int{216, 8, 576, 8, 864, 12} {
		if n > 12 {
			binary.Write(&bin, binary.LittleEndian, float32(0)) // the tag of float32 weights
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = rng.Float32() - 0.5
		}
		binary.Write(&bin, binary.LittleEndian, v)
	}
	net, err := ncnn.Parse([]byte(param), bin.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	model, g, err := ncnn2onnx.Convert(net, "three", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := NewONNXRuntime(DefaultLibrary())
	if err != nil {
		t.Fatal(err)
	}
	scale, halo, err := measureGeometry(context.Background(), rt, model.Marshal())
	if err != nil || scale != 2 || halo != g.Halo+haloMargin || g.Halo != 3 {
		t.Errorf("measured ×%d, halo %d, %v; want ×2 and %d (the layers' %d and the margin)", scale, halo, err, 3+haloMargin, g.Halo)
	}
}
