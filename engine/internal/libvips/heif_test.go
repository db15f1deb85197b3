package libvips

import (
	"bytes"
	"encoding/binary"
	"errors"
	"image"
	"math/bits"
	"os"
	"slices"
	"strings"
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

// heifGrid is a HEIC file whose primary image is a grid of rows×columns
// tiles laid out as out, every tile the one image of the HEIC file tile
// (its hvcC, its ispe and its data), referred to rows×columns times, as
// a phone lays out its photos.
func heifGrid(tb testing.TB, tile []byte, rows, columns int, out image.Point) []byte {
	tb.Helper()
	return heifGridOf(tb, heifImage(tb, tile), rows, columns, out)
}

// heifHonestGrid is heifGrid of a tile that declares the size its stream
// codes.
func heifHonestGrid(tb testing.TB, tile []byte, rows, columns int, out image.Point) []byte {
	tb.Helper()
	honest := *heifImage(tb, tile)
	sizes, why := honest.codedSizes()
	if why != "" || len(sizes) == 0 {
		tb.Fatalf("the tile's stream codes %v (%s)", sizes, why)
	}
	honest.size = sizes[0]
	return heifGridOf(tb, &honest, rows, columns, out)
}

// heifImage is the HEVC image of a HEIC file, not its alpha.
func heifImage(tb testing.TB, file []byte) *heifItem {
	tb.Helper()
	return heifCoded(tb, file, "hvc1")
}

// heifCoded is the image of type typ of a HEIF file, not its alpha.
func heifCoded(tb testing.TB, file []byte, typ string) *heifItem {
	tb.Helper()
	for _, box := range isoBoxes(file) {
		if box.typ != "meta" {
			continue
		}
		m, why := readHEIFMeta(box.body, file)
		if why != "" {
			tb.Fatal(why)
		}
		for _, it := range m.items {
			if it.typ == typ && it.auxType == "" {
				return it
			}
		}
	}
	tb.Fatalf("the file has no %s image", typ)
	return nil
}

// heifGridOf is heifGrid of the tile coded: its hvcC, ispe and data.
func heifGridOf(tb testing.TB, coded *heifItem, rows, columns int, out image.Point) []byte {
	data := bytes.Join(coded.data, nil)
	full := func(typ string, version byte, flags uint32, body []byte) []byte {
		head := binary.BigEndian.AppendUint32(nil, uint32(version)<<24|flags)
		return isoBoxBytes(typ, append(head, body...))
	}
	be16 := func(b []byte, v int) []byte { return binary.BigEndian.AppendUint16(b, uint16(v)) }
	be32 := func(b []byte, v int) []byte { return binary.BigEndian.AppendUint32(b, uint32(v)) }
	layout := be16(be16([]byte{0, 0, byte(rows - 1), byte(columns - 1)}, out.X), out.Y)
	ispe := func(size image.Point) []byte { return full("ispe", 0, 0, be32(be32(nil, size.X), size.Y)) }
	// meta, with the tile's data at mdatAt in the file.
	meta := func(mdatAt int) []byte {
		infe := append(full("infe", 2, 0, append(be16(be16(nil, 1), 0), "grid\x00"...)), full("infe", 2, 0, append(be16(be16(nil, 2), 0), "hvc1\x00"...))...)
		dimg := be16(be16(nil, 1), rows*columns)
		for range rows * columns {
			dimg = be16(dimg, 2)
		}
		ipco := isoBoxBytes("ipco", append(append(isoBoxBytes("hvcC", coded.config), ispe(coded.size)...), ispe(out)...))
		// The grid has the second ispe; the tile, the hvcC (essential) and the first.
		ipma := full("ipma", 0, 0, append(be32(nil, 2), 0, 1, 1, 3, 0, 2, 2, 0x81, 2))
		iloc := be16(nil, 0x4400) // 4-byte offsets and lengths, no base offset
		iloc = be16(iloc, 2)
		iloc = be32(be16(be16(be16(be16(iloc, 1), 1), 0), 1), 0) // the layout, in idat
		iloc = be32(iloc, len(layout))
		iloc = be32(be16(be16(be16(be16(iloc, 2), 0), 0), 1), mdatAt) // the tile, in mdat
		iloc = be32(iloc, len(data))
		return full("meta", 0, 0, slices.Concat(
			full("hdlr", 0, 0, append(make([]byte, 4), "pict\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"...)),
			full("pitm", 0, 0, be16(nil, 1)),
			full("iloc", 1, 0, iloc),
			full("iinf", 0, 0, append(be16(nil, 2), infe...)),
			full("iref", 0, 0, isoBoxBytes("dimg", dimg)),
			isoBoxBytes("iprp", append(ipco, ipma...)),
			isoBoxBytes("idat", layout),
		))
	}
	ftyp := isoBoxBytes("ftyp", []byte("heic\x00\x00\x00\x00mif1heic"))
	mdatAt := len(ftyp) + len(meta(0)) + 8
	return slices.Concat(ftyp, meta(mdatAt), isoBoxBytes("mdat", data))
}

// TestHEIFSizes: what a HEIC's or AVIF's images declare (ispe) is held
// against what their streams code, read as libde265 and the AV1 decoders
// read them, and against how grids and overlays are laid out; an honest
// file passes and says what decoding it makes, a lying one is refused.
func TestHEIFSizes(t *testing.T) {
	for _, tc := range []struct {
		file    string
		decoded heifDecode
		refusal string
	}{
		// A 24×16 image as a grid of one 64×64 tile, as libheif writes it.
		{"../../../upscaletest/testdata/formats/photo.heic", heifDecode{pixels: 64 * 64, side: 64}, ""},
		// The same with its alpha, a grid as large, decoded with it.
		{"../../../upscaletest/testdata/formats/cutout.heic", heifDecode{pixels: 2 * 64 * 64, side: 64}, ""},
		{"../../../upscaletest/testdata/formats/photo.avif", heifDecode{pixels: 24 * 16, side: 24}, ""},
		{"testdata/hostile/lying.heic", heifDecode{}, "image 1 declares 64×64 pixels but its stream codes 8192×8192"},
		{"testdata/hostile/lying.avif", heifDecode{}, "image 1 declares 64×64 pixels but its stream codes 8192×8192"},
	} {
		src, err := os.ReadFile(tc.file)
		if err != nil {
			t.Fatal(err)
		}
		decoded, err := checkHEIFSizes(src)
		if tc.refusal != "" {
			if !errors.Is(err, upscale.ErrUnsupportedImage) || !strings.Contains(err.Error(), tc.refusal) {
				t.Errorf("%s: %v; want unsupported_image saying %q", tc.file, err, tc.refusal)
			}
			continue
		}
		if err != nil || decoded != tc.decoded {
			t.Errorf("%s: %+v, %v; want %+v", tc.file, decoded, err, tc.decoded)
		}
	}

	sps64 := hevcConfig(hevcSPSNAL(64, 64))
	coded := func(declared image.Point, config []byte, data ...[]byte) *heifItem {
		return &heifItem{typ: "hvc1", size: declared, config: config, data: data}
	}
	grid := func(declared image.Point, rows, columns int, layout image.Point, tiles ...uint32) *heifItem {
		data := binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16([]byte{0, 0, byte(rows - 1), byte(columns - 1)}, uint16(layout.X)), uint16(layout.Y))
		return &heifItem{typ: "grid", size: declared, data: [][]byte{data}, dimg: tiles}
	}
	overlay := func(declared, canvas image.Point) *heifItem {
		data := append([]byte{0, 0}, make([]byte, 8)...)
		data = binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(data, uint16(canvas.X)), uint16(canvas.Y))
		return &heifItem{typ: "iovl", size: declared, data: [][]byte{data}}
	}
	sq := func(side int) image.Point { return image.Pt(side, side) }
	for _, tc := range []struct {
		name    string
		items   map[uint32]*heifItem
		refusal string
		decoded heifDecode
	}{
		{"coded as declared", map[uint32]*heifItem{1: coded(sq(64), sps64)}, "", heifDecode{64 * 64, 64}},
		{"coded in whole blocks", map[uint32]*heifItem{1: coded(image.Pt(61, 50), sps64)}, "", heifDecode{64 * 64, 64}},
		{"coded larger than its blocks", map[uint32]*heifItem{1: coded(sq(63), hevcConfig(hevcSPSNAL(128, 64)))}, "declares 63×63 pixels but its stream codes 128×64", heifDecode{}},
		{"coded smaller", map[uint32]*heifItem{1: coded(sq(65), sps64)}, "declares 65×65 pixels but its stream codes 64×64", heifDecode{}},
		{"a lying SPS in its data", map[uint32]*heifItem{1: coded(sq(64), sps64, lengthPrefixed(hevcSPSNAL(8192, 8192)))}, "its stream codes 8192×8192", heifDecode{}},
		{"data cut short", map[uint32]*heifItem{1: coded(sq(64), sps64, []byte{0, 0, 0, 9, 1})}, "its HEVC data is cut short", heifDecode{}},
		{"no sequence header", map[uint32]*heifItem{1: coded(sq(64), hevcConfig())}, "has no sequence header", heifDecode{}},
		{"no configuration", map[uint32]*heifItem{1: coded(sq(64), nil)}, "has no decoder configuration", heifDecode{}},
		{"no size", map[uint32]*heifItem{1: coded(image.Point{}, sps64)}, "declares no size", heifDecode{}},
		{"an AV1 image as declared", map[uint32]*heifItem{1: {typ: "av01", size: image.Pt(100, 40), config: []byte{0x81, 0, 0, 0}, data: [][]byte{av1SequenceOBU(100, 40)}}}, "", heifDecode{100 * 40, 100}},
		{"an AV1 image coded larger", map[uint32]*heifItem{1: {typ: "av01", size: sq(64), config: append([]byte{0x81, 0, 0, 0}, av1SequenceOBU(4096, 64)...)}}, "declares 64×64 pixels but its stream codes 4096×64", heifDecode{}},
		{"a grid of four tiles, one used four times", map[uint32]*heifItem{1: grid(sq(100), 2, 2, sq(100), 2, 2, 2, 2), 2: coded(sq(64), sps64)}, "", heifDecode{4 * 64 * 64, 100}},
		{"a grid laid out larger than declared", map[uint32]*heifItem{1: grid(sq(128), 2, 2, sq(8192), 2, 2, 2, 2), 2: coded(sq(64), sps64)}, "declares 128×128 pixels but is a grid laid out as 8192×8192", heifDecode{}},
		{"a grid short of tiles", map[uint32]*heifItem{1: grid(sq(128), 2, 2, sq(128), 2, 2, 2), 2: coded(sq(64), sps64)}, "is a grid of 2×2 tiles made of 3 images", heifDecode{}},
		{"a grid of tiles past its edge", map[uint32]*heifItem{1: grid(sq(128), 3, 3, sq(128), 2, 2, 2, 2, 2, 2, 2, 2, 2), 2: coded(sq(64), sps64)}, "do not tile it", heifDecode{}},
		{"a grid of tiles short of its edge", map[uint32]*heifItem{1: grid(image.Pt(129, 128), 2, 2, image.Pt(129, 128), 2, 2, 2, 2), 2: coded(sq(64), sps64)}, "do not tile it", heifDecode{}},
		{"a grid of tiles far past its edge", map[uint32]*heifItem{1: grid(sq(1), 1, 1, sq(1), 2), 2: coded(sq(8192), hevcConfig(hevcSPSNAL(8192, 8192)))}, "reach 8191 pixels past its edge", heifDecode{}},
		{"a grid of tiles just past its edge", map[uint32]*heifItem{1: grid(sq(600), 2, 2, sq(600), 2, 2, 2, 2), 2: coded(sq(512), hevcConfig(hevcSPSNAL(512, 512)))}, "", heifDecode{4 * 512 * 512, 600}},
		{"a grid of tiles of two sizes", map[uint32]*heifItem{1: grid(sq(100), 2, 2, sq(100), 2, 2, 2, 3), 2: coded(sq(64), sps64), 3: coded(image.Pt(60, 64), sps64)}, "tiles of 64×64 and 60×64", heifDecode{}},
		{"a grid of a tile that is no image", map[uint32]*heifItem{1: grid(sq(64), 1, 1, sq(64), 9)}, "a tile (9) that is no image", heifDecode{}},
		{"an overlay on its canvas", map[uint32]*heifItem{1: overlay(sq(64), sq(64))}, "", heifDecode{64 * 64, 64}},
		{"an overlay on a larger canvas", map[uint32]*heifItem{1: overlay(sq(64), sq(30000))}, "is an overlay on a canvas of 30000×30000", heifDecode{}},
		{"an image with its alpha and depth", map[uint32]*heifItem{
			1: {typ: "hvc1", size: sq(64), config: sps64, aux: []uint32{2, 3}},
			2: {typ: "hvc1", size: sq(64), config: sps64, auxType: "urn:mpeg:mpegB:cicp:systems:auxiliary:alpha"},
			3: {typ: "hvc1", size: sq(64), config: sps64, auxType: "urn:com:apple:photo:2020:aux:hdrgainmap"},
		}, "", heifDecode{2 * 64 * 64, 64}},
	} {
		m := heifMeta{items: tc.items}
		why := m.check()
		switch {
		case tc.refusal == "" && why != "":
			t.Errorf("%s: refused: %s", tc.name, why)
		case tc.refusal != "" && !strings.Contains(why, tc.refusal):
			t.Errorf("%s: %q; want a refusal saying %q", tc.name, why, tc.refusal)
		case tc.refusal == "":
			if d := m.decode(); d != tc.decoded {
				t.Errorf("%s: decodes %+v, want %+v", tc.name, d, tc.decoded)
			}
		}
	}
}

