package onednn

import (
	"errors"
	"fmt"
	"slices"

	"github.com/upscalekit/upscale/internal/onnxpb"
)

// A graph is an ONNX network compiled into the layers this package runs,
// in order. Values are numbered; value 0 is the network's input.
type graph struct {
	layers []layer
	values []valueInfo
	output value // the last layer's, written to the caller's planes
}

type value int

// valueInfo is what a value is, whatever the tile's size.
type valueInfo struct {
	name     string
	channels int
	// image values are the network's input and output and what makes
	// them (the first U-Net's result, the last residual, the phases of
	// a transposed convolution that makes an image): kept in float32
	// whatever the precision.
	image bool
	// quant is how the network's QDQ form quantises the value, if it
	// does.
	quant *quantization
}

// quantization maps a real value v to uint8 round(v / scale) + zp.
type quantization struct {
	scale float32
	zp    int
}

type layerKind int

const (
	// convolution: a Conv with its bias and activation fused.
	convolution layerKind = iota
	// transposed: a ConvTranspose, or a Conv followed by a DepthToSpace,
	// run as a convolution of its phases (into phase), then a
	// depth-to-space into out, with an Add of a crop of skip fused when
	// it follows.
	transposed
	// squeezeExcite: a squeeze-and-excitation block.
	squeezeExcite
	// export: the output, a value of 3 channels written to the caller's
	// planes, with a crop of an image added when hasSkip (cunet's
	// residual and its crop; upconv_7's last transposed convolution
	// alone).
	export
)

type layer struct {
	kind    layerKind
	name    string
	in, out value
	// convolution and transposed: a square kernel k, stride, padding pad
	// (a transposed layer's are its phase convolution's: stride 1, no
	// padding), weights [out][in][k][k], bias, and a leaky ReLU of slope
	// when act. weights8 and wscale are the int8 weights of the QDQ
	// form, which weights dequantises.
	k, stride, pad int
	weights, bias  []float32
	weights8       []int8
	wscale         []float32
	act            bool
	slope          float32
	// transposed: the stride spread (s) and where the first phase lands
	// (offset), and the phase convolution's output.
	s, offset int
	phase     value
	// transposed and export: a crop of skip is added, from top, left
	// to ends (ONNX Slice's: from the far side when negative).
	skip      value
	hasSkip   bool
	top, left int
	ends      [2]int
	// squeezeExcite: the two dense layers, in→hidden→in.
	hidden         int
	w1, b1, w2, b2 []float32
}

// maxChannels bounds a value's channels: the loops stage a pixel's
// values on their stack.
const maxChannels = 4096

