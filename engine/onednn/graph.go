package onednn

/*
#include "net.h"
*/
import "C"

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
	// elementwise: a program of element-wise operators (sums, products,
	// sigmoids, PReLUs, constants) on inputs of one shape, run in one
	// pass (SPAN's attention, a network's mean taken off its input).
	elementwise
	// concat: inputs side by side along the channels.
	concat
	// upsample: in enlarged s times by nearest neighbours.
	upsample
)

// activation is what a convolution ends with (net.h's OD_NO_ACT...).
type activation int

const (
	noActivation activation = C.OD_NO_ACT
	leakyReLU    activation = C.OD_LEAKY_RELU
	swish        activation = C.OD_SWISH
)

type layer struct {
	kind    layerKind
	name    string
	in, out value
	// convolution and transposed: a square kernel k, stride, padding pad
	// (a transposed layer's are its phase convolution's: stride 1, no
	// padding for a ConvTranspose, a pixel shuffle's own), weights
	// [out][in][k][k], bias, and the activation act
	// (a leaky ReLU's of slope). weights8 and wscale are the int8
	// weights of the QDQ form, which weights dequantises. convolution and
	// concat: post multiplies each channel, after the activation (a Mul
	// by a value a channel fused: a brought network's twin scales what a
	// quantised convolution reads so), or is nil.
	k, stride, pad int
	weights, bias  []float32
	weights8       []int8
	wscale         []float32
	act            activation
	slope          float32
	post           []float32
	// transposed: the stride spread (s) and where the first phase lands
	// (offset), and the phase convolution's output; upsample: its
	// factor (s).
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
	// elementwise and concat: what they read (in is the first);
	// elementwise: its program and the constants it reads, a run of
	// channels values each.
	inputs    []value
	steps     []C.od_step
	constants []float32
	// elementwise: gate, when the program is a gated sum (gateOf), runs
	// it in place of the steps.
	gate *gate
}

// maxChannels bounds a value's channels: the loops stage a pixel's
// values on their stack, in runs of OD_MAX_CHANNELS.
const maxChannels = C.OD_MAX_CHANNELS

// compile reads an ONNX network of the operators cunet and upconv_7 use:
// Conv and ConvTranspose with LeakyRelu or Relu after them,
// squeeze-and-excitation blocks (GlobalAveragePool, two 1×1 Convs, Relu,
// Sigmoid, Mul), and Adds of a cropping Slice; of those the brought
// networks use: a swish after a Conv, element-wise Add, Sub, Mul, Div,
// Sigmoid and PRelu of values of one shape and constants (one value, or
// one a channel), Concat of channels, a nearest Resize by a whole
// factor, and the DepthToSpace (DCR or CRD) of a Conv; in its QDQ form,
// also the pairs of QuantizeLinear and DequantizeLinear that quantise a
// tensor and dequantised int8 weights. Its output is an image of 3
// channels that the last layer makes. Anything else is an error that
// names it.
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
		if c.cropSum(n) {
			return c.add(n)
		}
		return c.elementwise(n)
	case "Sub", "Mul", "Div", "Sigmoid", "PRelu":
		return c.elementwise(n)
	case "Concat":
		return c.concat(n)
	case "Resize":
		return c.upsample(n)
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
