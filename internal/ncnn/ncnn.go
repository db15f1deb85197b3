// Package ncnn reads neural networks in ncnn's format (a .param text file
// and a .bin weight file) into typed layers, and runs them with a plain
// reference interpreter. It knows the layers the waifu2x models use and
// refuses any other layer or option with an error that names it, so a
// model it cannot represent exactly is never half-converted.
//
// The reference interpreter (Forward) is deliberately naive: it follows
// ncnn's definition of each layer in float64 with no tiling, packing or
// fusion, so that it can check a converted model on a few pixels.
package ncnn

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// paramMagic is the first line of every .param file in ncnn's text format.
const paramMagic = "7767517"

// Net is a parsed network: its layers in file order, which is an order in
// which each layer's inputs are computed before it runs.
type Net struct {
	Input  string // the blob the image is fed to
	Output string // the one blob no layer consumes
	Layers []Layer
	// InputShape is the channels, height and width the .param file gives
	// its input (any of them may be 0: not given).
	InputShape [3]int
}

// Layer is one node of the network. Op is one of the types below.
type Layer struct {
	Name    string
	Op      Op
	Inputs  []string
	Outputs []string
}

// Op is the operation of a layer: *Conv, *Dense, GlobalAvgPool,
// ChannelScale, *Crop, Eltwise or Split.
type Op interface{ kind() string }

// Activation is applied to a layer's output.
type Activation struct {
	Kind  ActivationKind
	Slope float32 // LeakyReLU's slope for negative inputs
}

// ActivationKind names an activation; the values are ncnn's.
type ActivationKind int

const (
	NoActivation ActivationKind = 0
	ReLU         ActivationKind = 1
	LeakyReLU    ActivationKind = 2 // ReLU with a slope: ncnn's ReLU with parameter 0
	Sigmoid      ActivationKind = 4
)

// Conv is ncnn's Convolution, or its Deconvolution when Transposed. The
// kernel is square, the stride the same both ways and the padding the same
// on all four sides (for a deconvolution, the padding is cut from the
// result). Weight is laid out [out][in][ky][kx] in both cases: ncnn's
// deconvolution scatters input pixel (y, x) into out[y*stride+ky][x*stride+kx]
// with weight [o][i][ky][kx], without flipping the kernel.
type Conv struct {
	Transposed bool
	In, Out    int
	Kernel     int
	Stride     int
	Pad        int
	Weight     []float32
	Bias       []float32 // nil when the layer has no bias
	Act        Activation
}

// Dense is ncnn's InnerProduct on a 1×1 blob of In channels: a matrix of
// [Out][In] weights.
type Dense struct {
	In, Out int
	Weight  []float32
	Bias    []float32
	Act     Activation
}

// GlobalAvgPool is ncnn's Pooling with average pooling over the whole blob:
// each channel becomes its mean.
type GlobalAvgPool struct{}

// ChannelScale is ncnn's Scale with its scale taken from a second input:
// channel c of the first input times element c of the second.
type ChannelScale struct{}

// Crop is ncnn's Crop with a reference blob: the first input cut to the
// width and height of the second, starting X columns and Y rows in.
type Crop struct{ X, Y int }

// Eltwise is ncnn's Eltwise: its inputs combined element by element.
type Eltwise struct{ Op EltwiseOp }

// EltwiseOp is how Eltwise combines; the values are ncnn's.
type EltwiseOp int

const (
	Product EltwiseOp = 0
	Sum     EltwiseOp = 1
	Max     EltwiseOp = 2
)

// Split gives its input to several consumers; it computes nothing.
type Split struct{}

func (*Conv) kind() string         { return "Convolution" }
func (*Dense) kind() string        { return "InnerProduct" }
func (GlobalAvgPool) kind() string { return "Pooling" }
func (ChannelScale) kind() string  { return "Scale" }
func (*Crop) kind() string         { return "Crop" }
func (Eltwise) kind() string       { return "Eltwise" }
func (Split) kind() string         { return "Split" }

// params holds one layer's key=value pairs: ncnn writes arrays as a key
// below -23300 (the real key is -23300 - k) and a value "n,v1,...,vn".
type params map[int][]string

func (p params) int(key, def int) (int, error) {
	v, ok := p[key]
	if !ok {
		return def, nil
	}
	if len(v) != 1 {
		return 0, fmt.Errorf("parameter %d is an array, want a number", key)
	}
	n, err := strconv.Atoi(v[0])
	if err != nil {
		return 0, fmt.Errorf("parameter %d=%q is not an integer", key, v[0])
	}
	return n, nil
}

