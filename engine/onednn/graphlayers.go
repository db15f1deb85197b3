package onednn

import (
	"errors"
	"fmt"
	"slices"

	"github.com/upscalekit/upscale/internal/onnxpb"
)

// activation fuses the LeakyRelu or Relu that is the only consumer of a
// layer's output, or the swish that is its two (x · Sigmoid(x)), and
// returns the name of the activated output.
func (c *compiler) activation(l *layer, out string) string {
	if product := c.swishOf(out); product != nil {
		l.act = swish
		return product.Outputs[0]
	}
	next := c.only(out)
	if next == nil {
		return out
	}
	switch next.Op {
	case "LeakyRelu":
		l.act, l.slope = leakyReLU, attrFloat(next, "alpha", 0.01)
	case "Relu":
		l.act, l.slope = leakyReLU, 0
	default:
		return out
	}
	c.done[next] = true
	return next.Outputs[0]
}

func (c *compiler) weightsAndBias(n *onnxpb.Node) (w []float32, dims []int64, b []float32, err error) {
	if len(n.Inputs) < 2 {
		return nil, nil, nil, fmt.Errorf("no weights")
	}
	if w, dims, err = c.floats(n.Inputs[1]); err != nil {
		return nil, nil, nil, err
	}
	if len(dims) != 4 || dims[2] != dims[3] {
		return nil, nil, nil, fmt.Errorf("weights of shape %v: want a square kernel", dims)
	}
	if len(n.Inputs) > 2 {
		if b, _, err = c.floats(n.Inputs[2]); err != nil {
			return nil, nil, nil, err
		}
	}
	return w, dims, b, nil
}

// int8Weights returns a Conv's weights as the QDQ form stores them: int8,
// symmetric, with a scale for each output channel.
func (c *compiler) int8Weights(n *onnxpb.Node, outC int) ([]int8, []float32, bool) {
	d, ok := c.constants[n.Inputs[1]]
	if !ok || d.q.Type != onnxpb.Int8 {
		return nil, nil, false
	}
	scale, err := d.scale.Floats()
	zeros, err2 := d.zero.Ints32()
	if err != nil || err2 != nil || len(scale) != outC || slices.ContainsFunc(zeros, func(z int32) bool { return z != 0 }) {
		return nil, nil, false
	}
	q := make([]int8, len(d.q.Raw))
	for i, b := range d.q.Raw {
		q[i] = int8(b)
	}
	return q, scale, true
}

// kernel is what a Conv or a ConvTranspose reads: its input, weights
// and bias, channels, and square kernel, stride and padding.
type kernel struct {
	in                        value
	weights, bias             []float32
	inC, outC, k, stride, pad int
}

// kernelOf reads n's kernel; a ConvTranspose's weights are [in][out][k][k],
// a Conv's [out][in][k][k].
func (c *compiler) kernelOf(n *onnxpb.Node, transposed bool) (kernel, error) {
	in, err := c.input(n.Inputs[0])
	if err != nil {
		return kernel{}, err
	}
	w, dims, b, err := c.weightsAndBias(n)
	if err != nil {
		return kernel{}, err
	}
	kn := kernel{in: in, weights: w, bias: b, outC: int(dims[0]), inC: int(dims[1]), k: int(dims[2])}
	if transposed {
		kn.inC, kn.outC = kn.outC, kn.inC
	}
	if kn.inC != c.g.values[in].channels {
		return kernel{}, fmt.Errorf("weights for %d input channels, the input has %d", kn.inC, c.g.values[in].channels)
	}
	kn.stride, kn.pad, err = geometry(n, kn.k)
	return kn, err
}

func (c *compiler) conv(n *onnxpb.Node) error {
	kn, err := c.kernelOf(n, false)
	if err != nil {
		return err
	}
	outC := kn.outC
	l := layer{kind: convolution, name: n.Name, in: kn.in, k: kn.k, stride: kn.stride, pad: kn.pad, weights: kn.weights, bias: kn.bias}
	l.weights8, l.wscale, _ = c.int8Weights(n, outC)
	out := c.activation(&l, n.Outputs[0])
	// A Conv whose result a DepthToSpace spreads is a transposed
	// convolution's phases (ncnn2onnx's form of a 2×2 one), or a pixel
	// shuffle's (SPAN's and Real-ESRGAN's upsampler).
	if d2s := c.only(out); d2s != nil && d2s.Op == "DepthToSpace" && l.stride == 1 {
		s := int(attrInt(d2s, "blocksize", 0))
		mode := attrString(d2s, "mode", "DCR")
		if mode != "DCR" && mode != "CRD" || s < 1 || outC%(s*s) != 0 {
			return fmt.Errorf("%s: want a DepthToSpace of mode DCR or CRD and a block size that divides the channels", d2s.Name)
		}
		if mode == "CRD" {
			toDCR(&l, outC/(s*s), s)
		}
		c.done[d2s] = true
		l.kind, l.s = transposed, s
		return c.spread(&l, out, d2s.Outputs[0], outC/(s*s))
	}
	out, l.post = c.channelProduct(out, outC)
	if l.out, err = c.newValue(out, outC, outC == 3); err != nil {
		return err
	}
	c.g.layers = append(c.g.layers, l)
	return nil
}

