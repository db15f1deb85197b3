// Package ncnn2onnx converts a neural network from ncnn's format into an
// ONNX model that ONNX Runtime and engine/onednn run with the same
// results: the waifu2x networks that cmd/ncnn2onnx converts for `make
// models`, and the super-resolution networks an operator brings, which
// the engine converts as it starts. Every layer internal/ncnn reads is
// converted exactly; the output is the same bytes for the same input.
package ncnn2onnx

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/upscalekit/upscale/internal/ncnn"
	"github.com/upscalekit/upscale/internal/onnxpb"
)

// opset 17 is implemented by every ONNX Runtime since 1.13.
const opset = 17

// Names of the converted model's input and output: NCHW float32 RGB, 0-1.
const (
	inputName  = "input"
	outputName = "output"
)

// Geometry is how the network's output relates to its input, found by
// inferring shapes at several input sizes: an input of n pixels (a
// multiple of Multiple, at least MinInput) gives Scale × (n - 2 × Border).
// Halo is how far a network that keeps its size (Border 0) reads around
// each pixel through its padded convolutions (receptiveRadius): a tile
// read with Halo pixels around it, and Halo × Scale cut from each side of
// its result, is the whole image's result there.
type Geometry struct {
	Scale, Border, Multiple, MinInput int
	Halo                              int
}

// findGeometry tries input sizes from the .param file's nominal one, or
// from 64 pixels when its Input layer gives none.
func findGeometry(net *ncnn.Net) (Geometry, error) {
	c, nominal := inputChannels(net), max(net.InputShape[1], net.InputShape[2])
	if nominal <= 0 {
		nominal = 64
	}
	outSize := func(h, w int) (int, int, error) {
		shapes, err := net.Shapes(ncnn.Shape{C: c, H: h, W: w})
		if err != nil {
			return 0, 0, err
		}
		out := shapes[net.Output]
		return out.H, out.W, nil
	}
	for multiple := 1; multiple <= 64; multiple *= 2 {
		s := (nominal + multiple - 1) / multiple * multiple
		h1, w1, err1 := outSize(s, s+multiple)
		h2, w2, err2 := outSize(s+2*multiple, s+multiple)
		if err1 != nil || err2 != nil {
			continue
		}
		scale := (h2 - h1) / (2 * multiple)
		if scale < 1 || h2-h1 != 2*multiple*scale || h1%scale != 0 || (s-h1/scale)%2 != 0 {
			return Geometry{}, fmt.Errorf("output %d for input %d and %d for %d is not scale × (input − 2 × border)", h1, s, h2, s+2*multiple)
		}
		g := Geometry{Scale: scale, Border: (s - h1/scale) / 2, Multiple: multiple}
		if w1 != g.Scale*(s+multiple-2*g.Border) || w2 != w1 {
			return Geometry{}, errors.New("width and height do not follow the same rule")
		}
		for g.MinInput = multiple; ; g.MinInput += multiple {
			if h, _, err := outSize(g.MinInput, g.MinInput); err == nil && h > 0 {
				break
			}
		}
		if g.Border == 0 {
			// A network that keeps its size pads each convolution: its
			// tiles read its receptive field around them. One that loses
			// a border (waifu2x's) pads nothing, and its border is what
			// it reads.
			g.Halo = int(math.Ceil(receptiveRadius(net) - 1e-9))
		}
		return g, nil
	}
	return Geometry{}, fmt.Errorf("no input size near %d fits the network", nominal)
}

// receptiveRadius is how far, in input pixels, an output pixel of net
// depends on its input: each convolution widens it by half its kernel, in
// the pixels of the blob it reads, and layers that enlarge (PixelShuffle,
// Upsample, a transposed convolution) make those pixels smaller. A global
// pooling reads its whole blob, which tiling cannot reproduce anyway; it
// is counted as reading nothing around.
func receptiveRadius(net *ncnn.Net) float64 {
	type reach struct{ radius, density float64 } // in input pixels; blob pixels per input pixel
	at := map[string]reach{net.Input: {0, 1}}
	for _, l := range net.Layers {
		var r reach
		for i, in := range l.Inputs {
			if i == 0 || at[in].radius > r.radius {
				r = at[in]
			}
		}
		switch op := l.Op.(type) {
		case *ncnn.Conv:
			half := float64(op.Kernel-1) / 2
			if op.Transposed {
				r.density *= float64(op.Stride)
				r.radius += half / r.density
			} else {
				r.radius += half / r.density
				r.density /= float64(op.Stride)
			}
		case ncnn.PixelShuffle:
			r.density *= float64(op.Factor)
		case ncnn.Upsample:
			r.density *= float64(op.Factor)
		case *ncnn.Constant:
			r = reach{0, 1}
		}
		for _, out := range l.Outputs {
			at[out] = r
		}
	}
	return at[net.Output].radius
}

