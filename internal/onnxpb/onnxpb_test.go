package onnxpb

import (
	"encoding/binary"
	"math"
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

func TestExactHalf(t *testing.T) {
	for _, tc := range []struct {
		f    float32
		half uint16
	}{
		{0, 0}, {1, 0x3C00}, {-2, 0xC000}, {65504, 0x7BFF}, {0.5, 0x3800},
		{float32(math.Ldexp(1, -14)), 0x0400}, // smallest normal
		{float32(math.Ldexp(1, -24)), 0x0001}, // smallest subnormal
		{float32(math.Ldexp(1023, -24)), 0x03FF},
	} {
		if got, ok := exactHalf(tc.f); !ok || got != tc.half {
			t.Errorf("exactHalf(%g) = %#04x, %v; want %#04x", tc.f, got, ok, tc.half)
		}
	}
	for _, f := range []float32{0.1, 65536, float32(math.Ldexp(1, -25)), 1 + float32(math.Ldexp(1, -11)), float32(math.Inf(1))} {
		if got, ok := exactHalf(f); ok {
			t.Errorf("exactHalf(%g) = %#04x, true; want false: not a float16", f, got)
		}
	}
}

func TestFloat16Tensor(t *testing.T) {
	tensor, ok := Float16Tensor("w", []int64{2}, []float32{1, -2})
	if !ok || tensor.Type != Float16 || binary.LittleEndian.Uint16(tensor.Raw) != 0x3C00 || binary.LittleEndian.Uint16(tensor.Raw[2:]) != 0xC000 {
		t.Errorf("Float16Tensor(1, -2) = %+v, %v", tensor, ok)
	}
	if _, ok := Float16Tensor("w", []int64{2}, []float32{1, 0.1}); ok {
		t.Error("Float16Tensor(1, 0.1): ok, want false")
	}
}

// TestMarshal walks the encoded model: every field is well formed, and the
// model's top-level fields are the ones onnx.proto numbers.
func TestMarshal(t *testing.T) {
	m := Model{Producer: "test", Opset: 17, Metadata: [][2]string{{"k", "v"}}, Graph: Graph{
		Name:         "g",
		Nodes:        []Node{{Op: "Relu", Name: "r", Inputs: []string{"x"}, Outputs: []string{"y"}, Attrs: []Attr{Int("i", -1), FloatAttr("f", 0.1), Ints("is", 1, 2)}}},
		Initializers: []Tensor{FloatTensor("w", []int64{1}, []float32{1}), Int64Tensor("n", []int64{1}, []int64{math.MaxInt64})},
		Inputs:       []Value{{Name: "x", Type: Float, Dims: []Dim{{Param: "n"}, {Size: 3}}}},
		Outputs:      []Value{{Name: "y", Type: Float, Dims: []Dim{{Param: "n"}, {Size: 3}}}},
	}}
	b := m.Marshal()
	fields := map[protowire.Number]int{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatal(protowire.ParseError(n))
		}
		b = b[n:]
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			t.Fatal(protowire.ParseError(n))
		}
		b = b[n:]
		fields[num]++
	}
	want := map[protowire.Number]int{modelIRVersion: 1, modelProducer: 1, modelGraph: 1, modelOpset: 1, modelMetadata: 1}
	for num, count := range want {
		if fields[num] != count {
			t.Errorf("field %d appears %d times, want %d", num, fields[num], count)
		}
	}
	if len(fields) != len(want) {
		t.Errorf("fields %v, want %v", fields, want)
	}
}

// TestUnmarshalRoundTrip decodes what Marshal encodes, field for field.
func TestUnmarshalRoundTrip(t *testing.T) {
	half, _ := Float16Tensor("h", []int64{3}, []float32{1, -0.5, float32(math.Ldexp(3, -24))})
	m := Model{Producer: "test", Opset: 17, Metadata: [][2]string{{"k", "v"}, {"scale", "2"}}, Graph: Graph{
		Name:         "g",
		Nodes:        []Node{{Op: "Conv", Name: "c", Inputs: []string{"x", "w"}, Outputs: []string{"y"}, Attrs: []Attr{Int("i", -1), FloatAttr("f", 0.1), StringAttr("s", "CRD"), Ints("is", 1, -2, math.MaxInt64)}}},
		Initializers: []Tensor{FloatTensor("w", []int64{1, 2}, []float32{1, -3.5}), Int64Tensor("n", []int64{1}, []int64{math.MaxInt64}), half},
		Inputs:       []Value{{Name: "x", Type: Float, Dims: []Dim{{Param: "n"}, {Size: 3}}}},
		Outputs:      []Value{{Name: "y", Type: Float, Dims: []Dim{{Param: "n"}, {Size: 3}}}},
	}}
	got, err := Unmarshal(m.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*got, m) {
		t.Errorf("Unmarshal(Marshal(m)) =\n%+v\nwant\n%+v", *got, m)
	}
	if v, ok := got.MetadataValue("scale"); !ok || v != "2" {
		t.Errorf(`MetadataValue("scale") = %q, %v`, v, ok)
	}
	if f, err := got.Graph.Initializers[2].Floats(); err != nil || !reflect.DeepEqual(f, []float32{1, -0.5, float32(math.Ldexp(3, -24))}) {
		t.Errorf("float16 Floats() = %v, %v", f, err)
	}
	if n, err := got.Graph.Initializers[1].Ints(); err != nil || n[0] != math.MaxInt64 {
		t.Errorf("Ints() = %v, %v", n, err)
	}
	for _, tc := range []struct {
		t    Tensor
		want []int32
	}{
		{Int8Tensor("i8", []int64{2}, []int8{-128, 127}), []int32{-128, 127}},
		{Uint8Tensor("u8", []int64{2}, []uint8{0, 255}), []int32{0, 255}},
		{Int32Tensor("i32", []int64{2}, []int32{math.MinInt32, 7}), []int32{math.MinInt32, 7}},
	} {
		if v, err := tc.t.Ints32(); err != nil || !reflect.DeepEqual(v, tc.want) {
			t.Errorf("%s: Ints32() = %v, %v; want %v", tc.t.Name, v, err, tc.want)
		}
	}
	if _, err := got.Graph.Initializers[0].Ints32(); err == nil {
		t.Error("Ints32() of a float tensor: no error")
	}
	if _, err := Unmarshal([]byte{0x3a, 0x05, 0x01}); err == nil {
		t.Error("Unmarshal of a truncated graph: no error")
	}
}

// TestHalfToFloat widens every half that exactHalf narrows, back to itself.
func TestHalfToFloat(t *testing.T) {
	for h := range uint16(0x7c00) {
		for _, sign := range []uint16{0, 0x8000} {
			f := halfToFloat(h | sign)
			if back, ok := exactHalf(f); !ok || back != h|sign {
				t.Fatalf("halfToFloat(%#04x) = %g, which narrows to %#04x, %v", h|sign, f, back, ok)
			}
		}
	}
}
