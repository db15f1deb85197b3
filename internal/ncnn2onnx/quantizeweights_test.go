package ncnn2onnx

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/upscalekit/upscale/internal/ncnn"
)

// TestPatchGramIsTheConvolutionsEnergy: for any weights w, wᵀ·G·w, with G
// patchGram's, is the sum of the squares of what a convolution of those
// weights (one output channel, no bias) makes of the blob on
// internal/ncnn's reference, at strides 1 and 2, padded and not.
func TestPatchGramIsTheConvolutionsEnergy(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	x := ncnn.NewBlob(2, 7, 9)
	for i := range x.Data {
		x.Data[i] = rng.Float64()*2 - 0.5
	}
	for _, shape := range [][3]int{{3, 1, 1}, {3, 2, 0}, {1, 1, 0}} { // kernel, stride, pad
		k, stride, pad := shape[0], shape[1], shape[2]
		d := 2 * k * k
		w := make([]float32, d)
		for i := range w {
			w[i] = float32(rng.NormFloat64())
		}
		net := parse(t, fmt.Sprintf("2 2\nInput in 0 1 data\nConvolution c 1 1 data out 0=1 1=%d 3=%d 4=%d 6=%d\n", k, stride, pad, d), append([]float32{0}, w...)...)
		blobs, err := net.Blobs(x)
		if err != nil {
			t.Fatal(err)
		}
		var energy float64
		for _, v := range blobs["out"].Data {
			energy += v * v
		}
		gram := make([]float64, d*d)
		patchGram(gram, net.Layers[0].Op.(*ncnn.Conv), x)
		var quadratic float64
		for i := range d {
			for j := i; j < d; j++ {
				term := gram[i*d+j] * float64(w[i]) * float64(w[j])
				if j != i {
					term *= 2
				}
				quadratic += term
			}
		}
		if math.Abs(quadratic-energy) > 1e-9*energy {
			t.Errorf("kernel %d, stride %d, pad %d: wᵀGw %.12g, the convolution's energy %.12g", k, stride, pad, quadratic, energy)
		}
	}
}

// TestRoundedWeights: against patches whose values go together, as an
// image's neighbouring pixels do, roundedWeights changes the rows'
// products with them far less than rounding each weight to its nearest
// step, and stays in [−127, 127]; against patches whose values do not go
// together (a diagonal Gram) it is that rounding.
func TestRoundedWeights(t *testing.T) {
	const d, rows, patches = 27, 4, 2000
	rng := rand.New(rand.NewPCG(3, 4))
	weight, scales := make([]float32, rows*d), make([]float32, rows)
	for r := range rows {
		var peak float32
		for j := range d {
			weight[r*d+j] = float32(rng.NormFloat64())
			peak = max(peak, float32(math.Abs(float64(weight[r*d+j]))))
		}
		scales[r] = peak / 127
	}
	nearest := make([]int8, len(weight))
	for i, w := range weight {
		nearest[i] = int8(math.Round(float64(w / scales[i/d])))
	}

	// Each patch: a smooth ramp and a level, shared by all its values,
	// and a little noise of each.
	ps := make([][]float64, patches)
	gram := make([]float64, d*d)
	for p := range ps {
		level, ramp := rng.NormFloat64(), rng.NormFloat64()
		ps[p] = make([]float64, d)
		for j := range d {
			ps[p][j] = level + ramp*float64(j%9)/9 + 0.02*rng.NormFloat64()
		}
		for i := range d {
			for j := i; j < d; j++ {
				gram[i*d+j] += ps[p][i] * ps[p][j]
			}
		}
	}
	moved := func(q []int8) float64 {
		var sum float64
		for r := range rows {
			for _, p := range ps {
				var e float64
				for j := range d {
					e += (float64(weight[r*d+j]) - float64(q[r*d+j])*float64(scales[r])) * p[j]
				}
				sum += e * e
			}
		}
		return sum
	}
	rounded := roundedWeights(weight, d, scales, gram)
	if got, want := moved(rounded), moved(nearest); !(got < want/4) {
		t.Errorf("the products moved by %.3g with the error carried, %.3g rounded to nearest: want under a quarter", got, want)
	}
	if slices.Contains(rounded, -128) {
		t.Error("a weight rounded to −128, outside the symmetric range")
	}

	diagonal := make([]float64, d*d)
	for i := range d {
		diagonal[i*d+i] = 1 + float64(i)
	}
	if got := roundedWeights(weight, d, scales, diagonal); !slices.Equal(got, nearest) {
		t.Errorf("with a diagonal Gram: %v, want the nearest steps %v", got, nearest)
	}
}

// TestCholeskyAndInverse: L·Lᵀ is the matrix, and the inverse times it
// is the identity.
func TestCholeskyAndInverse(t *testing.T) {
	const d = 5
	rng := rand.New(rand.NewPCG(5, 6))
	b := make([]float64, d*d)
	for i := range b {
		b[i] = rng.NormFloat64()
	}
	a := make([]float64, d*d) // B·Bᵀ + I
	for i := range d {
		for j := range d {
			for k := range d {
				a[i*d+j] += b[i*d+k] * b[j*d+k]
			}
		}
		a[i*d+i]++
	}
	l := cholesky(a, d)
	inv := inverse(l, d)
	for i := range d {
		for j := range d {
			var product, identity float64
			for k := range d {
				product += l[i*d+k] * l[j*d+k]
				identity += inv[i*d+k] * a[k*d+j]
			}
			if j > i && l[i*d+j] != 0 {
				t.Errorf("L[%d][%d] = %g above the diagonal", i, j, l[i*d+j])
			}
			if math.Abs(product-a[i*d+j]) > 1e-12 {
				t.Errorf("(L·Lᵀ)[%d][%d] = %g, want %g", i, j, product, a[i*d+j])
			}
			if want := map[bool]float64{true: 1}[i == j]; math.Abs(identity-want) > 1e-12 {
				t.Errorf("(A⁻¹·A)[%d][%d] = %g, want %g", i, j, identity, want)
			}
		}
	}
}

// TestSumGramsInTileOrder: the tiles' Grams are summed in the tiles'
// order whatever order they arrive in, to the same bits.
func TestSumGramsInTileOrder(t *testing.T) {
	values := []float64{1e16, 1, -1e16, 0.5} // a sum that depends on its order
	tiles := func(order ...int) map[string][]float64 {
		ch := make(chan indexedGrams, len(order))
		for _, i := range order {
			ch <- indexedGrams{i, map[string][]float64{"c": {values[i]}}}
		}
		close(ch)
		sums := map[string][]float64{}
		sumGrams(sums, ch)
		return sums
	}
	want := tiles(0, 1, 2, 3)
	for _, order := range [][]int{{3, 2, 1, 0}, {1, 3, 0, 2}} {
		if got := tiles(order...); math.Float64bits(got["c"][0]) != math.Float64bits(want["c"][0]) {
			t.Errorf("arriving %v: %v, want %v as in the tiles' order", order, got["c"], want["c"])
		}
	}
}
