// Package ncnn reads neural networks in ncnn's format (a .param text file
// and a .bin weight file) into typed layers, and runs them with a plain
// reference interpreter. It knows the layers the waifu2x models use, and
// those of the efficient super-resolution networks since (SPAN,
// Real-ESRGAN's compact ones: constants, element-wise arithmetic, Swish,
// Sigmoid, PReLU, Concat, PixelShuffle, nearest Interp), and refuses any
// other layer or option with an error that names it, so a model it
// cannot represent exactly is never half-converted.
//
// The reference interpreter (Forward) is deliberately naive: it follows
// ncnn's definition of each layer in float64 with no tiling, packing or
// fusion, so that it can check a converted model on a few pixels.
package ncnn

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
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
// ChannelScale, *Crop, Eltwise, Split, *Constant, *Binary, Unary, *PReLU,
// Concat, PixelShuffle or Upsample.
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

// Constant is ncnn's MemoryData: a blob of fixed values, and no input.
type Constant struct {
	Shape Shape
	Data  []float32
}

// Binary is ncnn's BinaryOp: two inputs combined element by element, the
// second broadcast when it is one value or one per channel; or, with
// Scalar set, one input combined with Scalar.
type Binary struct {
	Op     BinaryOpKind
	Scalar *float32
}

// BinaryOpKind is how Binary combines; the values are ncnn's. The
// reversed forms take the second operand first.
type BinaryOpKind int

const (
	Add  BinaryOpKind = 0
	Sub  BinaryOpKind = 1
	Mul  BinaryOpKind = 2
	Div  BinaryOpKind = 3
	RSub BinaryOpKind = 7
	RDiv BinaryOpKind = 8
)

// Unary is an activation layer of its own: ncnn's Sigmoid or Swish
// (x·sigmoid(x)).
type Unary struct{ Kind UnaryKind }

// UnaryKind names a Unary layer's function.
type UnaryKind int

const (
	SigmoidLayer UnaryKind = iota
	Swish
)

// PReLU is ncnn's PReLU: negative values times their channel's slope, or
// one slope for every channel.
type PReLU struct{ Slopes []float32 }

// Concat is ncnn's Concat along the channels: its inputs one after
// another.
type Concat struct{}

// PixelShuffle is ncnn's PixelShuffle in PyTorch's order (ONNX's
// DepthToSpace in mode CRD): C·r² channels of H×W become C of rH×rW,
// output (c, y·r+i, x·r+j) taken from input channel c·r²+i·r+j.
type PixelShuffle struct{ Factor int }

// Upsample is ncnn's Interp with nearest-neighbour resizing by a whole
// factor: each pixel repeated Factor times both ways.
type Upsample struct{ Factor int }

func (*Conv) kind() string         { return "Convolution" }
func (*Dense) kind() string        { return "InnerProduct" }
func (GlobalAvgPool) kind() string { return "Pooling" }
func (ChannelScale) kind() string  { return "Scale" }
func (*Crop) kind() string         { return "Crop" }
func (Eltwise) kind() string       { return "Eltwise" }
func (Split) kind() string         { return "Split" }
func (*Constant) kind() string     { return "MemoryData" }
func (*Binary) kind() string       { return "BinaryOp" }
func (Unary) kind() string         { return "Unary" }
func (*PReLU) kind() string        { return "PReLU" }
func (Concat) kind() string        { return "Concat" }
func (PixelShuffle) kind() string  { return "PixelShuffle" }
func (Upsample) kind() string      { return "Interp" }

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
