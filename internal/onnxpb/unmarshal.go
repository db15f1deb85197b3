package onnxpb

import (
	"encoding/binary"
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// Unmarshal decodes an ONNX file into the subset Marshal writes: fields
// outside it (docs, value types of initializers, other attribute kinds) are
// skipped, so Unmarshal(m.Marshal()) is m. Tensors' Raw bytes share data's
// memory.
func Unmarshal(data []byte) (*Model, error) {
	m := &Model{}
	err := walk(data, func(field protowire.Number, v value) error {
		switch field {
		case modelProducer:
			m.Producer = string(v.bytes)
		case modelGraph:
			return m.Graph.unmarshal(v.bytes)
		case modelOpset:
			return walk(v.bytes, func(field protowire.Number, v value) error {
				if field == opsetVersion {
					m.Opset = int64(v.varint)
				}
				return nil
			})
		case modelMetadata:
			var kv [2]string
			err := walk(v.bytes, func(field protowire.Number, v value) error {
				if field == entryKey || field == entryValue {
					kv[field-entryKey] = string(v.bytes)
				}
				return nil
			})
			m.Metadata = append(m.Metadata, kv)
			return err
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("onnxpb: %w", err)
	}
	return m, nil
}

// MetadataValue returns the value of the metadata entry key.
func (m *Model) MetadataValue(key string) (string, bool) {
	for _, kv := range m.Metadata {
		if kv[0] == key {
			return kv[1], true
		}
	}
	return "", false
}

// Floats returns the elements of a Float or Float16 tensor as float32.
func (t *Tensor) Floats() ([]float32, error) {
	switch t.Type {
	case Float:
		if len(t.Raw)%4 != 0 {
			return nil, fmt.Errorf("onnxpb: tensor %s: %d bytes of float32", t.Name, len(t.Raw))
		}
		v := make([]float32, len(t.Raw)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Raw[4*i:]))
		}
		return v, nil
	case Float16:
		if len(t.Raw)%2 != 0 {
			return nil, fmt.Errorf("onnxpb: tensor %s: %d bytes of float16", t.Name, len(t.Raw))
		}
		v := make([]float32, len(t.Raw)/2)
		for i := range v {
			v[i] = halfToFloat(binary.LittleEndian.Uint16(t.Raw[2*i:]))
		}
		return v, nil
	}
	return nil, fmt.Errorf("onnxpb: tensor %s has data type %d, not a float", t.Name, t.Type)
}

// Ints returns the elements of an Int64 tensor.
func (t *Tensor) Ints() ([]int64, error) {
	if t.Type != Int64 || len(t.Raw)%8 != 0 {
		return nil, fmt.Errorf("onnxpb: tensor %s is not int64", t.Name)
	}
	v := make([]int64, len(t.Raw)/8)
	for i := range v {
		v[i] = int64(binary.LittleEndian.Uint64(t.Raw[8*i:]))
	}
	return v, nil
}

// Ints32 returns the elements of an Int8, Uint8 or Int32 tensor.
func (t *Tensor) Ints32() ([]int32, error) {
	switch t.Type {
	case Int8, Uint8:
		v := make([]int32, len(t.Raw))
		for i, b := range t.Raw {
			if t.Type == Int8 {
				v[i] = int32(int8(b))
			} else {
				v[i] = int32(b)
			}
		}
		return v, nil
	case Int32:
		if len(t.Raw)%4 == 0 {
			v := make([]int32, len(t.Raw)/4)
			for i := range v {
				v[i] = int32(binary.LittleEndian.Uint32(t.Raw[4*i:]))
			}
			return v, nil
		}
	}
	return nil, fmt.Errorf("onnxpb: tensor %s is not of 8- or 32-bit integers", t.Name)
}

// halfToFloat widens an IEEE 754 half, exactly.
func halfToFloat(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp, frac := int(h>>10&0x1f), uint32(h&0x3ff)
	switch {
	case exp == 0: // zero or subnormal: frac × 2⁻²⁴
		f := float32(math.Ldexp(float64(frac), -24))
		return math.Float32frombits(math.Float32bits(f) | sign)
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | frac<<13)
	}
	return math.Float32frombits(sign | uint32(exp-15+127)<<23 | frac<<13)
}

func (g *Graph) unmarshal(data []byte) error {
	return walk(data, func(field protowire.Number, v value) error {
		switch field {
		case graphNode:
			var n Node
			if err := n.unmarshal(v.bytes); err != nil {
				return err
			}
			g.Nodes = append(g.Nodes, n)
		case graphName:
			g.Name = string(v.bytes)
		case graphInitializer:
			var t Tensor
			if err := t.unmarshal(v.bytes); err != nil {
				return err
			}
			g.Initializers = append(g.Initializers, t)
		case graphInput, graphOutput:
			var val Value
			if err := val.unmarshal(v.bytes); err != nil {
				return err
			}
			if field == graphInput {
				g.Inputs = append(g.Inputs, val)
			} else {
				g.Outputs = append(g.Outputs, val)
			}
		}
		return nil
	})
}

