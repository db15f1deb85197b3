package ncnn2onnx

import (
	"math"
	"testing"

	"github.com/upscalekit/upscale/internal/ncnn"
)

// TestQuantizedRangeCoversItsRange: the 256 steps cover the range given,
// and zero (the convolutions' padding), to within the rounding of the
// zero point to a step.
func TestQuantizedRangeCoversItsRange(t *testing.T) {
	for _, r := range [][2]float64{{-0.37, 2.9}, {0.2, 1}, {-3, -1}, {0, 0}, {-0.001, 250}} {
		q := quantizedRange(r[0], r[1])
		lo, hi := float64(q.scale)*-float64(q.zero), float64(q.scale)*(255-float64(q.zero))
		step := float64(q.scale)
		if lo > min(r[0], 0)+step/2 || hi < max(r[1], 0)-step/2 || hi-lo > max(r[1], 0)-min(r[0], 0)+2*step+1e-6 {
			t.Errorf("%v: steps of %v cover %v to %v", r, step, lo, hi)
		}
	}
}

// TestShuffledEqualsDeconvolution: a deconvolution whose kernel is its
// stride equals the 1×1 convolution with shuffled's weights followed by
// DepthToSpace in DCR order, on internal/ncnn's reference.
func TestShuffledEqualsDeconvolution(t *testing.T) {
	const in, out, k = 3, 2, 2
	weights := []float32{0} // ncnn's tag for float32 weights, then weights, then bias
	for i := range out * in * k * k {
		weights = append(weights, float32(math.Sin(float64(i)+1)))
	}
	weights = append(weights, 0.5, -0.25)
	net := parse(t, `2 2
Input in 0 1 data 0=3 1=3 2=3
Deconvolution d 1 1 data out 0=2 1=2 3=2 5=1 6=24
`, weights...)
	x := ncnn.NewBlob(in, 3, 3)
	for i := range x.Data {
		x.Data[i] = math.Cos(float64(i))
	}
	want, err := net.Forward(x)
	if err != nil {
		t.Fatal(err)
	}
	weight, bias := shuffled(net.Layers[len(net.Layers)-1].Op.(*ncnn.Conv))
	for c := range out {
		for y := range want.H {
			for col := range want.W {
				// DCR: output (c, y, x) is channel ((y%k)·k + x%k)·out + c
				// of the 1×1 convolution at (y/k, x/k).
				ch := ((y%k)*k+col%k)*out + c
				sum := float64(bias[ch])
				for i := range in {
					sum += float64(weight[ch*in+i]) * x.Data[(i*x.H+y/k)*x.W+col/k]
				}
				if got := want.Data[(c*want.H+y)*want.W+col]; math.Abs(got-sum) > 1e-6 {
					t.Fatalf("(%d, %d, %d): deconvolution %v, shuffled 1×1 convolution %v", c, y, col, got, sum)
				}
			}
		}
	}
}
