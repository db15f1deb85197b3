package libvips

import (
	"encoding/binary"
	"errors"
	"os"
	"testing"

	"github.com/upscalekit/upscale"
)

// TestHEIFReferences: a HEIC or AVIF whose images are made of each other
// in a loop, through a grid's tiles (dimg) or an alpha image (auxl), or
// that would have libheif decode more than maxHEIFDecodes images, is
// refused before libheif sees it; a phone's grid with an alpha grid, and
// real files, are not. The references are read as libheif reads them,
// whatever sizes their boxes claim: the fuzzer's two files, whose boxes
// claim sizes past the file, made libheif start threads until the request
// hung (seeds of FuzzUpscaleImage).
func TestHEIFReferences(t *testing.T) {
	type ref struct {
		typ     string
		from    uint32
		to      []uint32
		badSize bool // the box claims a size past the file
	}
	tiles := func(n int, first uint32) []uint32 {
		ids := make([]uint32, n)
		for k := range ids {
			ids[k] = first + uint32(k)
		}
		return ids
	}
	for _, tc := range []struct {
		name    string
		version byte // iref's: 0, 16-bit IDs; 1, 32-bit
		refs    []ref
		refused bool
	}{
		{"a grid of 48 tiles with an alpha grid", 0, []ref{
			{typ: "dimg", from: 1, to: tiles(48, 100)}, {typ: "dimg", from: 2, to: tiles(48, 200)}, {typ: "auxl", from: 2, to: []uint32{1}},
		}, false},
		{"the same, 32-bit IDs", 1, []ref{
			{typ: "dimg", from: 1, to: tiles(48, 100_000)}, {typ: "auxl", from: 2, to: []uint32{1}}, {typ: "dimg", from: 2, to: tiles(48, 200_000)},
		}, false},
		{"a grid made of itself", 0, []ref{{typ: "dimg", from: 1, to: []uint32{5, 1}}}, true},
		{"an alpha grid made of the image it is the alpha of", 0, []ref{
			{typ: "dimg", from: 2, to: []uint32{1}}, {typ: "dimg", from: 4, to: []uint32{2}}, {typ: "auxl", from: 4, to: []uint32{2}},
		}, true},
		{"the same, auxl in a box whose size runs past the file", 0, []ref{
			{typ: "dimg", from: 2, to: []uint32{1}}, {typ: "dimg", from: 4, to: []uint32{2}}, {typ: "auxl", from: 4, to: []uint32{2}, badSize: true},
		}, true},
		{"the same, the boxes before auxl with sizes past the file", 0, []ref{
			{typ: "dimg", from: 2, to: []uint32{1}, badSize: true}, {typ: "dimg", from: 4, to: []uint32{2}, badSize: true}, {typ: "auxl", from: 4, to: []uint32{2}},
		}, true},
		// 13 levels of grids, each of two tiles that are the same grid:
		// 2^13 decodes of item 14, from a file of 13 references.
		{"grids of grids, reached 2^13 times", 0, func() []ref {
			var refs []ref
			for level := uint32(1); level <= 13; level++ {
				refs = append(refs, ref{typ: "dimg", from: level, to: []uint32{level + 1, level + 1}})
			}
			return refs
		}(), true},
	} {
		var iref []byte
		for _, r := range tc.refs {
			var body []byte
			put := func(id uint32) {
				if tc.version == 1 {
					body = binary.BigEndian.AppendUint32(body, id)
				} else {
					body = binary.BigEndian.AppendUint16(body, uint16(id))
				}
			}
			put(r.from)
			body = binary.BigEndian.AppendUint16(body, uint16(len(r.to)))
			for _, id := range r.to {
				put(id)
			}
			box := isoBoxBytes(r.typ, body)
			if r.badSize {
				binary.BigEndian.PutUint32(box, 0xffe0000e)
			}
			iref = append(iref, box...)
		}
		meta := append([]byte{0, 0, 0, 0}, isoBoxBytes("iref", append([]byte{tc.version, 0, 0, 0}, iref...))...)
		file := append(isoBoxBytes("ftyp", []byte("heic\x00\x00\x00\x00mif1heic")), isoBoxBytes("meta", meta)...)
		err := checkHEIFReferences(file)
		if tc.refused != (err != nil) || err != nil && !errors.Is(err, upscale.ErrUnsupportedImage) {
			t.Errorf("%s: %v; want refused %v, as unsupported_image", tc.name, err, tc.refused)
		}
	}
	for _, name := range []string{"photo.heic", "cutout.heic", "photo.avif"} {
		src, err := os.ReadFile("../../../upscaletest/testdata/formats/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkHEIFReferences(src); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// isoBoxBytes is an ISO BMFF box of type typ holding body.
func isoBoxBytes(typ string, body []byte) []byte {
	return append(binary.BigEndian.AppendUint32([]byte(nil), uint32(8+len(body))), append([]byte(typ), body...)...)
}
