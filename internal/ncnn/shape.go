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
	x := ins[0]
	switch op := op.(type) {
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
