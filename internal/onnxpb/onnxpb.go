// Package onnxpb writes ONNX models: the subset of onnx.proto (IR version
// 8) that a feed-forward image network needs, encoded with protowire. The
// encoding is deterministic, so the same model always gives the same bytes.
package onnxpb

import (
	"encoding/binary"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// Element types of TensorProto.DataType.
const (
	Float   DataType = 1
	Uint8   DataType = 2
	Int8    DataType = 3
	Int32   DataType = 6
	Int64   DataType = 7
	Float16 DataType = 10
)

// DataType is a TensorProto.DataType.
type DataType int32

// Model is a ModelProto with one graph and the default operator set.
type Model struct {
	Producer string
	Opset    int64
	Graph    Graph
	Metadata [][2]string // key, value
}

// Graph is a GraphProto: Nodes in an order where each node's inputs are
// graph inputs, initializers or outputs of earlier nodes.
type Graph struct {
	Name         string
	Nodes        []Node
	Initializers []Tensor
	Inputs       []Value
	Outputs      []Value
}

// Node is a NodeProto of the default domain.
type Node struct {
	Op      string
	Name    string
	Inputs  []string
	Outputs []string
	Attrs   []Attr
}

// Attr is an AttributeProto holding one int, one float, one string or a
// list of ints.
type Attr struct {
	Name  string
	Int   *int64
	Float *float32
	Str   *string
	Ints  []int64
}

// Int returns an int attribute.
func Int(name string, v int64) Attr { return Attr{Name: name, Int: &v} }

// FloatAttr returns a float attribute.
func FloatAttr(name string, v float32) Attr { return Attr{Name: name, Float: &v} }

// StringAttr returns a string attribute.
func StringAttr(name, v string) Attr { return Attr{Name: name, Str: &v} }

// Ints returns an ints attribute.
func Ints(name string, v ...int64) Attr { return Attr{Name: name, Ints: v} }

// Tensor is a TensorProto with its data in raw_data.
type Tensor struct {
	Name string
	Type DataType
	Dims []int64
	Raw  []byte // little-endian elements
}

// FloatTensor returns a float32 tensor.
func FloatTensor(name string, dims []int64, v []float32) Tensor {
	raw := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(f))
	}
	return Tensor{Name: name, Type: Float, Dims: dims, Raw: raw}
}

// Int8Tensor returns an int8 tensor.
func Int8Tensor(name string, dims []int64, v []int8) Tensor {
	raw := make([]byte, len(v))
	for i, n := range v {
		raw[i] = byte(n)
	}
	return Tensor{Name: name, Type: Int8, Dims: dims, Raw: raw}
}

// Uint8Tensor returns a uint8 tensor.
func Uint8Tensor(name string, dims []int64, v []uint8) Tensor {
	return Tensor{Name: name, Type: Uint8, Dims: dims, Raw: append([]byte(nil), v...)}
}

// Int32Tensor returns an int32 tensor.
func Int32Tensor(name string, dims []int64, v []int32) Tensor {
	raw := make([]byte, 4*len(v))
	for i, n := range v {
		binary.LittleEndian.PutUint32(raw[4*i:], uint32(n))
	}
	return Tensor{Name: name, Type: Int32, Dims: dims, Raw: raw}
}

// Int64Tensor returns an int64 tensor.
func Int64Tensor(name string, dims []int64, v []int64) Tensor {
	raw := make([]byte, 8*len(v))
	for i, n := range v {
		binary.LittleEndian.PutUint64(raw[8*i:], uint64(n))
	}
	return Tensor{Name: name, Type: Int64, Dims: dims, Raw: raw}
}

// Value is a ValueInfoProto for a tensor: its element type and shape, where
// a dimension is either a size or a symbolic name.
type Value struct {
	Name string
	Type DataType
	Dims []Dim
}

// Dim is one dimension of a Value: Size when Param is empty.
type Dim struct {
	Size  int64
	Param string
}

// Field numbers of onnx.proto.
const (
	modelIRVersion   = 1
	modelProducer    = 2
	modelGraph       = 7
	modelOpset       = 8
	modelMetadata    = 14
	opsetVersion     = 2
	entryKey         = 1
	entryValue       = 2
	graphNode        = 1
	graphName        = 2
	graphInitializer = 5
	graphInput       = 11
	graphOutput      = 12
	nodeInput        = 1
	nodeOutput       = 2
	nodeName         = 3
	nodeOpType       = 4
	nodeAttribute    = 5
	attrName         = 1
	attrFloat        = 2
	attrInt          = 3
	attrString       = 4
	attrInts         = 8
	attrType         = 20
	tensorDims       = 1
	tensorDataType   = 2
	tensorName       = 8
	tensorRawData    = 9
	valueName        = 1
	valueType        = 2
	typeTensor       = 1
	tensorElemType   = 1
	tensorShape      = 2
	shapeDim         = 1
	dimValue         = 1
	dimParam         = 2
)

// AttributeProto.AttributeType values.
const (
	attrTypeFloat = 1
	attrTypeInt   = 2
	attrTypeStr   = 3
	attrTypeInts  = 7
)

// irVersion 8 is read by every ONNX Runtime since 1.10.
const irVersion = 8