// compile reads an ONNX network of the operators cunet and upconv_7 use:
// Conv and ConvTranspose with LeakyRelu or Relu after them,
// squeeze-and-excitation blocks (GlobalAveragePool, two 1×1 Convs, Relu,
// Sigmoid, Mul), and Adds of a cropping Slice; in its QDQ form, also the
// pairs of QuantizeLinear and DequantizeLinear that quantise a tensor,
// dequantised int8 weights, and the DepthToSpace of a Conv. Its output is
// an image of 3 channels that the last layer makes. Anything else is an
// error that names it.
func compile(file *onnxpb.Model) (*graph, error) {
	c := compiler{
		inits:     map[string]*onnxpb.Tensor{},
		alias:     map[string]string{},
		constants: map[string]dequantized{},
		quant:     map[string]*quantization{},
		producer:  map[string]*onnxpb.Node{},
		consumers: map[string][]*onnxpb.Node{},
		values:    map[string]value{},
		done:      map[*onnxpb.Node]bool{},
	}
	for i := range file.Graph.Initializers {
		t := &file.Graph.Initializers[i]
		c.inits[t.Name] = t
	}
	nodes := make([]*onnxpb.Node, len(file.Graph.Nodes))
	for i := range file.Graph.Nodes {
		nodes[i] = &file.Graph.Nodes[i]
	}
	if err := c.lookThrough(nodes); err != nil {
		return nil, err
	}
	for _, n := range nodes {
		if c.done[n] {
			continue
		}
		for i, in := range n.Inputs {
			n.Inputs[i] = c.resolve(in)
		}
		for _, out := range n.Outputs {
			c.producer[out] = n
		}
		for _, in := range n.Inputs {
			c.consumers[in] = append(c.consumers[in], n)
		}
	}
	if len(file.Graph.Inputs) != 1 || len(file.Graph.Outputs) != 1 {
		return nil, fmt.Errorf("want one input and one output, have %d and %d", len(file.Graph.Inputs), len(file.Graph.Outputs))
	}
	c.newValue(file.Graph.Inputs[0].Name, 3, true)
	for _, n := range nodes {
		if c.done[n] {
			continue
		}
		if err := c.node(n); err != nil {
			return nil, fmt.Errorf("node %s (%s): %w", n.Name, n.Op, err)
		}
	}
	name := file.Graph.Outputs[0].Name
	out, ok := c.values[c.resolve(name)]
	if !ok || len(c.g.layers) == 0 || c.g.layers[len(c.g.layers)-1].out != out || !c.g.values[out].image {
		return nil, fmt.Errorf("the output %s is not an image of 3 channels made by the last layer", name)
	}
	if c.g.layers[len(c.g.layers)-1].kind != export {
		// An image a convolution made is written out as it is.
		in := out
		var err error
		if out, err = c.newValue(name+"/export", 3, true); err != nil {
			return nil, err
		}
		c.g.layers = append(c.g.layers, layer{kind: export, name: name + "/export", in: in, out: out})
	}
	c.g.output = out
	return &c.g, nil
}

type compiler struct {
	inits     map[string]*onnxpb.Tensor
	alias     map[string]string        // a tensor → the one it stands for
	constants map[string]dequantized   // DequantizeLinear of an initializer
	quant     map[string]*quantization // how a tensor is quantised
	producer  map[string]*onnxpb.Node
	consumers map[string][]*onnxpb.Node
	values    map[string]value
	done      map[*onnxpb.Node]bool
	g         graph
}

// dequantized is an initializer of int8 or int32 values q standing for
// scale × (q − zero), with a scale for each index along axis 0 or one for
// all.
type dequantized struct {
	q           *onnxpb.Tensor
	scale, zero *onnxpb.Tensor
}

// resolve follows aliases to the tensor a name stands for.
func (c *compiler) resolve(name string) string {
	for {
		to, ok := c.alias[name]
		if !ok {
			return name
		}
		name = to
	}
}

// lookThrough marks as done the nodes that only restate a tensor: a Cast
// of an initializer (weights stored in float16), a DequantizeLinear of an
// initializer (int8 weights and int32 biases), and a QuantizeLinear whose
// every consumer is a DequantizeLinear of the same scale and zero point,
// which records how the tensor is quantised.
func (c *compiler) lookThrough(nodes []*onnxpb.Node) error {
	consumers := map[string][]*onnxpb.Node{}
	for _, n := range nodes {
		for _, in := range n.Inputs {
			consumers[in] = append(consumers[in], n)
		}
	}
	for _, n := range nodes {
		switch {
		case n.Op == "Cast" && len(n.Inputs) == 1 && c.inits[n.Inputs[0]] != nil:
			c.alias[n.Outputs[0]] = n.Inputs[0]
			c.done[n] = true
		case n.Op == "DequantizeLinear" && len(n.Inputs) == 3 && c.inits[n.Inputs[0]] != nil:
			d := dequantized{q: c.inits[n.Inputs[0]], scale: c.inits[n.Inputs[1]], zero: c.inits[n.Inputs[2]]}
			if d.scale == nil || d.zero == nil {
				return fmt.Errorf("node %s: a DequantizeLinear of a constant by variables", n.Name)
			}
			c.constants[n.Outputs[0]] = d
			c.done[n] = true
		case n.Op == "QuantizeLinear" && len(n.Inputs) == 3:
			pairs := consumers[n.Outputs[0]]
			if len(pairs) == 0 || slices.ContainsFunc(pairs, func(dq *onnxpb.Node) bool {
				return dq.Op != "DequantizeLinear" || len(dq.Inputs) != 3 || dq.Inputs[1] != n.Inputs[1] || dq.Inputs[2] != n.Inputs[2]
			}) {
				return fmt.Errorf("node %s: a QuantizeLinear not undone by a DequantizeLinear of its scale and zero point", n.Name)
			}
			q, err := c.quantization(n.Inputs[1], n.Inputs[2])
			if err != nil {
				return fmt.Errorf("node %s: %w", n.Name, err)
			}
			x := c.resolve(n.Inputs[0])
			if c.quant[x] == nil {
				c.quant[x] = q
			}
			c.done[n] = true
			for _, dq := range pairs {
				c.alias[dq.Outputs[0]] = x
				c.done[dq] = true
			}
		}
	}
	return nil
}

