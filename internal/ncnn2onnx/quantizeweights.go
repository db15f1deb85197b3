package ncnn2onnx

import (
	"cmp"
	"math"
	"slices"

	"github.com/upscalekit/upscale/internal/ncnn"
)

// The weights of a brought network's quantised convolution are rounded
// to int8 against what the convolution reads (roundedWeights): what it
// reads is scaled channel by channel to one uint8 range (channelScaled),
// and its weights the other way, so a row of weights spans the ranges of
// all its input channels and rounding each to the nearest step cost SPAN
// ×2's twin with every inner convolution in INT8 most of its error: 38.6
// dB from float32 on a drawing with its weights so rounded and its inputs
// not quantised, 48.8 with its inputs quantised and its weights not (ONNX
// Runtime, four Set14 tiles of 64). Rounded against their patches, all
// 20 in INT8 kept 44.9 dB (oneDNN, AMD EPYC, AVX-512).

// patchGram adds to gram (d × d, row-major, d = conv.In·k², its upper
// triangle) the products of every k × k patch of x that conv reads
// (zero beyond x's edges) with itself: the second moments of what each
// of its results is made of, in the order of its weights. Patches are
// added four at a time, which reads and writes gram a quarter as often.
func patchGram(gram []float64, conv *ncnn.Conv, x *ncnn.Blob) {
	k, d := conv.Kernel, conv.In*conv.Kernel*conv.Kernel
	outH := (x.H+2*conv.Pad-k)/conv.Stride + 1
	outW := (x.W+2*conv.Pad-k)/conv.Stride + 1
	const batch = 4
	var patches [batch][]float64
	for b := range patches {
		patches[b] = make([]float64, d)
	}
	n := 0 // patches gathered
	add := func() {
		for b := n; b < batch; b++ {
			clear(patches[b])
		}
		p0, p1, p2, p3 := patches[0], patches[1], patches[2], patches[3]
		for i := range d {
			a0, a1, a2, a3 := p0[i], p1[i], p2[i], p3[i]
			if a0 == 0 && a1 == 0 && a2 == 0 && a3 == 0 {
				continue
			}
			row := gram[i*d+i : (i+1)*d]
			q0, q1, q2, q3 := p0[i:i+len(row)], p1[i:i+len(row)], p2[i:i+len(row)], p3[i:i+len(row)]
			for j := range row {
				// The conversions keep each product rounded on its own,
				// so that no machine fuses one into a sum and the twin
				// is the same bytes everywhere.
				row[j] += float64(a0*q0[j]) + float64(a1*q1[j]) + float64(a2*q2[j]) + float64(a3*q3[j])
			}
		}
		n = 0
	}
	for oy := range outH {
		for ox := range outW {
			patch := patches[n]
			for c := range conv.In {
				for ky := range k {
					for kx := range k {
						y, xx := oy*conv.Stride-conv.Pad+ky, ox*conv.Stride-conv.Pad+kx
						v := 0.0
						if y >= 0 && y < x.H && xx >= 0 && xx < x.W {
							v = x.Data[(c*x.H+y)*x.W+xx]
						}
						patch[(c*k+ky)*k+kx] = v
					}
				}
			}
			if n++; n == batch {
				add()
			}
		}
	}
	if n > 0 {
		add()
	}
}

// gramDamping is the share of its mean diagonal added to a Gram's
// diagonal, so that weights a patch never moves (a channel always zero)
// carry no error: SPAN ×2's all-INT8 twin kept 44.9 dB with 1%, 44.6
// with 0.1% and 44.0 with 10%.
const gramDamping = 0.01

// roundedWeights rounds weight, rows of d, each row r to the int8 steps
// of scales[r] in [−127, 127], so that each row's products with the
// patches whose second moments are gram (patchGram's) move least: the
// weights are rounded one at a time, the most used first (the largest
// diagonal), and the error of each is carried into the weights not yet
// rounded, in proportion to how their values go with its value in the
// patches (Frantar et al., GPTQ, 2022). With patches whose values go
// together in no way (a diagonal gram) that is rounding to the nearest
// step.
func roundedWeights(weight []float32, d int, scales []float32, gram []float64) []int8 {
	order := make([]int, d)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(gram[b*d+b], gram[a*d+a]) })
	var mean float64
	for i := range d {
		mean += gram[i*d+i] / float64(d)
	}
	h := make([]float64, d*d) // gram, whole, in order
	for i, oi := range order {
		for j, oj := range order {
			h[i*d+j] = gram[min(oi, oj)*d+max(oi, oj)]
		}
		h[i*d+i] += gramDamping * max(mean, 1e-12)
	}
	u := cholesky(inverse(cholesky(h, d), d), d)
	rounded := make([]int8, len(weight))
	w := make([]float64, d)
	for r := range len(weight) / d {
		s := float64(scales[r])
		for j, o := range order {
			w[j] = float64(weight[r*d+o])
		}
		for j, o := range order {
			q := min(max(math.Round(w[j]/s), -127), 127)
			rounded[r*d+o] = int8(q)
			// u is lower: its column j is the row of the upper factor
			// of h⁻¹ that carries the error on.
			e := (w[j] - float64(q*s)) / u[j*d+j]
			for k := j + 1; k < d; k++ {
				w[k] -= float64(e * u[k*d+j])
			}
		}
	}
	return rounded
}

// cholesky returns L, lower triangular, with L·Lᵀ = a (d × d, row-major,
// symmetric positive definite).
func cholesky(a []float64, d int) []float64 {
	l := make([]float64, d*d)
	for i := range d {
		for j := 0; j <= i; j++ {
			sum := a[i*d+j]
			for k := range j {
				sum -= float64(l[i*d+k] * l[j*d+k])
			}
			if i == j {
				l[i*d+i] = math.Sqrt(max(sum, 1e-300))
			} else {
				l[i*d+j] = sum / l[j*d+j]
			}
		}
	}
	return l
}

// inverse returns (L·Lᵀ)⁻¹ for l lower triangular (d × d, row-major).
func inverse(l []float64, d int) []float64 {
	li := make([]float64, d*d) // L⁻¹, by forward substitution
	for col := range d {
		li[col*d+col] = 1 / l[col*d+col]
		for i := col + 1; i < d; i++ {
			var sum float64
			for k := col; k < i; k++ {
				sum -= float64(l[i*d+k] * li[k*d+col])
			}
			li[i*d+col] = sum / l[i*d+i]
		}
	}
	inv := make([]float64, d*d) // L⁻ᵀ·L⁻¹
	for i := range d {
		for j := i; j < d; j++ {
			var sum float64
			for k := j; k < d; k++ {
				sum += float64(li[k*d+i] * li[k*d+j])
			}
			inv[i*d+j], inv[j*d+i] = sum, sum
		}
	}
	return inv
}