func (p params) floats(key int) ([]float32, error) {
	var out []float32
	for _, s := range p[key] {
		f, err := strconv.ParseFloat(s, 32)
		if err != nil {
			return nil, fmt.Errorf("parameter %d: %q is not a number", key, s)
		}
		out = append(out, float32(f))
	}
	return out, nil
}

// Parse reads a network from its .param text and its .bin weights. It
// fails on any layer type, parameter value or weight encoding it does not
// implement, and when the weights are shorter or longer than the layers
// need.
func Parse(param, bin []byte) (*Net, error) {
	lines := bufio.NewScanner(bytes.NewReader(param))
	lines.Buffer(make([]byte, 0, 64*1024), 1<<20)
	next := func() ([]string, bool) {
		for lines.Scan() {
			if f := strings.Fields(lines.Text()); len(f) > 0 {
				return f, true
			}
		}
		return nil, false
	}
	if f, ok := next(); !ok || len(f) != 1 || f[0] != paramMagic {
		return nil, errors.New("not an ncnn text .param file (no 7767517 magic line)")
	}
	counts, ok := next()
	if !ok || len(counts) != 2 {
		return nil, errors.New("missing the layer and blob counts")
	}
	layerCount, err := strconv.Atoi(counts[0])
	if err != nil || layerCount <= 0 {
		return nil, fmt.Errorf("bad layer count %q", counts[0])
	}
	weights := &weightReader{r: bytes.NewReader(bin)}
	net := &Net{}
	consumed := map[string]bool{}
	for i := range layerCount {
		f, ok := next()
		if !ok {
			return nil, fmt.Errorf("the file ends after %d of %d layers", i, layerCount)
		}
		layer, p, err := parseLayerLine(f)
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
		typ := f[0]
		if typ == "Input" {
			if net.Input != "" || len(layer.Outputs) != 1 {
				return nil, fmt.Errorf("layer %s: want exactly one Input layer with one output", layer.Name)
			}
			net.Input = layer.Outputs[0]
			for i, key := range []int{2, 1, 0} { // channels, height, width
				if net.InputShape[i], err = p.int(key, 0); err != nil {
					return nil, fmt.Errorf("layer %s: %w", layer.Name, err)
				}
			}
			continue
		}
		if layer.Op, err = decodeOp(typ, p, weights, len(layer.Inputs)); err != nil {
			return nil, fmt.Errorf("layer %s (%s): %w", layer.Name, typ, err)
		}
		for _, in := range layer.Inputs {
			consumed[in] = true
		}
		net.Layers = append(net.Layers, layer)
	}
	if err := lines.Err(); err != nil {
		return nil, err
	}
	if weights.r.Len() != 0 {
		return nil, fmt.Errorf("%d bytes of weights are left over: the .bin does not belong to this .param", weights.r.Len())
	}
	if net.Input == "" {
		return nil, errors.New("no Input layer")
	}
	for _, l := range net.Layers {
		for _, out := range l.Outputs {
			if !consumed[out] {
				if net.Output != "" {
					return nil, fmt.Errorf("two outputs, %s and %s; want one", net.Output, out)
				}
				net.Output = out
			}
		}
	}
	if net.Output == "" {
		return nil, errors.New("no output blob")
	}
	return net, nil
}

// parseLayerLine reads "Type Name nIn nOut in... out... key=value...".
func parseLayerLine(f []string) (Layer, params, error) {
	if len(f) < 4 {
		return Layer{}, nil, fmt.Errorf("short line %q", strings.Join(f, " "))
	}
	nIn, err1 := strconv.Atoi(f[2])
	nOut, err2 := strconv.Atoi(f[3])
	if err1 != nil || err2 != nil || nIn < 0 || nOut < 0 || len(f) < 4+nIn+nOut {
		return Layer{}, nil, fmt.Errorf("bad blob counts in %q", strings.Join(f, " "))
	}
	layer := Layer{Name: f[1], Inputs: f[4 : 4+nIn], Outputs: f[4+nIn : 4+nIn+nOut]}
	p := params{}
	for _, kv := range f[4+nIn+nOut:] {
		k, v, ok := strings.Cut(kv, "=")
		key, err := strconv.Atoi(k)
		if !ok || err != nil {
			return Layer{}, nil, fmt.Errorf("bad parameter %q", kv)
		}
		if key <= -23300 {
			items := strings.Split(v, ",")
			n, err := strconv.Atoi(items[0])
			if err != nil || n != len(items)-1 {
				return Layer{}, nil, fmt.Errorf("bad array parameter %q", kv)
			}
			p[-23300-key] = items[1:]
			continue
		}
		p[key] = []string{v}
	}
	return layer, p, nil
}