func (n *Node) unmarshal(data []byte) error {
	return walk(data, func(field protowire.Number, v value) error {
		switch field {
		case nodeInput:
			n.Inputs = append(n.Inputs, string(v.bytes))
		case nodeOutput:
			n.Outputs = append(n.Outputs, string(v.bytes))
		case nodeName:
			n.Name = string(v.bytes)
		case nodeOpType:
			n.Op = string(v.bytes)
		case nodeAttribute:
			var a Attr
			if err := a.unmarshal(v.bytes); err != nil {
				return err
			}
			n.Attrs = append(n.Attrs, a)
		}
		return nil
	})
}

func (a *Attr) unmarshal(data []byte) error {
	var kind uint64
	var f float32
	var i int64
	var s string
	err := walk(data, func(field protowire.Number, v value) error {
		switch field {
		case attrName:
			a.Name = string(v.bytes)
		case attrFloat:
			f = math.Float32frombits(uint32(v.varint))
		case attrInt:
			i = int64(v.varint)
		case attrString:
			s = string(v.bytes)
		case attrInts:
			if v.bytes == nil { // one unpacked element
				a.Ints = append(a.Ints, int64(v.varint))
				return nil
			}
			for b := v.bytes; len(b) > 0; {
				n, size := protowire.ConsumeVarint(b)
				if size < 0 {
					return protowire.ParseError(size)
				}
				a.Ints, b = append(a.Ints, int64(n)), b[size:]
			}
		case attrType:
			kind = v.varint
		}
		return nil
	})
	switch kind {
	case attrTypeFloat:
		a.Float = &f
	case attrTypeInt:
		a.Int = &i
	case attrTypeStr:
		a.Str = &s
	}
	return err
}

func (t *Tensor) unmarshal(data []byte) error {
	return walk(data, func(field protowire.Number, v value) error {
		switch field {
		case tensorDims:
			t.Dims = append(t.Dims, int64(v.varint))
		case tensorDataType:
			t.Type = DataType(v.varint)
		case tensorName:
			t.Name = string(v.bytes)
		case tensorRawData:
			t.Raw = v.bytes
		}
		return nil
	})
}

func (val *Value) unmarshal(data []byte) error {
	return walk(data, func(field protowire.Number, v value) error {
		switch field {
		case valueName:
			val.Name = string(v.bytes)
		case valueType:
			return walk(v.bytes, func(field protowire.Number, v value) error {
				if field != typeTensor {
					return nil
				}
				return walk(v.bytes, func(field protowire.Number, v value) error {
					switch field {
					case tensorElemType:
						val.Type = DataType(v.varint)
					case tensorShape:
						return walk(v.bytes, func(field protowire.Number, v value) error {
							if field != shapeDim {
								return nil
							}
							var d Dim
							err := walk(v.bytes, func(field protowire.Number, v value) error {
								switch field {
								case dimValue:
									d.Size = int64(v.varint)
								case dimParam:
									d.Param = string(v.bytes)
								}
								return nil
							})
							val.Dims = append(val.Dims, d)
							return err
						})
					}
					return nil
				})
			})
		}
		return nil
	})
}

// value is one decoded field: a varint or fixed-width number, or the bytes
// of a length-delimited field (nil for the others).
type value struct {
	varint uint64
	bytes  []byte
}

// walk calls visit for each field of the message in data, in order.
func walk(data []byte, visit func(protowire.Number, value) error) error {
	for len(data) > 0 {
		field, kind, n := protowire.ConsumeTag(data)
		if n < 0 {
			return protowire.ParseError(n)
		}
		data = data[n:]
		var v value
		switch kind {
		case protowire.VarintType:
			v.varint, n = protowire.ConsumeVarint(data)
		case protowire.Fixed32Type:
			var x uint32
			x, n = protowire.ConsumeFixed32(data)
			v.varint = uint64(x)
		case protowire.Fixed64Type:
			v.varint, n = protowire.ConsumeFixed64(data)
		case protowire.BytesType:
			v.bytes, n = protowire.ConsumeBytes(data)
			if v.bytes == nil && n >= 0 {
				v.bytes = []byte{}
			}
		default:
			n = protowire.ConsumeFieldValue(field, kind, data)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		data = data[n:]
		if err := visit(field, v); err != nil {
			return err
		}
	}
	return nil
}