// quantization reads a per-tensor uint8 scale and zero point.
func (c *compiler) quantization(scaleName, zeroName string) (*quantization, error) {
	scale, zero := c.inits[scaleName], c.inits[zeroName]
	if scale == nil || zero == nil || zero.Type != onnxpb.Uint8 || len(zero.Raw) != 1 {
		return nil, fmt.Errorf("want a constant scale and a uint8 zero point")
	}
	s, err := scale.Floats()
	if err != nil || len(s) != 1 || !(s[0] > 0) {
		return nil, fmt.Errorf("scale %s: want one positive float", scaleName)
	}
	return &quantization{scale: s[0], zp: int(zero.Raw[0])}, nil
}

func (c *compiler) node(n *onnxpb.Node) error {
	switch n.Op {
	case "Conv":
		return c.conv(n)
	case "ConvTranspose":
		return c.convTranspose(n)
	case "GlobalAveragePool":
		return c.squeezeExcite(n)
	case "Add":
		return c.add(n)
	case "Slice":
		// A crop is compiled with the Add it feeds.
		if !slices.ContainsFunc(c.consumers[n.Outputs[0]], func(m *onnxpb.Node) bool { return m.Op != "Add" }) {
			return nil
		}
	}
	return fmt.Errorf("operator %s is not supported here", n.Op)
}

// input returns the value an input names.
func (c *compiler) input(name string) (value, error) {
	v, ok := c.values[name]
	if !ok {
		return 0, fmt.Errorf("input %s is not a value computed before it", name)
	}
	return v, nil
}

func (c *compiler) newValue(name string, channels int, image bool) (value, error) {
	if channels > maxChannels {
		return 0, fmt.Errorf("%s has %d channels, more than %d", name, channels, maxChannels)
	}
	c.g.values = append(c.g.values, valueInfo{name: name, channels: channels, image: image, quant: c.quant[name]})
	v := value(len(c.g.values) - 1)
	c.values[name] = v
	return v, nil
}

// floats returns the elements of an initializer, or of a Cast or
// DequantizeLinear of one, as float32.
func (c *compiler) floats(name string) ([]float32, []int64, error) {
	name = c.resolve(name)
	if d, ok := c.constants[name]; ok {
		return d.floats()
	}
	t, ok := c.inits[name]
	if !ok {
		return nil, nil, fmt.Errorf("%s is not a constant", name)
	}
	v, err := t.Floats()
	return v, t.Dims, err
}

// floats dequantises d, with a scale for each index along axis 0 or one
// for all.
func (d dequantized) floats() ([]float32, []int64, error) {
	scale, err1 := d.scale.Floats()
	zeros, err2 := d.zero.Ints32()
	q, err3 := d.q.Ints32()
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, nil, err
	}
	if len(scale) != len(zeros) || len(q) == 0 || len(d.q.Dims) == 0 || (len(scale) != 1 && int64(len(scale)) != d.q.Dims[0]) {
		return nil, nil, fmt.Errorf("%s: %d scales and %d zero points for dimensions %v", d.q.Name, len(scale), len(zeros), d.q.Dims)
	}
	out := make([]float32, len(q))
	per := len(q) / len(scale)
	for i, v := range q {
		out[i] = scale[i/per] * float32(v-zeros[i/per])
	}
	return out, d.q.Dims, nil
}

