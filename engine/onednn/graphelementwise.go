package onednn

/*
#include "net.h"
*/
import "C"

import (
	"fmt"
	"slices"

	"github.com/upscalekit/upscale/internal/onnxpb"
)

// stepOps are the operators an elementwise layer runs, by their step.
var stepOps = map[string]C.int{
	"Add": C.OD_ADD, "Sub": C.OD_SUB, "Mul": C.OD_MUL, "Div": C.OD_DIV,
	"Sigmoid": C.OD_SIGMOID, "PRelu": C.OD_PRELU,
}

// cropSum reports whether n is an Add of a cropping Slice (cunet's sums),
// compiled by add or with the transposed convolution before it.
func (c *compiler) cropSum(n *onnxpb.Node) bool {
	return slices.ContainsFunc(n.Inputs, func(in string) bool {
		p := c.producer[in]
		return p != nil && p.Op == "Slice"
	})
}

// inlined reports whether n, an element-wise operator, is compiled into
// the program of the one element-wise operator that reads it: when that
// is its only reader (the network's output has none). A value two
// programs read is made once, not in each: an INT8 twin's residual sum,
// read by the next block's sum and scaled for its convolution, would
// otherwise be made again by every later block, its program longer each
// time.
func (c *compiler) inlined(n *onnxpb.Node) bool {
	readers := c.consumers[n.Outputs[0]]
	if len(readers) == 0 || slices.ContainsFunc(readers, func(m *onnxpb.Node) bool { return m != readers[0] }) {
		return false
	}
	m := readers[0]
	_, ok := stepOps[m.Op]
	return ok && !c.done[m] && !(m.Op == "Add" && c.cropSum(m))
}

// swishOf returns the Mul of out and Sigmoid(out) when those two are all
// that read out (a swish, which ncnn2onnx writes so), marking both done;
// else nil.
func (c *compiler) swishOf(out string) *onnxpb.Node {
	readers := c.consumers[out]
	if len(readers) != 2 {
		return nil
	}
	sigmoid, product := readers[0], readers[1]
	if sigmoid.Op != "Sigmoid" {
		sigmoid, product = product, sigmoid
	}
	if sigmoid.Op != "Sigmoid" || product.Op != "Mul" || c.only(sigmoid.Outputs[0]) != product ||
		!slices.Contains(product.Inputs, out) || !slices.Contains(product.Inputs, sigmoid.Outputs[0]) {
		return nil
	}
	c.done[sigmoid], c.done[product] = true, true
	return product
}

// program is an elementwise layer being compiled: its steps, each made
// register by the name of the tensor it holds, and its constants as the
// network gives them (one value, or one a channel), spread to the layer's
// channels once those are known.
type program struct {
	c         *compiler
	l         layer
	registers map[string]int
	constants map[int][]float32 // by step
}

// elementwise compiles n, an element-wise operator, with those before it
// that it alone reads, into one layer.
func (c *compiler) elementwise(n *onnxpb.Node) error {
	if c.inlined(n) {
		return nil
	}
	p := program{c: c, l: layer{kind: elementwise, name: n.Name}, registers: map[string]int{}, constants: map[int][]float32{}}
	if _, err := p.node(n); err != nil {
		return err
	}
	if len(p.l.inputs) == 0 {
		return fmt.Errorf("an element-wise operator of constants alone")
	}
	channels, image := c.g.values[p.l.inputs[0]].channels, true
	for _, v := range p.l.inputs {
		if c.g.values[v].channels != channels {
			return fmt.Errorf("inputs of %d and %d channels: only constants are broadcast", channels, c.g.values[v].channels)
		}
		image = image && c.g.values[v].image
	}
	for i := range p.l.steps {
		v, ok := p.constants[i]
		if !ok {
			continue
		}
		p.l.steps[i].a = C.int(len(p.l.constants))
		switch len(v) {
		case 1:
			for range channels {
				p.l.constants = append(p.l.constants, v[0])
			}
		case channels:
			p.l.constants = append(p.l.constants, v...)
		default:
			return fmt.Errorf("a constant of %d values for %d channels", len(v), channels)
		}
	}
	p.l.in = p.l.inputs[0]
	p.l.gate = gateOf(p.l.steps)
	var err error
	// The network's mean taken off its input and the like are its image.
	if p.l.out, err = c.newValue(n.Outputs[0], channels, image && channels == 3); err != nil {
		return err
	}
	c.g.layers = append(c.g.layers, p.l)
	return nil
}

// node adds the steps that make n's output, and returns its register.
func (p *program) node(n *onnxpb.Node) (int, error) {
	op := stepOps[n.Op]
	arity := 2
	if op == C.OD_SIGMOID {
		arity = 1
	}
	if len(n.Inputs) != arity {
		return 0, fmt.Errorf("%s: %s with %d inputs", n.Name, n.Op, len(n.Inputs))
	}
	var operands [2]int
	for i, in := range n.Inputs {
		var err error
		if operands[i], err = p.operand(in); err != nil {
			return 0, err
		}
	}
	return p.step(n.Outputs[0], C.od_step{op: op, a: C.int(operands[0]), b: C.int(operands[1])}), nil
}

// A gate is a program that makes (a + b) × (sigmoid(a) − c), c a
// constant (SPAN's attention), times post, a constant, where the program
// goes on to scale it for the convolution that reads it; od_gate runs it
// in one loop. a and b are the inputs it reads (indices into the
// layer's), c and post where their constants' values start (post -1 for
// none).
type gate struct{ a, b, c, post int }