// foldProducts finds the products (or quotients) by a scalar whose only
// reader is a convolution: conv(W, s·x) is conv(s·W, x) exactly, its
// zero padding scaled to zero, so they fold into its weights (SPAN's ×255
// of its input). A sum with a constant does not fold into a padded
// convolution: its padding would change.
func foldProducts(net *ncnn.Net) (folds map[string]float32, skipped map[string]bool) {
	readers := map[string][]ncnn.Layer{}
	for _, l := range net.Layers {
		for _, in := range l.Inputs {
			readers[in] = append(readers[in], l)
		}
	}
	folds, skipped = map[string]float32{}, map[string]bool{}
	for _, l := range net.Layers {
		b, ok := l.Op.(*ncnn.Binary)
		if !ok || b.Scalar == nil || (b.Op != ncnn.Mul && b.Op != ncnn.Div) || l.Outputs[0] == net.Output {
			continue
		}
		r := readers[l.Outputs[0]]
		if len(r) != 1 {
			continue
		}
		if conv, ok := r[0].Op.(*ncnn.Conv); !ok || conv.Transposed || folds[r[0].Name] != 0 {
			continue
		}
		factor := *b.Scalar
		if b.Op == ncnn.Div {
			factor = 1 / factor
		}
		folds[r[0].Name], skipped[l.Name] = factor, true
	}
	return folds, skipped
}

// inputChannels is the channels of net's input: what its Input layer
// says, or 3 (RGB) when it says nothing, as the exports of PyTorch
// networks do.
func inputChannels(net *ncnn.Net) int {
	return cmp.Or(net.InputShape[0], 3)
}

// converter builds the ONNX graph of one network.
type converter struct {
	net   *ncnn.Net
	graph onnxpb.Graph
	// cropEnds is, for each Crop layer, how many rows and columns its
	// first input has beyond the cut: the same at every input size.
	cropEnds map[*ncnn.Crop][2]int
	// shapes are the blobs' shapes at the smallest input.
	shapes map[string]ncnn.Shape
	// alias maps each output of a Split to the blob it passes on.
	alias map[string]string
	// quant, when not nil, makes layers INT8; quantized holds the tensors
	// in QDQ form, by ONNX name, and dequantizedAs the QDQ form made of a
	// float32 tensor.
	quant         *Quantization
	quantized     map[string]quantized
	dequantizedAs map[string]string
	// channelSteps are the steps each channel of a tensor in QDQ form
	// was divided by (channelScaled), by the QDQ form's name.
	channelSteps map[string][]float32
	// folds are the products by a scalar folded into the convolution
	// that alone reads them (foldProducts): the factor, by the
	// convolution's name, and the products, skipped, by theirs.
	folds   map[string]float32
	skipped map[string]bool
}