// Marshal encodes m as an ONNX file.
func (m *Model) Marshal() []byte {
	var b []byte
	b = appendVarint(b, modelIRVersion, irVersion)
	b = appendString(b, modelProducer, m.Producer)
	b = appendMessage(b, modelGraph, m.Graph.marshal())
	b = appendMessage(b, modelOpset, appendVarint(nil, opsetVersion, uint64(m.Opset)))
	for _, kv := range m.Metadata {
		b = appendMessage(b, modelMetadata, appendString(appendString(nil, entryKey, kv[0]), entryValue, kv[1]))
	}
	return b
}

func (g *Graph) marshal() []byte {
	var b []byte
	for _, n := range g.Nodes {
		b = appendMessage(b, graphNode, n.marshal())
	}
	b = appendString(b, graphName, g.Name)
	for _, t := range g.Initializers {
		b = appendMessage(b, graphInitializer, t.marshal())
	}
	for _, v := range g.Inputs {
		b = appendMessage(b, graphInput, v.marshal())
	}
	for _, v := range g.Outputs {
		b = appendMessage(b, graphOutput, v.marshal())
	}
	return b
}

func (n *Node) marshal() []byte {
	var b []byte
	for _, in := range n.Inputs {
		b = appendString(b, nodeInput, in)
	}
	for _, out := range n.Outputs {
		b = appendString(b, nodeOutput, out)
	}
	b = appendString(b, nodeName, n.Name)
	b = appendString(b, nodeOpType, n.Op)
	for _, a := range n.Attrs {
		b = appendMessage(b, nodeAttribute, a.marshal())
	}
	return b
}

func (a *Attr) marshal() []byte {
	b := appendString(nil, attrName, a.Name)
	switch {
	case a.Float != nil:
		b = protowire.AppendTag(b, attrFloat, protowire.Fixed32Type)
		b = protowire.AppendFixed32(b, math.Float32bits(*a.Float))
		b = appendVarint(b, attrType, attrTypeFloat)
	case a.Int != nil:
		b = appendVarint(b, attrInt, uint64(*a.Int))
		b = appendVarint(b, attrType, attrTypeInt)
	case a.Str != nil:
		b = appendString(b, attrString, *a.Str)
		b = appendVarint(b, attrType, attrTypeStr)
	default:
		for _, v := range a.Ints {
			b = appendVarint(b, attrInts, uint64(v))
		}
		b = appendVarint(b, attrType, attrTypeInts)
	}
	return b
}

func (t *Tensor) marshal() []byte {
	var b []byte
	for _, d := range t.Dims {
		b = appendVarint(b, tensorDims, uint64(d))
	}
	b = appendVarint(b, tensorDataType, uint64(t.Type))
	b = appendString(b, tensorName, t.Name)
	return appendMessage(b, tensorRawData, t.Raw)
}

func (v *Value) marshal() []byte {
	var shape []byte
	for _, d := range v.Dims {
		var dim []byte
		if d.Param != "" {
			dim = appendString(nil, dimParam, d.Param)
		} else {
			dim = appendVarint(nil, dimValue, uint64(d.Size))
		}
		shape = appendMessage(shape, shapeDim, dim)
	}
	tensor := appendVarint(nil, tensorElemType, uint64(v.Type))
	tensor = appendMessage(tensor, tensorShape, shape)
	b := appendString(nil, valueName, v.Name)
	return appendMessage(b, valueType, appendMessage(nil, typeTensor, tensor))
}

func appendVarint(b []byte, field protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, field, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendString(b []byte, field protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, field, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// appendMessage appends an embedded message or a bytes field.
func appendMessage(b []byte, field protowire.Number, m []byte) []byte {
	b = protowire.AppendTag(b, field, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}

// Float16Tensor returns v as a float16 tensor when every value is exactly
// a float16 (ncnn stores most weights that way), and false otherwise.
func Float16Tensor(name string, dims []int64, v []float32) (Tensor, bool) {
	raw := make([]byte, 2*len(v))
	for i, f := range v {
		h, ok := exactHalf(f)
		if !ok {
			return Tensor{}, false
		}
		binary.LittleEndian.PutUint16(raw[2*i:], h)
	}
	return Tensor{Name: name, Type: Float16, Dims: dims, Raw: raw}, true
}

// exactHalf returns f as IEEE 754 half precision when that is exact.
func exactHalf(f float32) (uint16, bool) {
	bits := math.Float32bits(f)
	sign := uint16(bits>>16) & 0x8000
	exp := int(bits>>23&0xff) - 127
	frac := bits & 0x7fffff
	switch {
	case bits&0x7fffffff == 0:
		return sign, true
	case exp == 128: // infinity and NaN have no use in weights
		return 0, false
	case exp >= -14 && exp <= 15: // a normal half: 10 fraction bits
		if frac&0x1fff != 0 {
			return 0, false
		}
		return sign | uint16(exp+15)<<10 | uint16(frac>>13), true
	case exp >= -24 && exp < -14: // a subnormal half: k × 2^-24, k < 1024
		mant := frac | 0x800000       // 24 significant bits, value mant × 2^(exp-23)
		shift := uint(-14 - exp + 13) // bits below 2^-24
		if mant&(1<<shift-1) != 0 {
			return 0, false
		}
		return sign | uint16(mant>>shift), true
	}
	return 0, false
}
