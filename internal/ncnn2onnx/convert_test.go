package ncnn2onnx

import (
	"bytes"
	"encoding/binary"
	"slices"
	"strings"
	"testing"

	"github.com/upscalekit/upscale/internal/ncnn"
	"github.com/upscalekit/upscale/internal/onnxpb"
)

func parse(t *testing.T, param string, weights ...float32) *ncnn.Net {
	t.Helper()
	var bin bytes.Buffer
	binary.Write(&bin, binary.LittleEndian, weights)
	net, err := ncnn.Parse([]byte("7767517\n"+param), bin.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return net
}

// TestGeometry: upconv_7's shape (valid 3×3 convolutions, then a ×2
// deconvolution with its border cut) and a strided U-Net's.
func TestGeometry(t *testing.T) {
	upconv := parse(t, `3 3
Input in 0 1 data 0=32 1=32 2=1
Convolution c 1 1 data x 0=1 1=3 6=9
Deconvolution d 1 1 x out 0=1 1=4 3=2 4=3 6=16
`, append(append([]float32{0}, make([]float32, 9)...), append([]float32{0}, make([]float32, 16)...)...)...)
	// n → n−2 → (n−3)·2 + 4 − 2·3 = 2(n−4): scale 2, border 2.
	g, err := findGeometry(upconv)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Geometry{Scale: 2, Border: 2, Multiple: 1, MinInput: 5}); g != want {
		t.Errorf("upconv: %+v, want %+v", g, want)
	}

	strided := parse(t, `3 3
Input in 0 1 data 0=32 1=32 2=1
Convolution down 1 1 data x 0=1 1=2 3=2 6=4
Convolution c 1 1 x out 0=1 1=3 6=9
`, append(append([]float32{0}, make([]float32, 4)...), append([]float32{0}, make([]float32, 9)...)...)...)
	// n → n/2 (n even) → n/2 − 2: ×½ is not an enlargement.
	if _, err := findGeometry(strided); err == nil || !strings.Contains(err.Error(), "scale") {
		t.Errorf("a shrinking network: err = %v, want a refusal", err)
	}
}

// TestConvertCrop: a Crop becomes a Slice whose ends count from the end,
// the same at every input size.
func TestConvertCrop(t *testing.T) {
	net := parse(t, `5 6
Input in 0 1 data 0=16 1=16 2=1
Split s 1 2 data a b
Convolution c 1 1 a small 0=1 1=3 6=9
Crop crop 2 1 b small cut 0=1 1=1
Eltwise sum 2 1 cut small out 0=1
`, append([]float32{0}, make([]float32, 9)...)...)
	model, g, err := Convert(net, "test", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if g.Scale != 1 || g.Border != 1 {
		t.Errorf("geometry %+v, want scale 1, border 1", g)
	}
	var ops []string
	for _, n := range model.Graph.Nodes {
		ops = append(ops, n.Op)
	}
	if got, want := strings.Join(ops, " "), "Cast Conv Slice Add"; got != want {
		t.Errorf("nodes %q, want %q", got, want)
	}
	for _, init := range model.Graph.Initializers {
		if init.Name == "crop_ends" {
			if got := int64(binary.LittleEndian.Uint64(init.Raw)); got != -1 {
				t.Errorf("crop ends at %d, want -1 (one row from the end)", got)
			}
		}
	}
}

// TestFoldsScalarProducts: a product by a scalar read by one convolution
// alone folds into its weights (no Mul left, the weights scaled); one
// read by two layers, or a sum, stays.
func TestFoldsScalarProducts(t *testing.T) {
	net := parse(t, `4 5
Input in 0 1 data 0=2 1=2 2=1
BinaryOp scale 1 1 data scaled 0=2 1=1 2=2.5
Convolution c 1 1 scaled x 0=1 1=1 6=1
BinaryOp shift 1 1 x out 0=0 1=1 2=1.0
`, 0, 4)
	model, _, err := Convert(net, "fold", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ops []string
	for _, n := range model.Graph.Nodes {
		ops = append(ops, n.Op)
	}
	if strings.Contains(strings.Join(ops, " "), "Mul") || !strings.Contains(strings.Join(ops, " "), "Add") {
		t.Errorf("nodes %v: want the product folded away and the sum kept", ops)
	}
	i := slices.IndexFunc(model.Graph.Initializers, func(w onnxpb.Tensor) bool { return strings.HasPrefix(w.Name, "c_weight") })
	if i < 0 {
		t.Fatal("no weight of the convolution")
	}
	if v, err := model.Graph.Initializers[i].Floats(); err != nil || len(v) != 1 || v[0] != 10 {
		t.Errorf("the convolution's weight %v, %v; want 4 × 2.5", v, err)
	}

	twice := parse(t, `5 6
Input in 0 1 data 0=2 1=2 2=1
BinaryOp scale 1 1 data scaled 0=2 1=1 2=2.5
Split s 1 2 scaled a b
Convolution c 1 1 a x 0=1 1=1 6=1
Eltwise sum 2 1 x b out 0=1
`, 0, 4)
	model, _, err = Convert(twice, "kept", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(model.Graph.Nodes, func(n onnxpb.Node) bool { return n.Op == "Mul" }) {
		t.Errorf("a product read twice: nodes %v, want it kept as a Mul", model.Graph.Nodes)
	}
}