// channelProduct fuses, into the layer whose result is out (of channels
// channels: a convolution or a concat), the Mul that alone reads out when
// its other operand is a constant of one value a channel ([1, channels,
// 1, 1]): it marks the Mul done and returns the product's name and the
// constant. Otherwise it returns out and nil.
func (c *compiler) channelProduct(out string, channels int) (string, []float32) {
	mul := c.only(out)
	if mul == nil || mul.Op != "Mul" || len(mul.Inputs) != 2 {
		return out, nil
	}
	factor := mul.Inputs[1]
	if mul.Inputs[1] == out {
		factor = mul.Inputs[0]
	}
	v, dims, err := c.floats(factor)
	if err != nil || len(v) != channels || !slices.Equal(dims, []int64{1, int64(channels), 1, 1}) {
		return out, nil
	}
	c.done[mul] = true
	return mul.Outputs[0], v
}

// toDCR reorders the output channels of l, a convolution whose result a
// DepthToSpace of mode CRD spreads (channel (o·s + qy)·s + qx to phase
// qy, qx of channel o), into the order of mode DCR that the depth-to-space
// loop reads ((qy·s + qx)·channels + o).
func toDCR(l *layer, channels, s int) {
	from := make([]int, channels*s*s) // the CRD channel of each DCR one
	for o := range channels {
		for q := range s * s {
			from[q*channels+o] = o*s*s + q
		}
	}
	rows := len(l.weights) / len(from)
	l.weights = permuteRows(l.weights, from, rows)
	if l.bias != nil {
		l.bias = permuteRows(l.bias, from, 1)
	}
	if l.weights8 != nil {
		l.weights8 = permuteRows(l.weights8, from, rows)
		l.wscale = permuteRows(l.wscale, from, 1)
	}
}

// permuteRows returns the rows of v, each n long, in the order from.
func permuteRows[T any](v []T, from []int, n int) []T {
	out := make([]T, len(v))
	for i, f := range from {
		copy(out[i*n:(i+1)*n], v[f*n:(f+1)*n])
	}
	return out
}

// convTranspose compiles a ConvTranspose of kernel k and stride s into a
// convolution of its s² phases, stride 1 and no padding, then a
// depth-to-space: oneDNN 2.6 runs the first at the speed of its
// convolutions, where its own transposed convolutions fall to slow paths
// with a fused bias or few output channels (BENCHMARKS.md).
//
// Output pixel o of the transposed convolution gathers input pixels i
// with o = s·i + t − pad for a tap t of the kernel. Write o + pad =
// s·m + q with the phase q in [0, s): the taps are t = q + s·j, from
// inputs i = m − j, j in [0, k/s). A convolution whose window of k/s
// inputs starts at r = m − k/s + 1 gives phase q of output
// o = s·(r + k/s − 1) + q − pad, from tap (q + s·(k/s − 1 − d)) at its
// window's d-th input. That covers every output pixel when k is a
// multiple of s and pad ≥ k − s, as in cunet (2×2 stride 2 unpadded, and
// 4×4 stride 2 padded by 3).
func (c *compiler) convTranspose(n *onnxpb.Node) error {
	kn, err := c.kernelOf(n, true)
	if err != nil {
		return err
	}
	in, w, b, inC, outC, k, s, pad := kn.in, kn.weights, kn.bias, kn.inC, kn.outC, kn.k, kn.stride, kn.pad
	if op := attrInts(n, "output_padding"); slices.ContainsFunc(op, func(x int64) bool { return x != 0 }) {
		return fmt.Errorf("output_padding %v is not supported", op)
	}
	taps := k / s
	if k%s != 0 || pad < k-s {
		return fmt.Errorf("a %d×%d kernel of stride %d padded by %d: want a multiple of the stride and padding of at least %d", k, k, s, pad, k-s)
	}
	phaseC := s * s * outC
	weights := make([]float32, phaseC*inC*taps*taps)
	bias := make([]float32, phaseC)
	for qy := range s {
		for qx := range s {
			for o := range outC {
				p := (qy*s+qx)*outC + o
				if b != nil {
					bias[p] = b[o]
				}
				for i := range inC {
					for dy := range taps {
						for dx := range taps {
							ty, tx := qy+s*(taps-1-dy), qx+s*(taps-1-dx)
							weights[((p*inC+i)*taps+dy)*taps+dx] = w[((i*outC+o)*k+ty)*k+tx]
						}
					}
				}
			}
		}
	}
	l := layer{kind: transposed, name: n.Name, in: in, k: taps, stride: 1, weights: weights, bias: bias, s: s, offset: s*(taps-1) - pad}
	phases := c.activation(&l, n.Outputs[0])
	// The phases are the ConvTranspose's own result, spread: named apart.
	return c.spread(&l, n.Name+"/phases", phases, outC)
}

