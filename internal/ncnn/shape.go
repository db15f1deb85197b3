package ncnn

import "fmt"

// Shape is a blob's channels, height and width.
type Shape struct{ C, H, W int }

// Shapes returns the shape of every blob when the input has shape in. It
// fails when the input does not fit the network exactly: a strided layer
// that would drop a row or column, a crop that leaves the image, inputs of
// different shapes combined.
func (n *Net) Shapes(in Shape) (map[string]Shape, error) {
	shapes, err := evaluate(n, in, shapeOf)
	if err != nil {
		return nil, fmt.Errorf("input %dx%d: %w", in.W, in.H, err)
	}
	return shapes, nil
}

func shapeOf(op Op, ins []Shape) (Shape, error) {
	if c, ok := op.(*Constant); ok {
		return c.Shape, nil
	}
	x := ins[0]
	switch op := op.(type) {
	case *Binary:
		if op.Scalar != nil {
			return x, nil
		}
		return broadcast(x, ins[1])
	case Unary, *PReLU:
		if p, ok := op.(*PReLU); ok && len(p.Slopes) != 1 && len(p.Slopes) != x.C {
			return Shape{}, fmt.Errorf("%d slopes for %d channels", len(p.Slopes), x.C)
		}
		return x, nil
	case Concat:
		for _, y := range ins[1:] {
			if y.H != x.H || y.W != x.W {
				return Shape{}, fmt.Errorf("inputs of %d×%d and %d×%d", x.W, x.H, y.W, y.H)
			}
			x.C += y.C
		}
		return x, nil
	case PixelShuffle:
		r := op.Factor
		if x.C%(r*r) != 0 {
			return Shape{}, fmt.Errorf("%d channels do not shuffle by %d", x.C, r)
		}
		return Shape{x.C / (r * r), x.H * r, x.W * r}, nil
	case Upsample:
		return Shape{x.C, x.H * op.Factor, x.W * op.Factor}, nil
	case Split:
		return x, nil
	case *Conv:
		if x.C != op.In {
			return Shape{}, fmt.Errorf("%d channels, want %d", x.C, op.In)
		}
		if op.Transposed {
			size := func(n int) int { return (n-1)*op.Stride + op.Kernel - 2*op.Pad }
			return Shape{op.Out, size(x.H), size(x.W)}, nil
		}
		h, w := x.H+2*op.Pad-op.Kernel, x.W+2*op.Pad-op.Kernel
		if h < 0 || w < 0 || h%op.Stride != 0 || w%op.Stride != 0 {
			return Shape{}, fmt.Errorf("a %d×%d input does not fit kernel %d, stride %d, pad %d exactly", x.W, x.H, op.Kernel, op.Stride, op.Pad)
		}
		return Shape{op.Out, h/op.Stride + 1, w/op.Stride + 1}, nil
	case *Dense:
		if x.C*x.H*x.W != op.In {
			return Shape{}, fmt.Errorf("%d inputs, want %d", x.C*x.H*x.W, op.In)
		}
		return Shape{op.Out, 1, 1}, nil
	case GlobalAvgPool:
		return Shape{x.C, 1, 1}, nil
	case ChannelScale:
		if s := ins[1]; s.C*s.H*s.W != x.C {
			return Shape{}, fmt.Errorf("%d scales for %d channels", s.C*s.H*s.W, x.C)
		}
		return x, nil
	case *Crop:
		ref := ins[1]
		if op.X+ref.W > x.W || op.Y+ref.H > x.H {
			return Shape{}, fmt.Errorf("cannot cut %d×%d at (%d, %d) from %d×%d", ref.W, ref.H, op.X, op.Y, x.W, x.H)
		}
		return Shape{x.C, ref.H, ref.W}, nil
	case Eltwise:
		for _, y := range ins[1:] {
			if y != x {
				return Shape{}, fmt.Errorf("inputs of shapes %v and %v", x, y)
			}
		}
		return x, nil
	}
	return Shape{}, fmt.Errorf("%T has no shape rule", op)
}

// broadcast is the shape of a and b combined element by element: the
// same shape, or one of them a single value or one value per channel of
// the other.
func broadcast(a, b Shape) (Shape, error) {
	fits := func(small, big Shape) bool {
		return small == big || small.H == 1 && small.W == 1 && (small.C == 1 || small.C == big.C)
	}
	switch {
	case fits(b, a):
		return a, nil
	case fits(a, b):
		return b, nil
	}
	return Shape{}, fmt.Errorf("inputs of shapes %v and %v do not broadcast", a, b)
}