// convert returns net as an ONNX model whose input and output are named
// inputName and outputName, with dynamic batch, height and width. The
// model's metadata records g and the given key-value pairs. With quant,
// the convolutions it does not keep in float32 run in INT8.
func Convert(net *ncnn.Net, name string, metadata [][2]string, quant *Quantization) (*onnxpb.Model, Geometry, error) {
	g, err := findGeometry(net)
	if err != nil {
		return nil, Geometry{}, err
	}
	c := &converter{net: net, graph: onnxpb.Graph{Name: name}, cropEnds: map[*ncnn.Crop][2]int{}, alias: map[string]string{},
		quant: quant, quantized: map[string]quantized{}, dequantizedAs: map[string]string{}, channelSteps: map[string][]float32{}}
	if err := c.measureCrops(g); err != nil {
		return nil, Geometry{}, err
	}
	if quant == nil { // INT8 calibrates each convolution's input as it is
		c.folds, c.skipped = foldProducts(net)
	}
	if c.shapes, err = net.Shapes(ncnn.Shape{C: inputChannels(net), H: g.MinInput, W: g.MinInput}); err != nil {
		return nil, Geometry{}, err
	}
	for _, l := range net.Layers {
		if err := c.layer(l); err != nil {
			return nil, Geometry{}, fmt.Errorf("layer %s: %w", l.Name, err)
		}
	}
	dims := func(prefix string) []onnxpb.Dim {
		return []onnxpb.Dim{{Param: "batch"}, {Size: int64(inputChannels(net))}, {Param: prefix + "height"}, {Param: prefix + "width"}}
	}
	c.graph.Inputs = []onnxpb.Value{{Name: inputName, Type: onnxpb.Float, Dims: dims("")}}
	outDims := dims("out_")
	outDims[1].Size = int64(c.shapes[net.Output].C)
	c.graph.Outputs = []onnxpb.Value{{Name: outputName, Type: onnxpb.Float, Dims: outDims}}
	meta := [][2]string{
		{"upscale.scale", strconv.Itoa(g.Scale)},
		{"upscale.border", strconv.Itoa(g.Border)},
		{"upscale.multiple", strconv.Itoa(g.Multiple)},
		{"upscale.min_input", strconv.Itoa(g.MinInput)},
	}
	if g.Halo > 0 { // waifu2x's networks have none: their files stay as they were
		meta = append(meta, [2]string{"upscale.halo", strconv.Itoa(g.Halo)})
	}
	return &onnxpb.Model{Producer: "upscale ncnn2onnx", Opset: opset, Graph: c.graph, Metadata: append(meta, metadata...)}, g, nil
}

// measureCrops finds each Crop's cut at two input sizes. ONNX's Slice
// needs it as a count from the end, which must not depend on the size.
func (c *converter) measureCrops(g Geometry) error {
	var sizes [2]map[string]ncnn.Shape
	for i := range sizes {
		n := g.MinInput + i*g.Multiple
		var err error
		if sizes[i], err = c.net.Shapes(ncnn.Shape{C: inputChannels(c.net), H: n, W: n + g.Multiple}); err != nil {
			return err
		}
	}
	for _, l := range c.net.Layers {
		crop, ok := l.Op.(*ncnn.Crop)
		if !ok {
			continue
		}
		var ends [2][2]int
		for i, shapes := range sizes {
			in, ref := shapes[l.Inputs[0]], shapes[l.Inputs[1]]
			ends[i] = [2]int{in.H - ref.H - crop.Y, in.W - ref.W - crop.X}
		}
		if ends[0] != ends[1] {
			return fmt.Errorf("layer %s: its crop depends on the input size", l.Name)
		}
		c.cropEnds[crop] = ends[0]
	}
	return nil
}

// name maps an ncnn blob to its ONNX name.
func (c *converter) name(blob string) string {
	if a, ok := c.alias[blob]; ok {
		return a
	}
	switch blob {
	case c.net.Input:
		return inputName
	case c.net.Output:
		return outputName
	}
	return blob
}

func (c *converter) names(blobs []string) []string {
	out := make([]string, len(blobs))
	for i, b := range blobs {
		out[i] = c.name(b)
	}
	return out
}

func (c *converter) node(op, name string, inputs []string, output string, attrs ...onnxpb.Attr) {
	c.graph.Nodes = append(c.graph.Nodes, onnxpb.Node{Op: op, Name: name, Inputs: inputs, Outputs: []string{output}, Attrs: attrs})
}

// weight adds an initializer, as float16 with a Cast to float32 when that
// is exact (ONNX Runtime folds the Cast when it loads the model), since it
// halves the file.
func (c *converter) weight(name string, dims []int64, v []float32) string {
	if t, ok := onnxpb.Float16Tensor(name+"_f16", dims, v); ok {
		c.graph.Initializers = append(c.graph.Initializers, t)
		c.node("Cast", name+"_cast", []string{t.Name}, name, onnxpb.Int("to", int64(onnxpb.Float)))
		return name
	}
	c.graph.Initializers = append(c.graph.Initializers, onnxpb.FloatTensor(name, dims, v))
	return name
}

