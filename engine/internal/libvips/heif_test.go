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
// real files, are not. The references are read as libheif 1.15 reads
// them: whatever sizes their boxes claim, with 32-bit IDs in any version
// but 0, and from the last meta box as well as the first. The fuzzer's two
// files (boxes that claim sizes past the file) and a review's two (a decoy
// meta box, an iref of version 2) made libheif start threads until the
// request hung; all four are seeds of FuzzUpscaleImage. A file of more
// references than maxHEIFDecodes is refused before its graph is built.
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
	loop := []ref{{typ: "dimg", from: 2, to: []uint32{1}}, {typ: "dimg", from: 4, to: []uint32{2}}, {typ: "auxl", from: 4, to: []uint32{2}}}
	for _, tc := range []struct {
		name      string
		version   byte // iref's: 0, 16-bit IDs; any other, 32-bit
		refs      []ref
		refused   bool
		decoyMeta bool // an empty meta box before the one with refs: libheif keeps the last
	}{
		{"a grid of 48 tiles with an alpha grid", 0, []ref{
			{typ: "dimg", from: 1, to: tiles(48, 100)}, {typ: "dimg", from: 2, to: tiles(48, 200)}, {typ: "auxl", from: 2, to: []uint32{1}},
		}, false, false},
		{"the same, 32-bit IDs", 1, []ref{
			{typ: "dimg", from: 1, to: tiles(48, 100_000)}, {typ: "auxl", from: 2, to: []uint32{1}}, {typ: "dimg", from: 2, to: tiles(48, 200_000)},
		}, false, false},
		{"a grid made of itself", 0, []ref{{typ: "dimg", from: 1, to: []uint32{5, 1}}}, true, false},
		{"an alpha grid made of the image it is the alpha of", 0, []ref{
			{typ: "dimg", from: 2, to: []uint32{1}}, {typ: "dimg", from: 4, to: []uint32{2}}, {typ: "auxl", from: 4, to: []uint32{2}},
		}, true, false},
		{"the same, auxl in a box whose size runs past the file", 0, []ref{
			{typ: "dimg", from: 2, to: []uint32{1}}, {typ: "dimg", from: 4, to: []uint32{2}}, {typ: "auxl", from: 4, to: []uint32{2}, badSize: true},
		}, true, false},
		{"the same, the boxes before auxl with sizes past the file", 0, []ref{
			{typ: "dimg", from: 2, to: []uint32{1}, badSize: true}, {typ: "dimg", from: 4, to: []uint32{2}, badSize: true}, {typ: "auxl", from: 4, to: []uint32{2}},
		}, true, false},
		{"the loop behind a decoy meta box", 0, loop, true, true},
		{"the loop in an iref of version 2, read as 32-bit IDs", 2, loop, true, false},
		{"a chain of 5000 grids", 1, func() []ref {
			var refs []ref
			for id := uint32(1); id <= 5000; id++ {
				refs = append(refs, ref{typ: "dimg", from: id, to: []uint32{id + 1}})
			}
			return refs
		}(), true, false},
		// 13 levels of grids, each of two tiles that are the same grid:
		// 2^13 decodes of item 14, from a file of 13 references.
		{"grids of grids, reached 2^13 times", 0, func() []ref {
			var refs []ref
			for level := uint32(1); level <= 13; level++ {
				refs = append(refs, ref{typ: "dimg", from: level, to: []uint32{level + 1, level + 1}})
			}
			return refs
		}(), true, false},
	} {
		var iref []byte
		for _, r := range tc.refs {
			var body []byte
			put := func(id uint32) {
				if tc.version != 0 {
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
		file := isoBoxBytes("ftyp", []byte("heic\x00\x00\x00\x00mif1heic"))
		if tc.decoyMeta {
			file = append(file, isoBoxBytes("meta", []byte{0, 0, 0, 0})...)
		}
		file = append(file, isoBoxBytes("meta", meta)...)
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