// decodeOp turns one layer's parameters into its Op and reads its weights,
// in the order ncnn's load_model reads them.
func decodeOp(typ string, p params, w *weightReader, inputs int) (Op, error) {
	wantInputs := func(n int) error {
		if inputs != n {
			return fmt.Errorf("%d inputs, want %d", inputs, n)
		}
		return nil
	}
	switch typ {
	case "Split":
		return Split{}, wantInputs(1)
	case "Convolution", "Deconvolution":
		return decodeConv(typ == "Deconvolution", p, w, wantInputs(1))
	case "InnerProduct":
		return decodeDense(p, w, wantInputs(1))
	case "Pooling":
		kind, err := p.int(0, 0)
		if err != nil {
			return nil, err
		}
		global, err := p.int(4, 0)
		if err != nil {
			return nil, err
		}
		if kind != 1 || global != 1 {
			return nil, fmt.Errorf("only global average pooling is implemented (0=1 4=1), got 0=%d 4=%d", kind, global)
		}
		return GlobalAvgPool{}, wantInputs(1)
	case "Scale":
		size, err := p.int(0, 0)
		if err != nil {
			return nil, err
		}
		bias, err := p.int(1, 0)
		if err != nil {
			return nil, err
		}
		if size != -233 || bias != 0 {
			return nil, fmt.Errorf("only a scale taken from a second input without bias is implemented (0=-233), got 0=%d 1=%d", size, bias)
		}
		return ChannelScale{}, wantInputs(2)
	case "Crop":
		x, err := p.int(0, 0)
		if err != nil {
			return nil, err
		}
		y, err := p.int(1, 0)
		if err != nil {
			return nil, err
		}
		for key := range p {
			if key > 1 {
				return nil, fmt.Errorf("only a crop to a reference blob's size is implemented; parameter %d is set", key)
			}
		}
		return &Crop{X: x, Y: y}, wantInputs(2)
	case "Eltwise":
		op, err := p.int(0, 1)
		if err != nil {
			return nil, err
		}
		if _, ok := p[1]; ok {
			return nil, errors.New("Eltwise coefficients are not implemented")
		}
		if op < 0 || op > 2 {
			return nil, fmt.Errorf("Eltwise operation %d is not implemented", op)
		}
		if inputs < 2 {
			return nil, fmt.Errorf("%d inputs, want at least 2", inputs)
		}
		return Eltwise{Op: EltwiseOp(op)}, nil
	}
	return nil, fmt.Errorf("layer type %s is not implemented", typ)
}

func decodeConv(transposed bool, p params, w *weightReader, err error) (Op, error) {
	if err != nil {
		return nil, err
	}
	c := &Conv{Transposed: transposed}
	ints := []struct {
		key  int
		def  int
		dest *int
	}{{0, 0, &c.Out}, {1, 0, &c.Kernel}, {3, 1, &c.Stride}, {4, 0, &c.Pad}}
	for _, i := range ints {
		if *i.dest, err = p.int(i.key, i.def); err != nil {
			return nil, err
		}
	}
	// Only square kernels, equal strides, equal padding on all sides and no
	// dilation are implemented: every other key, or one of these keys with
	// a different value, is refused.
	same := map[int]int{2: 1, 12: 1, 11: c.Kernel, 13: c.Stride, 14: c.Pad, 15: c.Pad, 16: c.Pad}
	for key := range p {
		switch want, checked := same[key]; {
		case checked:
			if v, err := p.int(key, want); err != nil || v != want {
				return nil, fmt.Errorf("parameter %d=%v is not implemented (want %d)", key, p[key], want)
			}
		case key > 6 && key != 9 && key != 10:
			return nil, fmt.Errorf("parameter %d is not implemented", key)
		}
	}
	bias, err := p.int(5, 0)
	if err != nil {
		return nil, err
	}
	size, err := p.int(6, 0)
	if err != nil {
		return nil, err
	}
	if c.Out <= 0 || c.Kernel <= 0 || c.Stride <= 0 || c.Pad < 0 || size <= 0 || size%(c.Out*c.Kernel*c.Kernel) != 0 {
		return nil, fmt.Errorf("inconsistent shape: %d outputs, kernel %d, stride %d, pad %d, %d weights", c.Out, c.Kernel, c.Stride, c.Pad, size)
	}
	c.In = size / (c.Out * c.Kernel * c.Kernel)
	c.Act, c.Weight, c.Bias, err = decodeWeighted(p, w, size, c.Out, bias != 0)
	return c, err
}

