package ncnn

import (
	"errors"
	"fmt"
)

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
	case "MemoryData":
		return decodeConstant(p, w, wantInputs(0))
	case "BinaryOp":
		return decodeBinary(p, inputs)
	case "Sigmoid":
		return Unary{Kind: SigmoidLayer}, wantInputs(1)
	case "Swish":
		return Unary{Kind: Swish}, wantInputs(1)
	case "PReLU":
		n, err := p.int(0, 0)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("PReLU needs its count of slopes (0=n), got %v", p[0])
		}
		slopes, err := w.raw(n)
		if err != nil {
			return nil, err
		}
		return &PReLU{Slopes: slopes}, wantInputs(1)
	case "Concat":
		if axis, err := p.int(0, 0); err != nil || axis != 0 {
			return nil, fmt.Errorf("only a concatenation of channels (0=0) is implemented, got 0=%v", p[0])
		}
		if inputs < 2 {
			return nil, fmt.Errorf("%d inputs, want at least 2", inputs)
		}
		return Concat{}, nil
	case "PixelShuffle":
		factor, err := p.int(0, 1)
		if err != nil || factor < 1 {
			return nil, fmt.Errorf("PixelShuffle's factor 0=%v is not a whole number from 1", p[0])
		}
		if mode, err := p.int(1, 0); err != nil || mode != 0 {
			return nil, fmt.Errorf("only PixelShuffle in PyTorch's order (1=0) is implemented, got 1=%v", p[1])
		}
		return PixelShuffle{Factor: factor}, wantInputs(1)
	case "Interp":
		return decodeUpsample(p, wantInputs(1))
	}
	return nil, fmt.Errorf("layer type %s is not implemented", typ)
}

// decodeConstant reads MemoryData: a three-dimensional blob (0=w 1=h 2=c)
// of raw float32 values.
func decodeConstant(p params, w *weightReader, err error) (Op, error) {
	if err != nil {
		return nil, err
	}
	var s Shape
	for _, d := range []struct {
		key  int
		dest *int
	}{{0, &s.W}, {1, &s.H}, {2, &s.C}} {
		if *d.dest, err = p.int(d.key, 0); err != nil {
			return nil, err
		}
	}
	if depth, _ := p.int(11, 0); s.W <= 0 || s.H <= 0 || s.C <= 0 || depth > 1 {
		return nil, fmt.Errorf("only a MemoryData of three dimensions (0=w 1=h 2=c) is implemented, got %v", p)
	}
	data, err := w.raw(s.C * s.H * s.W)
	return &Constant{Shape: s, Data: data}, err
}

// decodeBinary reads BinaryOp: 0=operation, 1=with a scalar, 2=the scalar.
func decodeBinary(p params, inputs int) (Op, error) {
	op, err := p.int(0, 0)
	if err != nil {
		return nil, err
	}
	switch BinaryOpKind(op) {
	case Add, Sub, Mul, Div, RSub, RDiv:
	default:
		return nil, fmt.Errorf("BinaryOp operation %d is not implemented (add, sub, mul, div, rsub and rdiv are)", op)
	}
	withScalar, err := p.int(1, 0)
	if err != nil {
		return nil, err
	}
	b := &Binary{Op: BinaryOpKind(op)}
	want := 2
	if withScalar != 0 {
		scalar, err := p.floats(2)
		if err != nil || len(scalar) > 1 {
			return nil, fmt.Errorf("BinaryOp's scalar 2=%v is not a number", p[2])
		}
		b.Scalar = new(float32)
		if len(scalar) == 1 {
			*b.Scalar = scalar[0]
		}
		want = 1
	}
	if inputs != want {
		return nil, fmt.Errorf("%d inputs, want %d", inputs, want)
	}
	return b, nil
}

// decodeUpsample reads Interp: only nearest-neighbour (0=1) by the same
// whole factor both ways (1=height scale, 2=width scale) is implemented.
func decodeUpsample(p params, err error) (Op, error) {
	if err != nil {
		return nil, err
	}
	kind, err := p.int(0, 0)
	if err != nil {
		return nil, err
	}
	scales, err := p.floats(1)
	if err != nil {
		return nil, err
	}
	widthScales, err := p.floats(2)
	if err != nil {
		return nil, err
	}
	for key := range p {
		if key > 2 {
			return nil, fmt.Errorf("Interp parameter %d (an output size, or corners aligned) is not implemented", key)
		}
	}
	if kind != 1 || len(scales) != 1 || len(widthScales) != 1 || scales[0] != widthScales[0] || scales[0] < 1 || scales[0] != float32(int(scales[0])) {
		return nil, fmt.Errorf("only Interp of nearest neighbours (0=1) by one whole factor (1=2=n) is implemented, got %v", p)
	}
	return Upsample{Factor: int(scales[0])}, nil
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