// gateOf returns the gate that steps are, whatever order they come in,
// or nil.
func gateOf(steps []C.od_step) *gate {
	root, post := len(steps)-1, -1
	switch len(steps) {
	case 7:
	case 9:
		scaled := steps[root]
		product, constant := scaled.a, scaled.b
		if steps[product].op == C.OD_CONSTANT {
			product, constant = constant, product
		}
		if scaled.op != C.OD_MUL || steps[constant].op != C.OD_CONSTANT {
			return nil
		}
		root, post = int(product), int(steps[constant].a)
	default:
		return nil
	}
	product := steps[root]
	if product.op != C.OD_MUL {
		return nil
	}
	for _, pair := range [][2]C.int{{product.a, product.b}, {product.b, product.a}} {
		sum, difference := steps[pair[0]], steps[pair[1]]
		if sum.op != C.OD_ADD || difference.op != C.OD_SUB {
			continue
		}
		sigmoid, constant := steps[difference.a], steps[difference.b]
		if sigmoid.op != C.OD_SIGMOID || constant.op != C.OD_CONSTANT {
			continue
		}
		a, b := sum.a, sum.b
		if b == sigmoid.a {
			a, b = b, a
		}
		if a != sigmoid.a || steps[a].op != C.OD_INPUT || steps[b].op != C.OD_INPUT {
			continue
		}
		return &gate{a: int(steps[a].a), b: int(steps[b].a), c: int(constant.a), post: post}
	}
	return nil
}

func (p *program) step(name string, s C.od_step) int {
	p.l.steps = append(p.l.steps, s)
	p.registers[name] = len(p.l.steps) - 1
	return len(p.l.steps) - 1
}

// operand returns the register that holds the tensor name: an inlined
// operator's result, a value computed before, or a constant.
func (p *program) operand(name string) (int, error) {
	c := p.c
	if r, ok := p.registers[name]; ok {
		return r, nil
	}
	v, computed := c.values[name] // a layer's: an Add of a crop, say
	if n := c.producer[name]; !computed && n != nil && stepOps[n.Op] != 0 && !c.done[n] && c.inlined(n) {
		return p.node(n)
	}
	if computed {
		i := slices.Index(p.l.inputs, v)
		if i < 0 {
			p.l.inputs, i = append(p.l.inputs, v), len(p.l.inputs)
		}
		return p.step(name, C.od_step{op: C.OD_INPUT, a: C.int(i)}), nil
	}
	constant, dims, err := c.floats(name)
	if err != nil {
		return 0, fmt.Errorf("%s is neither a value computed before nor a constant", name)
	}
	// NCHW broadcasting: one value, or one a channel ([C,1,1], [1,C,1,1]).
	perChannel := len(dims) >= 3 && dims[len(dims)-1] == 1 && dims[len(dims)-2] == 1 &&
		!slices.ContainsFunc(dims[:len(dims)-3], func(d int64) bool { return d != 1 })
	if len(constant) != 1 && !perChannel {
		return 0, fmt.Errorf("constant %s of shape %v: want one value or one a channel", name, dims)
	}
	r := p.step(name, C.od_step{op: C.OD_CONSTANT})
	p.constants[r] = constant
	return r, nil
}

// concat compiles a Concat of values along their channels.
func (c *compiler) concat(n *onnxpb.Node) error {
	if attrInt(n, "axis", 0) != 1 {
		return fmt.Errorf("a Concat along axis %d: only channels (1) are supported", attrInt(n, "axis", 0))
	}
	l := layer{kind: concat, name: n.Name}
	channels := 0
	for _, in := range n.Inputs {
		v, err := c.input(in)
		if err != nil {
			return err
		}
		l.inputs = append(l.inputs, v)
		channels += c.g.values[v].channels
	}
	l.in = l.inputs[0]
	// An INT8 twin scales the concatenation channel by channel for the
	// convolution that reads it: done here, as the channels are copied,
	// the result is written as that convolution's uint8 with no pass
	// between.
	out, post := c.channelProduct(n.Outputs[0], channels)
	l.post = post
	var err error
	if l.out, err = c.newValue(out, channels, false); err != nil {
		return err
	}
	c.g.layers = append(c.g.layers, l)
	return nil
}

// upsample compiles a Resize that enlarges by a whole factor s, each
// output pixel (y, x) taking input pixel (y / s, x / s): nearest
// neighbours, asymmetric coordinates rounded down (ncnn's nearest
// Interp, as ncnn2onnx writes it).
func (c *compiler) upsample(n *onnxpb.Node) error {
	if len(n.Inputs) != 3 || n.Inputs[1] != "" {
		return fmt.Errorf("want a Resize by scales")
	}
	scales, _, err := c.floats(n.Inputs[2])
	if err != nil {
		return err
	}
	if attrString(n, "mode", "nearest") != "nearest" || attrString(n, "coordinate_transformation_mode", "half_pixel") != "asymmetric" ||
		attrString(n, "nearest_mode", "round_prefer_floor") != "floor" || len(scales) != 4 || scales[0] != 1 || scales[1] != 1 ||
		scales[2] != scales[3] || scales[2] < 1 || scales[2] != float32(int(scales[2])) {
		return fmt.Errorf("only a nearest Resize of asymmetric coordinates rounded down, by a whole factor the same both ways, is supported")
	}
	in, err := c.input(n.Inputs[0])
	if err != nil {
		return err
	}
	info := c.g.values[in]
	out, err := c.newValue(n.Outputs[0], info.channels, info.image)
	if err != nil {
		return err
	}
	c.g.layers = append(c.g.layers, layer{kind: upsample, name: n.Name, in: in, out: out, s: int(scales[2])})
	return nil
}