func decodeDense(p params, w *weightReader, err error) (Op, error) {
	if err != nil {
		return nil, err
	}
	d := &Dense{}
	if d.Out, err = p.int(0, 0); err != nil {
		return nil, err
	}
	bias, err := p.int(1, 0)
	if err != nil {
		return nil, err
	}
	size, err := p.int(2, 0)
	if err != nil {
		return nil, err
	}
	if q, _ := p.int(8, 0); q != 0 {
		return nil, errors.New("int8 weights are not implemented")
	}
	if d.Out <= 0 || size <= 0 || size%d.Out != 0 {
		return nil, fmt.Errorf("inconsistent shape: %d outputs, %d weights", d.Out, size)
	}
	d.In = size / d.Out
	d.Act, d.Weight, d.Bias, err = decodeWeighted(p, w, size, d.Out, bias != 0)
	return d, err
}

// decodeWeighted reads what Convolution, Deconvolution and InnerProduct
// share: the activation, then size weights and, with bias, out biases.
func decodeWeighted(p params, w *weightReader, size, out int, bias bool) (act Activation, weight, biases []float32, err error) {
	if act, err = decodeActivation(p); err != nil {
		return
	}
	if weight, err = w.tagged(size); err != nil || !bias {
		return
	}
	biases, err = w.raw(out)
	return
}

// decodeActivation reads parameter 9 (the activation) and 10 (its
// parameters).
func decodeActivation(p params) (Activation, error) {
	kind, err := p.int(9, 0)
	if err != nil {
		return Activation{}, err
	}
	args, err := p.floats(10)
	if err != nil {
		return Activation{}, err
	}
	switch a := ActivationKind(kind); a {
	case NoActivation, Sigmoid:
		return Activation{Kind: a}, nil
	case ReLU: // ncnn's activation 1 is ReLU, but LeakyReLU when given a slope
		if len(args) == 0 || args[0] == 0 {
			return Activation{Kind: ReLU}, nil
		}
		return Activation{Kind: LeakyReLU, Slope: args[0]}, nil
	case LeakyReLU:
		if len(args) != 1 {
			return Activation{}, errors.New("LeakyReLU needs one slope parameter")
		}
		return Activation{Kind: LeakyReLU, Slope: args[0]}, nil
	}
	return Activation{}, fmt.Errorf("activation %d is not implemented", kind)
}

// weightReader reads the .bin file: a sequence of arrays, each either raw
// little-endian float32 or, for the arrays ncnn loads with type 0, behind a
// four-byte tag that says how they are stored.
type weightReader struct{ r *bytes.Reader }

// Tags of ncnn's type-0 weight arrays.
const (
	tagFloat16 = 0x01306B47
	tagInt8    = 0x000D4B38
	tagFloat32 = 0x0002C056 // float32 "with extra scaling", which ncnn reads as plain float32
)

// tagged reads an array of n weights behind its tag: float16 (padded to a
// multiple of four bytes) or float32. Quantised encodings are refused.
func (w *weightReader) tagged(n int) ([]float32, error) {
	var tag [4]byte
	if _, err := io.ReadFull(w.r, tag[:]); err != nil {
		return nil, errShortWeights
	}
	switch t := binary.LittleEndian.Uint32(tag[:]); {
	case t == tagFloat16:
		half := make([]byte, (2*n+3)/4*4)
		if _, err := io.ReadFull(w.r, half); err != nil {
			return nil, errShortWeights
		}
		out := make([]float32, n)
		for i := range out {
			out[i] = halfToFloat(binary.LittleEndian.Uint16(half[2*i:]))
		}
		return out, nil
	case t == tagFloat32 || t == 0:
		return w.raw(n)
	case t == tagInt8:
		return nil, errors.New("int8 weights are not implemented")
	default:
		return nil, fmt.Errorf("quantised weights (tag %#08x) are not implemented", t)
	}
}

// raw reads n little-endian float32 values.
func (w *weightReader) raw(n int) ([]float32, error) {
	buf := make([]byte, 4*n)
	if _, err := io.ReadFull(w.r, buf); err != nil {
		return nil, errShortWeights
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:]))
	}
	return out, nil
}

var errShortWeights = errors.New("the .bin file ends before this layer's weights: it does not belong to this .param")

// halfToFloat converts an IEEE 754 half-precision value exactly.
func halfToFloat(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	frac := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // infinity or NaN
		return math.Float32frombits(sign | 0xff<<23 | frac<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+127-15)<<23 | frac<<13)
	case frac == 0: // zero
		return math.Float32frombits(sign)
	}
	// Subnormal: frac × 2^-24, exact in float32.
	v := float32(frac) * (1.0 / (1 << 24))
	if sign != 0 {
		v = -v
	}
	return v
}
