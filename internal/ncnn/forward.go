package ncnn

import (
	"fmt"
	"math"
)

// Blob is a planar image of C channels of H×W values, channel after
// channel, row after row: ncnn's Mat for one image, and ONNX's NCHW
// tensor with N = 1.
type Blob struct {
	C, H, W int
	Data    []float64
}

// NewBlob returns a zero blob.
func NewBlob(c, h, w int) *Blob {
	return &Blob{C: c, H: h, W: w, Data: make([]float64, c*h*w)}
}

func (b *Blob) at(c, y, x int) float64 { return b.Data[(c*b.H+y)*b.W+x] }

// Forward runs the network on in with the definition of each layer, in
// float64. It is slow (no fusion, no vector code): meant to check another
// implementation on a small input.
func (n *Net) Forward(in *Blob) (*Blob, error) {
	blobs, err := n.Blobs(in)
	if err != nil {
		return nil, err
	}
	return blobs[n.Output], nil
}

// Blobs runs the network on in as Forward does and returns the value of
// every blob, by name: what a quantizer calibrates its ranges on.
func (n *Net) Blobs(in *Blob) (map[string]*Blob, error) {
	return evaluate(n, in, apply)
}

// evaluate runs f on every layer in file order, each with the values of
// its inputs, and returns every blob's value. Every output of a layer gets
// f's result (a Split's outputs are all its input).
func evaluate[T any](n *Net, in T, f func(Op, []T) (T, error)) (map[string]T, error) {
	values := map[string]T{n.Input: in}
	for _, l := range n.Layers {
		ins := make([]T, len(l.Inputs))
		for i, name := range l.Inputs {
			v, ok := values[name]
			if !ok {
				return nil, fmt.Errorf("layer %s: input %s is not computed yet", l.Name, name)
			}
			ins[i] = v
		}
		out, err := f(l.Op, ins)
		if err != nil {
			return nil, fmt.Errorf("layer %s: %w", l.Name, err)
		}
		for _, name := range l.Outputs {
			values[name] = out
		}
	}
	return values, nil
}

// apply computes one layer. Its shape rule (shapeOf) has checked that the
// inputs fit and gives the output's shape.
func apply(op Op, ins []*Blob) (*Blob, error) {
	shapes := make([]Shape, len(ins))
	for i, b := range ins {
		shapes[i] = Shape{b.C, b.H, b.W}
	}
	shape, err := shapeOf(op, shapes)
	if err != nil {
		return nil, err
	}
	if c, ok := op.(*Constant); ok {
		out := NewBlob(shape.C, shape.H, shape.W)
		for i, v := range c.Data {
			out.Data[i] = float64(v)
		}
		return out, nil
	}
	x := ins[0]
	if _, ok := op.(Split); ok {
		return x, nil
	}
	out := NewBlob(shape.C, shape.H, shape.W)
	switch op := op.(type) {
	case *Binary:
		combine(op, ins, out)
	case Unary:
		for i, v := range x.Data {
			s := 1 / (1 + math.Exp(-v))
			if op.Kind == Swish {
				s *= v
			}
			out.Data[i] = s
		}
	case *PReLU:
		for i, v := range x.Data {
			if v < 0 {
				v *= float64(op.Slopes[min(i/(x.H*x.W), len(op.Slopes)-1)])
			}
			out.Data[i] = v
		}
	case Concat:
		at := 0
		for _, in := range ins {
			at += copy(out.Data[at:], in.Data)
		}
	case PixelShuffle:
		r := op.Factor
		for c := range out.C {
			for y := range out.H {
				for xx := range out.W {
					out.Data[(c*out.H+y)*out.W+xx] = x.at(c*r*r+(y%r)*r+xx%r, y/r, xx/r)
				}
			}
		}
	case Upsample:
		for c := range out.C {
			for y := range out.H {
				for xx := range out.W {
					out.Data[(c*out.H+y)*out.W+xx] = x.at(c, y/op.Factor, xx/op.Factor)
				}
			}
		}
	case *Conv:
		if op.Transposed {
			deconvolve(op, x, out)
		} else {
			convolve(op, x, out)
		}
	case *Dense:
		for o := range op.Out {
			sum := bias(op.Bias, o)
			for i, v := range x.Data {
				sum += float64(float64(op.Weight[o*op.In+i]) * v) // rounded: never fused (see convolve)
			}
			out.Data[o] = activate(op.Act, sum)
		}
	case GlobalAvgPool:
		for c := range x.C {
			var sum float64
			for _, v := range x.Data[c*x.H*x.W : (c+1)*x.H*x.W] {
				sum += v
			}
			out.Data[c] = sum / float64(x.H*x.W)
		}
	case ChannelScale:
		for i, v := range x.Data {
			out.Data[i] = v * ins[1].Data[i/(x.H*x.W)]
		}
	case *Crop:
		for c := range out.C {
			for y := range out.H {
				for xx := range out.W {
					out.Data[(c*out.H+y)*out.W+xx] = x.at(c, y+op.Y, xx+op.X)
				}
			}
		}
	case Eltwise:
		copy(out.Data, x.Data)
		for _, y := range ins[1:] {
			for i, v := range y.Data {
				switch op.Op {
				case Product:
					out.Data[i] *= v
				case Sum:
					out.Data[i] += v
				case Max:
					out.Data[i] = max(out.Data[i], v)
				}
			}
		}
	default:
		return nil, fmt.Errorf("%T has no reference implementation", op)
	}
	return out, nil
}

