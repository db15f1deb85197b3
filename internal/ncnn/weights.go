package ncnn

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// weightReader reads the .bin file: a sequence of arrays, each either raw
// little-endian float32 or, for the arrays ncnn loads with type 0, behind a
// four-byte tag that says how they are stored.
type weightReader struct{ r *bytes.Reader }

// Tags of ncnn's type-0 weight arrays.
const (
	tagFloat16 = 0x01306B47
	tagInt8    = 0x000D4B38
	tagFloat32 = 0x0002C056 // float32 "with extra scaling", which ncnn reads as plain float32
)

// tagged reads an array of n weights behind its tag: float16 (padded to a
// multiple of four bytes) or float32. Quantised encodings are refused.
func (w *weightReader) tagged(n int) ([]float32, error) {
	var tag [4]byte
	if _, err := io.ReadFull(w.r, tag[:]); err != nil {
		return nil, errShortWeights
	}
	switch t := binary.LittleEndian.Uint32(tag[:]); {
	case t == tagFloat16:
		half := make([]byte, (2*n+3)/4*4)
		if _, err := io.ReadFull(w.r, half); err != nil {
			return nil, errShortWeights
		}
		out := make([]float32, n)
		for i := range out {
			out[i] = halfToFloat(binary.LittleEndian.Uint16(half[2*i:]))
		}
		return out, nil
	case t == tagFloat32 || t == 0:
		return w.raw(n)
	case t == tagInt8:
		return nil, errors.New("int8 weights are not implemented")
	default:
		return nil, fmt.Errorf("quantised weights (tag %#08x) are not implemented", t)
	}
}

// raw reads n little-endian float32 values.
func (w *weightReader) raw(n int) ([]float32, error) {
	buf := make([]byte, 4*n)
	if _, err := io.ReadFull(w.r, buf); err != nil {
		return nil, errShortWeights
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:]))
	}
	return out, nil
}

var errShortWeights = errors.New("the .bin file ends before this layer's weights: it does not belong to this .param")

// halfToFloat converts an IEEE 754 half-precision value exactly.
func halfToFloat(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	frac := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // infinity or NaN
		return math.Float32frombits(sign | 0xff<<23 | frac<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+127-15)<<23 | frac<<13)
	case frac == 0: // zero
		return math.Float32frombits(sign)
	}
	// Subnormal: frac × 2^-24, exact in float32.
	v := float32(frac) * (1.0 / (1 << 24))
	if sign != 0 {
		v = -v
	}
	return v
}