// hevcSPSNAL is an HEVC sequence parameter set NAL unit for pictures of
// w×h luma samples, escaped as a stream carries it.
func hevcSPSNAL(w, h int) []byte {
	var b bitWriter
	b.put(0, 4)  // sps_video_parameter_set_id
	b.put(0, 3)  // sps_max_sub_layers_minus1
	b.put(1, 1)  // sps_temporal_id_nesting_flag
	b.put(0, 96) // profile, tier and level: zeros, which need escaping
	b.ue(0)      // sps_seq_parameter_set_id
	b.ue(1)      // chroma_format_idc: 4:2:0
	b.ue(uint64(w))
	b.ue(uint64(h))
	b.put(0, 1) // conformance_window_flag
	b.put(1, 1) // stop bit
	nal := []byte{hevcSPS << 1, 1}
	zeros := 0
	for _, c := range b.bytes {
		if zeros >= 2 && c <= 3 {
			nal, zeros = append(nal, 3), 0
		}
		nal = append(nal, c)
		if c == 0 {
			zeros++
		} else {
			zeros = 0
		}
	}
	return nal
}

// hevcConfig is an hvcC box's body holding nals in one array.
func hevcConfig(nals ...[]byte) []byte {
	config := append(make([]byte, 22), 0)
	if len(nals) == 0 {
		return config
	}
	config[22] = 1
	config = binary.BigEndian.AppendUint16(append(config, 0x80|hevcSPS), uint16(len(nals)))
	for _, nal := range nals {
		config = append(binary.BigEndian.AppendUint16(config, uint16(len(nal))), nal...)
	}
	return config
}

