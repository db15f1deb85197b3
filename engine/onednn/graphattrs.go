package onednn

import (
	"fmt"
	"slices"

	"github.com/upscalekit/upscale/internal/onnxpb"
)

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

func attrString(n *onnxpb.Node, name, otherwise string) string {
	for _, a := range n.Attrs {
		if a.Name == name && a.Str != nil {
			return *a.Str
		}
	}
	return otherwise
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