// spread finishes a transposed layer l whose phase convolution makes
// phases and whose depth-to-space makes out, of outC channels: with an
// Add of a crop to out fused into the depth-to-space.
func (c *compiler) spread(l *layer, phases, out string, outC int) error {
	var err error
	image := outC == 3
	if l.phase, err = c.newValue(phases, outC*l.s*l.s, image); err != nil {
		return err
	}
	if add := c.only(out); add != nil && add.Op == "Add" {
		if ok, err := c.cropOperand(l, add, out); err != nil {
			return err
		} else if ok {
			c.done[add] = true
			out = add.Outputs[0]
		}
	}
	if l.out, err = c.newValue(out, outC, image); err != nil {
		return err
	}
	c.g.layers = append(c.g.layers, *l)
	return nil
}

// cropOperand reads the Add add of the value other and of a Slice that
// crops a value computed before, into l's skip.
func (c *compiler) cropOperand(l *layer, add *onnxpb.Node, other string) (ok bool, err error) {
	if len(add.Inputs) != 2 {
		return false, fmt.Errorf("%s: want two inputs", add.Name)
	}
	sliced := add.Inputs[0]
	if sliced == other {
		sliced = add.Inputs[1]
	}
	slice := c.producer[sliced]
	if slice == nil || slice.Op != "Slice" || len(slice.Inputs) < 4 {
		return false, nil
	}
	starts, err1 := c.ints(slice.Inputs[1])
	ends, err2 := c.ints(slice.Inputs[2])
	axes, err3 := c.ints(slice.Inputs[3])
	if err := errors.Join(err1, err2, err3); err != nil {
		return false, fmt.Errorf("%s: %w", slice.Name, err)
	}
	if len(slice.Inputs) > 4 {
		return false, fmt.Errorf("%s: steps are not supported", slice.Name)
	}
	if !slices.Equal(axes, []int64{2, 3}) || len(starts) != 2 || len(ends) != 2 || starts[0] < 0 || starts[1] < 0 {
		return false, fmt.Errorf("%s: want a crop of height and width from non-negative starts", slice.Name)
	}
	skip, err := c.input(slice.Inputs[0])
	if err != nil {
		return false, err
	}
	// The crop's size must be the other operand's: checked for each tile
	// size (plan), where the sizes are known.
	c.done[slice] = true
	l.skip, l.hasSkip = skip, true
	l.top, l.left, l.ends = int(starts[0]), int(starts[1]), [2]int{int(ends[0]), int(ends[1])}
	return true, nil
}

// squeezeExcite compiles GlobalAveragePool → Conv 1×1 → Relu → Conv 1×1 →
// Sigmoid → Mul with the pool's input into one layer.
func (c *compiler) squeezeExcite(pool *onnxpb.Node) error {
	in, err := c.input(pool.Inputs[0])
	if err != nil {
		return err
	}
	chain := []*onnxpb.Node{pool}
	for _, op := range []string{"Conv", "Relu", "Conv", "Sigmoid", "Mul"} {
		next := c.only(chain[len(chain)-1].Outputs[0])
		if next == nil || next.Op != op {
			return fmt.Errorf("a GlobalAveragePool that does not start a squeeze-and-excitation block")
		}
		chain = append(chain, next)
	}
	mul := chain[5]
	if !slices.Contains(mul.Inputs, pool.Inputs[0]) {
		return fmt.Errorf("the block's Mul does not scale the block's input")
	}
	w1, d1, b1, err := c.weightsAndBias(chain[1])
	if err != nil {
		return err
	}
	w2, d2, b2, err := c.weightsAndBias(chain[3])
	if err != nil {
		return err
	}
	channels, hidden := c.g.values[in].channels, int(d1[0])
	if d1[1] != int64(channels) || d1[2] != 1 || d2[0] != int64(channels) || d2[1] != int64(hidden) || d2[2] != 1 || b1 == nil || b2 == nil {
		return fmt.Errorf("dense layers of shapes %v and %v for %d channels", d1, d2, channels)
	}
	for _, n := range chain {
		c.done[n] = true
	}
	out, err := c.newValue(mul.Outputs[0], channels, false)
	if err != nil {
		return err
	}
	c.g.layers = append(c.g.layers, layer{kind: squeezeExcite, name: pool.Name, in: in, out: out, hidden: hidden, w1: w1, b1: b1, w2: w2, b2: b2})
	return nil
}

// add compiles the network's output: a residual of 3 channels plus a crop
// of an image.
func (c *compiler) add(n *onnxpb.Node) error {
	for _, residual := range n.Inputs {
		a, ok := c.values[residual]
		if !ok || c.g.values[a].channels != 3 {
			continue
		}
		l := layer{kind: export, name: n.Name, in: a}
		ok, err := c.cropOperand(&l, n, residual)
		if err != nil {
			return err
		}
		if !ok || !c.g.values[l.skip].image {
			continue
		}
		if l.out, err = c.newValue(n.Outputs[0], 3, true); err != nil {
			return err
		}
		c.g.layers = append(c.g.layers, l)
		return nil
	}
	return fmt.Errorf("only the sum of a residual of 3 channels and a crop of an image (the output), or of a transposed convolution's result and a crop, is supported")
}