func (c *converter) layer(l ncnn.Layer) error {
	in := c.names(l.Inputs)
	if _, ok := l.Op.(ncnn.Split); ok {
		for _, o := range l.Outputs {
			if o == c.net.Output {
				return errors.New("a Split gives the network's output")
			}
			c.alias[o] = in[0]
		}
		return nil
	}
	if c.skipped[l.Name] { // folded into the convolution that reads it
		c.alias[l.Outputs[0]] = in[0]
		return nil
	}
	out := c.name(l.Outputs[0])
	if done, err := c.int8Layer(l, in, out); done || err != nil {
		return err
	}
	switch op := l.Op.(type) {
	case *ncnn.Conv:
		k := int64(op.Kernel)
		weight, dims := op.Weight, []int64{int64(op.Out), int64(op.In), k, k}
		if factor, ok := c.folds[l.Name]; ok {
			weight = make([]float32, len(op.Weight))
			for i, w := range op.Weight {
				weight[i] = w * factor
			}
		}
		kind := "Conv"
		if op.Transposed {
			// ONNX's ConvTranspose wants [in][out][ky][kx].
			kind, weight, dims = "ConvTranspose", swapOuterAxes(op.Weight, op.Out, op.In, op.Kernel*op.Kernel), []int64{int64(op.In), int64(op.Out), k, k}
		}
		inputs := append(in, c.weight(l.Name+"_weight", dims, weight))
		if op.Bias != nil {
			inputs = append(inputs, c.weight(l.Name+"_bias", []int64{int64(op.Out)}, op.Bias))
		}
		s, p := int64(op.Stride), int64(op.Pad)
		c.activated(kind, l.Name, inputs, out, op.Act, onnxpb.Ints("kernel_shape", k, k), onnxpb.Ints("strides", s, s), onnxpb.Ints("pads", p, p, p, p))
	case *ncnn.Dense:
		// On the N×C×1×1 blob that pooling leaves, a 1×1 convolution.
		if x := c.shapes[l.Inputs[0]]; x.H != 1 || x.W != 1 {
			return errors.New("InnerProduct is implemented only after global pooling")
		}
		inputs := append(in, c.weight(l.Name+"_weight", []int64{int64(op.Out), int64(op.In), 1, 1}, op.Weight))
		if op.Bias != nil {
			inputs = append(inputs, c.weight(l.Name+"_bias", []int64{int64(op.Out)}, op.Bias))
		}
		c.activated("Conv", l.Name, inputs, out, op.Act, onnxpb.Ints("kernel_shape", 1, 1))
	case ncnn.GlobalAvgPool:
		c.node("GlobalAveragePool", l.Name, in, out)
	case ncnn.ChannelScale:
		c.node("Mul", l.Name, in, out)
	case *ncnn.Crop:
		c.crop(l.Name, op, in[0], out)
	case ncnn.Eltwise:
		kind := map[ncnn.EltwiseOp]string{ncnn.Sum: "Sum", ncnn.Product: "Mul", ncnn.Max: "Max"}[op.Op]
		if len(in) == 2 && kind == "Sum" {
			kind = "Add"
		}
		if kind == "Mul" && len(in) != 2 {
			return errors.New("a product of more than two inputs is not implemented")
		}
		c.node(kind, l.Name, in, out)
	case *ncnn.Constant:
		s := op.Shape
		c.graph.Initializers = append(c.graph.Initializers, onnxpb.FloatTensor(out, []int64{1, int64(s.C), int64(s.H), int64(s.W)}, op.Data))
	case *ncnn.Binary:
		c.binary(l.Name, op, in, out)
	case ncnn.Unary:
		if op.Kind == ncnn.SigmoidLayer {
			c.node("Sigmoid", l.Name, in, out)
			break
		}
		// Swish, x·sigmoid(x), which opset 17 has no operator for.
		c.node("Sigmoid", l.Name+"_sigmoid", in, l.Name+"_gate")
		c.node("Mul", l.Name, []string{in[0], l.Name + "_gate"}, out)
	case *ncnn.PReLU:
		slopes := []int64{int64(len(op.Slopes)), 1, 1}
		c.node("PRelu", l.Name, append(in, c.weight(l.Name+"_slope", slopes, op.Slopes)), out)
	case ncnn.Concat:
		c.node("Concat", l.Name, in, out, onnxpb.Int("axis", 1))
	case ncnn.PixelShuffle:
		c.node("DepthToSpace", l.Name, in, out, onnxpb.Int("blocksize", int64(op.Factor)), onnxpb.StringAttr("mode", "CRD"))
	case ncnn.Upsample:
		// Output pixel y takes input floor(y / factor): Resize's
		// asymmetric coordinates rounded down.
		f := float32(op.Factor)
		scales := c.weight(l.Name+"_scales", []int64{4}, []float32{1, 1, f, f})
		c.node("Resize", l.Name, []string{in[0], "", scales}, out, onnxpb.StringAttr("mode", "nearest"),
			onnxpb.StringAttr("coordinate_transformation_mode", "asymmetric"), onnxpb.StringAttr("nearest_mode", "floor"))
	default:
		return fmt.Errorf("%T is not implemented", op)
	}
	return nil
}