// ints returns an initializer of int64 elements.
func (c *compiler) ints(name string) ([]int64, error) {
	t, ok := c.inits[name]
	if !ok {
		return nil, fmt.Errorf("%s is not a constant", name)
	}
	return t.Ints()
}

// only returns the one node that consumes name, or nil.
func (c *compiler) only(name string) *onnxpb.Node {
	if cs := c.consumers[name]; len(cs) == 1 {
		return cs[0]
	}
	return nil
}

func attrInts(n *onnxpb.Node, name string) []int64 {
	for _, a := range n.Attrs {
		if a.Name == name {
			return a.Ints
		}
	}
	return nil
}

func attrInt(n *onnxpb.Node, name string, otherwise int64) int64 {
	for _, a := range n.Attrs {
		if a.Name == name && a.Int != nil {
			return *a.Int
		}
	}
	return otherwise
}

func attrFloat(n *onnxpb.Node, name string, otherwise float32) float32 {
	for _, a := range n.Attrs {
		if a.Name == name && a.Float != nil {
			return *a.Float
		}
	}
	return otherwise
}

// hasAttr reports whether n has the attribute name (onnxpb keeps only
// numeric attributes' values: a string one is known only by being
// there).
func hasAttr(n *onnxpb.Node, name string) bool {
	return slices.ContainsFunc(n.Attrs, func(a onnxpb.Attr) bool { return a.Name == name })
}

// geometry reads a convolution's square kernel, stride and padding, the
// same on every side.
func geometry(n *onnxpb.Node, k int) (stride, pad int, err error) {
	stride, okStride := uniform(attrInts(n, "strides"), 1)
	pad, okPad := uniform(attrInts(n, "pads"), 0)
	if ks := attrInts(n, "kernel_shape"); len(ks) != 0 && (len(ks) != 2 || ks[0] != int64(k) || ks[1] != int64(k)) {
		return 0, 0, fmt.Errorf("kernel_shape %v does not match the weights", ks)
	}
	if d := attrInts(n, "dilations"); slices.ContainsFunc(d, func(x int64) bool { return x != 1 }) {
		return 0, 0, fmt.Errorf("dilations %v are not supported", d)
	}
	if g := attrInt(n, "group", 1); g != 1 {
		return 0, 0, fmt.Errorf("groups are not supported")
	}
	if !okStride || !okPad {
		return 0, 0, fmt.Errorf("strides and pads must be the same on every side")
	}
	return stride, pad, nil
}

// uniform returns the one value of v, or otherwise when v is empty; false
// when v holds different values.
func uniform(v []int64, otherwise int) (int, bool) {
	for _, x := range v {
		if x != v[0] {
			return 0, false
		}
	}
	if len(v) == 0 {
		return otherwise, true
	}
	return int(v[0]), true
}

// activation fuses the LeakyRelu or Relu that is the only consumer of a
// layer's output, and returns the name of the activated output.
func (c *compiler) activation(l *layer, out string) string {
	next := c.only(out)
	if next == nil {
		return out
	}
	switch next.Op {
	case "LeakyRelu":
		l.act, l.slope = true, attrFloat(next, "alpha", 0.01)
	case "Relu":
		l.act, l.slope = true, 0
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
	// convolution's phases (ncnn2onnx's form of a 2×2 one).
	if d2s := c.only(out); d2s != nil && d2s.Op == "DepthToSpace" && l.stride == 1 && l.pad == 0 {
		s := int(attrInt(d2s, "blocksize", 0))
		if hasAttr(d2s, "mode") || s < 1 || outC%(s*s) != 0 {
			return fmt.Errorf("%s: want a DepthToSpace of the default mode (DCR) and a block size that divides the channels", d2s.Name)
		}
		c.done[d2s] = true
		l.kind, l.s = transposed, s
		return c.spread(&l, out, d2s.Outputs[0], outC/(s*s))
	}
	if l.out, err = c.newValue(out, outC, outC == 3); err != nil {
		return err
	}
	c.g.layers = append(c.g.layers, l)
	return nil
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