// convolve is ncnn's Convolution: zero padding on every side, then each
// output pixel is the kernel's dot product with the window at its stride.
//
// convolve and deconvolve are not built with the race detector's checks
// (go:norace): they only read x and op and write out, which the caller
// made, on one goroutine, and the checks made the tests that compare a
// runtime with this interpreter (engine/onnx/onnxtest) ten times slower
// under -race. The arithmetic is the same.
//
//go:norace
func convolve(op *Conv, x, out *Blob) {
	k, s, pad := op.Kernel, op.Stride, op.Pad
	outH, outW := out.H, out.W
	for o := range op.Out {
		for y := range outH {
			for xx := range outW {
				sum := bias(op.Bias, o)
				for i := range op.In {
					for ky := range k {
						iy := y*s + ky - pad
						if iy < 0 || iy >= x.H {
							continue
						}
						for kx := range k {
							ix := xx*s + kx - pad
							if ix < 0 || ix >= x.W {
								continue
							}
							// The conversion rounds the product, so that
							// no compiler fuses it into the sum (Go allows
							// fused multiply-adds, as arm64's do): the
							// results, and the INT8 models calibrated
							// from them, are the same on every machine.
							sum += float64(float64(op.Weight[((o*op.In+i)*k+ky)*k+kx]) * x.at(i, iy, ix))
						}
					}
				}
				out.Data[(o*outH+y)*outW+xx] = activate(op.Act, sum)
			}
		}
	}
}

// deconvolve is ncnn's Deconvolution: every input pixel adds its value
// times the kernel into the output at its stride, and Pad rows and
// columns are then cut from each side. Not race-checked (see convolve).
//
//go:norace
func deconvolve(op *Conv, x, out *Blob) {
	k, s := op.Kernel, op.Stride
	fullH, fullW := (x.H-1)*s+k, (x.W-1)*s+k
	full := NewBlob(op.Out, fullH, fullW)
	for o := range op.Out {
		plane := full.Data[o*fullH*fullW : (o+1)*fullH*fullW]
		for i := range plane {
			plane[i] = bias(op.Bias, o)
		}
		for i := range op.In {
			for y := range x.H {
				for xx := range x.W {
					v := x.at(i, y, xx)
					for ky := range k {
						for kx := range k {
							plane[(y*s+ky)*fullW+xx*s+kx] += float64(v * float64(op.Weight[((o*op.In+i)*k+ky)*k+kx])) // rounded: never fused (see convolve)
						}
					}
				}
			}
		}
	}
	for o := range op.Out {
		for y := range out.H {
			for xx := range out.W {
				out.Data[(o*out.H+y)*out.W+xx] = activate(op.Act, full.at(o, y+op.Pad, xx+op.Pad))
			}
		}
	}
}

// combine is BinaryOp: each element of out from the inputs' elements at
// its place, an input of one value per channel (or one value) broadcast.
func combine(op *Binary, ins []*Blob, out *Blob) {
	operand := func(b *Blob, i int) float64 {
		if len(b.Data) == len(out.Data) {
			return b.Data[i]
		}
		return b.Data[min(i/(out.H*out.W), len(b.Data)-1)]
	}
	for i := range out.Data {
		a := operand(ins[0], i)
		var b float64
		if op.Scalar != nil {
			b = float64(*op.Scalar)
		} else {
			b = operand(ins[1], i)
		}
		switch op.Op {
		case Add:
			out.Data[i] = a + b
		case Sub:
			out.Data[i] = a - b
		case Mul:
			out.Data[i] = a * b
		case Div:
			out.Data[i] = a / b
		case RSub:
			out.Data[i] = b - a
		case RDiv:
			out.Data[i] = b / a
		}
	}
}

func bias(b []float32, o int) float64 {
	if b == nil {
		return 0
	}
	return float64(b[o])
}

func activate(a Activation, v float64) float64 {
	switch a.Kind {
	case ReLU:
		return max(v, 0)
	case LeakyReLU:
		if v < 0 {
			return v * float64(a.Slope)
		}
	case Sigmoid:
		return 1 / (1 + math.Exp(-v))
	}
	return v
}