// binary adds op, from in to out: ONNX's Add, Sub, Mul or Div, which
// broadcast a per-channel constant as ncnn does, with a scalar as a
// one-element initializer and the reversed forms' operands swapped.
func (c *converter) binary(name string, op *ncnn.Binary, in []string, out string) {
	kind := map[ncnn.BinaryOpKind]string{ncnn.Add: "Add", ncnn.Sub: "Sub", ncnn.Mul: "Mul", ncnn.Div: "Div", ncnn.RSub: "Sub", ncnn.RDiv: "Div"}[op.Op]
	if op.Scalar != nil {
		in = append(in, c.weight(name+"_scalar", []int64{1}, []float32{*op.Scalar}))
	}
	if op.Op == ncnn.RSub || op.Op == ncnn.RDiv {
		in = []string{in[1], in[0]}
	}
	c.node(kind, name, in, out)
}

// crop adds op, from in to out, as a Slice.
func (c *converter) crop(name string, op *ncnn.Crop, in, out string) {
	ends := c.cropEnds[op]
	end := func(n int) int64 {
		if n == 0 {
			return math.MaxInt64 // to the end
		}
		return int64(-n)
	}
	starts := c.weightInts(name+"_starts", int64(op.Y), int64(op.X))
	stops := c.weightInts(name+"_ends", end(ends[0]), end(ends[1]))
	axes := c.weightInts(name+"_axes", 2, 3)
	c.node("Slice", name, []string{in, starts, stops, axes}, out)
}

// activated adds an operation followed by its activation.
func (c *converter) activated(kind, name string, inputs []string, out string, act ncnn.Activation, attrs ...onnxpb.Attr) {
	if act.Kind == ncnn.NoActivation {
		c.node(kind, name, inputs, out, attrs...)
		return
	}
	pre := name + "_preact"
	c.node(kind, name, inputs, pre, attrs...)
	switch act.Kind {
	case ncnn.ReLU:
		c.node("Relu", name+"_relu", []string{pre}, out)
	case ncnn.LeakyReLU:
		c.node("LeakyRelu", name+"_leakyrelu", []string{pre}, out, onnxpb.FloatAttr("alpha", act.Slope))
	case ncnn.Sigmoid:
		c.node("Sigmoid", name+"_sigmoid", []string{pre}, out)
	}
}

// weightInts adds an int64 initializer.
func (c *converter) weightInts(name string, v ...int64) string {
	c.graph.Initializers = append(c.graph.Initializers, onnxpb.Int64Tensor(name, []int64{int64(len(v))}, v))
	return name
}

// swapOuterAxes turns a [a][b][rest] array into [b][a][rest].
func swapOuterAxes(v []float32, a, b, rest int) []float32 {
	out := make([]float32, len(v))
	for i := range a {
		for j := range b {
			copy(out[(j*a+i)*rest:(j*a+i+1)*rest], v[(i*b+j)*rest:(i*b+j+1)*rest])
		}
	}
	return out
}
