package ncnn2onnx

import (
	"maps"
	"math"
	"slices"
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

// TestBroughtQuantization: for a network an operator brings (no list of
// layers to keep in float32), the convolutions that read or make the
// image stay in float32 and only the others are quantised, not the sum
// (what they read is scaled channel by channel, which only a
// convolution's weights undo), and only theirs have the Grams their
// weights are rounded against; KeepingInFloat keeps one more, and leaves
// q as it was.
func TestBroughtQuantization(t *testing.T) {
	net := parse(t, `9 10
Input in 0 1 data
Convolution a 1 1 data x1 0=3 1=1 6=9
Split s 1 2 x1 x1a x1b
Convolution b 1 1 x1a x2 0=3 1=1 6=9
Swish w 1 1 x2 x3
Convolution c 1 1 x3 x4 0=3 1=1 6=9
Eltwise sum 2 1 x4 x1b x5 0=1
Convolution d 1 1 x5 x6 0=12 1=1 6=36
PixelShuffle ps 1 1 x6 out 0=2
`, make([]float32, 3*10+37)...)
	q, err := NewQuantization(net, "../../testdata/sr/Set5", 16, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := q.Quantized(); !slices.Equal(got, []string{"b", "c"}) {
		t.Errorf("quantised %v, want b and c: a reads the image and d makes it", got)
	}
	if got := slices.Sorted(maps.Keys(q.grams)); !slices.Equal(got, []string{"b", "c"}) || len(q.grams["b"]) != 3*3 {
		t.Errorf("Grams of %v (b's of %d values), want b's and c's, 3 × 3 each", got, len(q.grams["b"]))
	}
	if i := slices.IndexFunc(net.Layers, func(l ncnn.Layer) bool { return l.Name == "sum" }); q.int8Form(net.Layers[i]) {
		t.Error("the sum has an INT8 form in a brought network")
	}
	kept := q.KeepingInFloat("b")
	if got := kept.Quantized(); !slices.Equal(got, []string{"c"}) || len(q.Quantized()) != 2 {
		t.Errorf("b kept in float32: quantised %v, and q %v; want c alone, and q unchanged", got, q.Quantized())
	}
}

// TestChannelScaledCoversEachChannel: one zero point and a step per
// channel hold each channel's range, and zero, in 256 steps; channels
// that are never negative share the least zero point, so that each
// keeps nearly all 255 steps above it.
func TestChannelScaledCoversEachChannel(t *testing.T) {
	for _, ranges := range [][][2]float64{
		{{0, 1}, {-0.5, 91}, {-2, -1}, {0, 0}},
		{{0, 1}, {0.2, 40}, {0, 0.001}},
	} {
		q, steps := channelScaled(ranges)
		if q.scale != 1 {
			t.Errorf("%v: scale %v, want 1 (the steps are the channels')", ranges, q.scale)
		}
		z := float64(q.zero)
		nonNegative := true
		for i, r := range ranges {
			s := float64(steps[i])
			if lo, hi := min(r[0], 0), max(r[1], 0); -lo > z*s*(1+1e-6) || hi > (255-z)*s*(1+1e-6) {
				t.Errorf("%v: channel %d, %v, not held by steps of %v above zero point %v", ranges, i, r, s, z)
			}
			nonNegative = nonNegative && r[0] >= 0
		}
		if nonNegative && q.zero != 1 {
			t.Errorf("%v: zero point %d for channels never negative, want 1", ranges, q.zero)
		}
		for i, r := range ranges {
			if nonNegative && r[1] > 0 && float64(steps[i]) > r[1]/250 {
				t.Errorf("%v: channel %d, %v, in steps of %v: wider than its range needs", ranges, i, r, steps[i])
			}
		}
	}
}
