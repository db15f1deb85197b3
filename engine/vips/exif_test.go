package vips

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// WithEXIFOrientation inserts an APP1 segment with one EXIF tag, the
// orientation, right after the JPEG's SOI marker. It is exported for the
// tests of package vips_test.
func WithEXIFOrientation(t testing.TB, jpg []byte, orientation uint16) []byte {
	t.Helper()
	var tiff bytes.Buffer
	tiff.WriteString("MM\x00\x2a")                                  // big-endian TIFF header
	binary.Write(&tiff, binary.BigEndian, uint32(8))                // offset of IFD0
	binary.Write(&tiff, binary.BigEndian, uint16(1))                // one entry
	binary.Write(&tiff, binary.BigEndian, []uint16{0x0112, 3})      // Orientation, SHORT
	binary.Write(&tiff, binary.BigEndian, uint32(1))                // count
	binary.Write(&tiff, binary.BigEndian, []uint16{orientation, 0}) // value, padded
	binary.Write(&tiff, binary.BigEndian, uint32(0))                // no next IFD
	return WithSegment(jpg, 0xE1, append([]byte("Exif\x00\x00"), tiff.Bytes()...))
}

// WithSegment inserts a segment (marker 0xFF, then code) carrying payload
// right after the JPEG's SOI marker.
func WithSegment(jpg []byte, code byte, payload []byte) []byte {
	out := append([]byte{}, jpg[:2]...)
	out = append(out, 0xFF, code)
	out = binary.BigEndian.AppendUint16(out, uint16(len(payload)+2))
	out = append(out, payload...)
	return append(out, jpg[2:]...)
}