// lengthPrefixed is a NAL unit after its 4-byte length, as HEIF stores
// an image's data.
func lengthPrefixed(nal []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(nal))), nal...)
}

// av1SequenceOBU is an AV1 sequence header OBU, with its size field, for
// frames of at most w×h, with a reduced still picture header.
func av1SequenceOBU(w, h int) []byte {
	var b bitWriter
	b.put(0, 3) // seq_profile
	b.put(1, 1) // still_picture
	b.put(1, 1) // reduced_still_picture_header
	b.put(0, 5) // seq_level_idx
	b.put(15, 4)
	b.put(15, 4) // 16-bit sizes
	b.put(uint64(w-1), 16)
	b.put(uint64(h-1), 16)
	b.put(1, 1) // trailing bit
	return append([]byte{av1SequenceHeader<<3 | 2, byte(len(b.bytes))}, b.bytes...)
}

// bitWriter writes an MSB-first bit string.
type bitWriter struct {
	bytes []byte
	n     int // bits written
}

func (w *bitWriter) put(v uint64, bits int) {
	for i := bits - 1; i >= 0; i-- {
		if w.n%8 == 0 {
			w.bytes = append(w.bytes, 0)
		}
		w.bytes[len(w.bytes)-1] |= byte(v>>i&1) << (7 - w.n%8)
		w.n++
	}
}

// ue writes v as an unsigned Exp-Golomb number.
func (w *bitWriter) ue(v uint64) {
	n := bits.Len64(v + 1)
	w.put(0, n-1)
	w.put(v+1, n)
}

// TestHostileFiles: the hostile files in testdata/hostile, which other
// packages' tests send through the handler, are what they claim to be: an
// HEVC and an AV1 image declaring 64×64 whose streams code 8192×8192, and
// grids of the first (2×2, laid out as 128×128; 63×64, as 4096×4032),
// which heifGrid makes again byte for byte, and a 1×1 grid of its stream
// declared honestly (8192×8192) laid out as one pixel.
func TestHostileFiles(t *testing.T) {
	read := func(name string) []byte {
		data, err := os.ReadFile("testdata/hostile/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	lying := read("lying.heic")
	for name, it := range map[string]*heifItem{"lying.heic": heifImage(t, lying), "lying.avif": heifCoded(t, read("lying.avif"), "av01")} {
		sizes, why := it.codedSizes()
		if it.size != image.Pt(64, 64) || why != "" || len(sizes) == 0 || sizes[0] != image.Pt(8192, 8192) {
			t.Errorf("%s declares %v and codes %v (%s); want 64×64 and 8192×8192", name, it.size, sizes, why)
		}
	}
	for name, grid := range map[string][]byte{
		"lying-grid-2x2.heic":       heifGrid(t, lying, 2, 2, image.Pt(128, 128)),
		"lying-grid-63x64.heic":     heifGrid(t, lying, 63, 64, image.Pt(4096, 4032)),
		"overhanging-grid-1x1.heic": heifHonestGrid(t, lying, 1, 1, image.Pt(1, 1)),
	} {
		if !bytes.Equal(read(name), grid) {
			t.Errorf("testdata/hostile/%s is not what heifGrid makes", name)
		}
	}
}
