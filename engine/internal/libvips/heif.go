package libvips

import (
	"bytes"
	"fmt"
	"image"
	"maps"
	"math"
	"slices"

	"github.com/upscalekit/upscale"
)

// maxHEIFDecodes caps how many images libheif may decode for one HEIC or
// AVIF file, counting each as often as it is reached. A phone's photo is a
// grid of 48 tiles (12 MP) to about 200 (48 MP), with an alpha grid as
// many again; a file whose images are built from each other many times
// over would have libheif decode them without end.
const maxHEIFDecodes = 4096

// checkHEIFReferences refuses a HEIC or AVIF file whose images refer to
// each other in a loop, or would be reached more than maxHEIFDecodes times
// in all (an upper bound: every image that refers to others counts, not
// only those the primary image reaches). libheif decodes an image by
// decoding what it is made of (its dimg references: a grid's tiles, each
// in a thread of its own, an overlay's layers) and its alpha image (whose
// auxl reference names it): a loop made it start threads until the
// process had tens of thousands and the request never ended.
func checkHEIFReferences(src []byte) error {
	refs, n := heifReferences(src)
	// Each reference adds at least one decode, and a file of more is
	// refused before its graph costs time or stack.
	tooMany := upscale.Explain(upscale.ErrUnsupportedImage, "The file's images are made of more than %d images in all.", maxHEIFDecodes)
	if n > maxHEIFDecodes {
		return tooMany
	}
	decodes := map[uint32]int{}
	const visiting = -1
	// count returns how many decodes decoding id takes, or visiting when
	// id is reached again while its own count is under way: a loop.
	var count func(id uint32) int
	count = func(id uint32) int {
		if n, seen := decodes[id]; seen {
			return n
		}
		decodes[id] = visiting
		n := 1
		for _, part := range refs[id] {
			c := count(part)
			if c == visiting {
				return visiting
			}
			n = min(n+c, maxHEIFDecodes+1)
		}
		decodes[id] = n
		return n
	}
	total := 0
	for id := range refs {
		n := count(id)
		if n == visiting {
			return upscale.Explain(upscale.ErrUnsupportedImage, "The file's images are made of each other in a loop; it is corrupt.")
		}
		total = min(total+n, maxHEIFDecodes+1)
	}
	if total > maxHEIFDecodes {
		return tooMany
	}
	return nil
}

// heifReferences reads the item references that libheif follows to decode
// an image: for each item, the items it is made of (dimg) and its
// auxiliary images (auxl, which point the other way), from every iref box
// of every top-level meta box (libheif 1.15 keeps the last meta; reading
// all of them leaves none out), each read as readIref reads it. It stops
// once it has read more than maxHEIFDecodes references, and returns how
// many it read.
func heifReferences(src []byte) (refs map[uint32][]uint32, n int) {
	refs = map[uint32][]uint32{}
	for _, meta := range isoBoxes(src) {
		if meta.typ != "meta" || len(meta.body) < 4 {
			continue
		}
		for _, iref := range isoBoxes(meta.body[4:]) { // after meta's version and flags
			if iref.typ != "iref" {
				continue
			}
			readIref(iref.body, func(typ string, from, target uint32) bool {
				switch typ {
				case "dimg": // from is made of target
					refs[from] = append(refs[from], target)
					n++
				case "auxl": // from is target's auxiliary image, decoded with it
					refs[target] = append(refs[target], from)
					n++
				}
				return n <= maxHEIFDecodes
			})
		}
	}
	return refs, n
}

// heifDecode is what decoding a HEIC or AVIF file makes, read from its
// header: the pixels libheif makes for its heaviest image (every tile of
// a grid whole, as often as the grid uses it, an overlay's canvas, and
// the alpha image decoded with it) and the longest side of any image it
// decodes on the way.
type heifDecode struct {
	pixels int64
	side   int
}

// heifBlock is how much larger than its declared size (ispe) an image's
// coded stream may be: HEVC codes whole coding blocks, of up to 64
// pixels a side, and crops the rest away.
const heifBlock = 64

// checkHEIFSizes refuses a HEIC or AVIF file whose images would decode to
// other sizes than they declare, before libheif sees it, and returns what
// decoding it makes. The sizes that decoding makes are read from the
// coded streams as their decoders read them: the sequence parameter sets
// of HEVC and the sequence headers of AV1, in the image's decoder
// configuration and in its data. An image whose stream codes more (or
// less) than its ispe property declares, beyond the codec's block
// rounding, is refused, as is a grid whose layout is not its declared
// size or whose tiles do not tile it, and an overlay whose canvas is not.
// libheif 1.15 trusts ispe for the size libvips plans by and then decodes
// what the stream codes: a 15 KB file declaring 64×64 decoded 8192×8192
// in 4 s and 430 MiB, unseen by every limit. Every top-level meta box is
// checked, not only the one libheif keeps. checkHEIFReferences must have
// passed: the images are not made of each other in a loop.
func checkHEIFSizes(src []byte) (heifDecode, error) {
	var most heifDecode
	for _, box := range isoBoxes(src) {
		if box.typ != "meta" {
			continue
		}
		m, why := readHEIFMeta(box.body, src)
		if why == "" {
			why = m.check()
		}
		if why != "" {
			return heifDecode{}, upscale.Explain(upscale.ErrUnsupportedImage, "The file is not a HEIF image that can be decoded safely: %s.", why)
		}
		d := m.decode()
		most.pixels, most.side = max(most.pixels, d.pixels), max(most.side, d.side)
	}
	return most, nil
}

// heifDecodable lists the item types libheif 1.15 decodes: HEVC and AV1
// images, and the images derived from others (grids, overlays and
// identities). It fails on any other at once, without decoding.
var heifDecodable = map[string]bool{"hvc1": true, "av01": true, "grid": true, "iovl": true, "iden": true}

// check says why m's images would not decode to the sizes they declare,
// or "" when they would.
func (m heifMeta) check() string {
	for _, id := range slices.Sorted(maps.Keys(m.items)) {
		it := m.items[id]
		if !heifDecodable[it.typ] {
			continue
		}
		if it.size == (image.Point{}) {
			return fmt.Sprintf("image %d declares no size (ispe)", id)
		}
		if it.dataErr != "" {
			return fmt.Sprintf("image %d: %s", id, it.dataErr)
		}
		var why string
		switch it.typ {
		case "hvc1", "av01":
			why = it.checkCoded()
		case "grid":
			why = m.checkGrid(it)
		case "iovl":
			why = it.checkOverlay()
		}
		if why != "" {
			return fmt.Sprintf("image %d %s", id, why)
		}
	}
	return ""
}

// codedSizes reads the sizes it's stream codes.
func (it *heifItem) codedSizes() ([]image.Point, string) {
	if it.config == nil {
		return nil, "has no decoder configuration"
	}
	if it.typ == "av01" {
		return av1Sizes(it.config, it.data)
	}
	return hevcSizes(it.config, it.data)
}

// checkCoded says why a HEVC or AV1 image's stream would not decode to
// its declared size.
func (it *heifItem) checkCoded() string {
	sizes, why := it.codedSizes()
	switch {
	case why != "":
		return why
	case len(sizes) == 0:
		return "has no sequence header to decode it by"
	}
	for _, coded := range sizes {
		if !blockRounded(it.size.X, coded.X) || !blockRounded(it.size.Y, coded.Y) {
			return fmt.Sprintf("declares %d×%d pixels but its stream codes %d×%d", it.size.X, it.size.Y, coded.X, coded.Y)
		}
	}
	return ""
}

// blockRounded reports whether coded is declared rounded up to whole
// coding blocks, or declared itself.
func blockRounded(declared, coded int) bool {
	return declared <= coded && coded <= (declared+heifBlock-1)/heifBlock*heifBlock
}

// checkGrid says why a grid would not decode to its declared size: its
// layout (ISO/IEC 23008-12 6.6.2.3) names another, it has other than
// rows×columns tiles, its tiles differ in size, or they do not tile it:
// they must cover it, and a row or column fewer must not.
func (m heifMeta) checkGrid(grid *heifItem) string {
	r, sizeBits := derivedData(grid)
	rows, columns := int(r.read(8))+1, int(r.read(8))+1
	out := image.Pt(int(r.read(sizeBits)), int(r.read(sizeBits)))
	switch {
	case r.short:
		return "is a grid whose layout is cut short"
	case out != grid.size:
		return fmt.Sprintf("declares %d×%d pixels but is a grid laid out as %d×%d", grid.size.X, grid.size.Y, out.X, out.Y)
	case len(grid.dimg) != rows*columns:
		return fmt.Sprintf("is a grid of %d×%d tiles made of %d images", columns, rows, len(grid.dimg))
	}
	var tile image.Point
	for _, id := range grid.dimg {
		it, ok := m.items[id]
		if !ok || !heifDecodable[it.typ] {
			return fmt.Sprintf("is a grid with a tile (%d) that is no image", id)
		}
		if tile == (image.Point{}) {
			tile = it.size
		}
		if it.size != tile {
			return fmt.Sprintf("is a grid of tiles of %d×%d and %d×%d pixels", tile.X, tile.Y, it.size.X, it.size.Y)
		}
	}
	if !tiles(columns, tile.X, out.X) || !tiles(rows, tile.Y, out.Y) {
		return fmt.Sprintf("is a grid of %d×%d pixels whose %d×%d tiles of %d×%d do not tile it", out.X, out.Y, columns, rows, tile.X, tile.Y)
	}
	if over := max(columns*tile.X-out.X, rows*tile.Y-out.Y); over > maxGridOverhang {
		return fmt.Sprintf("is a grid of %d×%d pixels whose tiles of %d×%d reach %d pixels past its edge; at most %d are accepted", out.X, out.Y, tile.X, tile.Y, over, maxGridOverhang)
	}
	return ""
}

// maxGridOverhang is how far a grid's tiles may reach past its right or
// bottom edge: libheif decodes them whole, so a 1×1 grid of one 8192²
// tile decoded 67 MP (7.1 s, 289 MiB) for a one-pixel image. Phones tile
// with 512² (an overhang below 512), and encoders that split an image
// into equal tiles overhang by less than a tile's share of a pixel.
const maxGridOverhang = 1024

// derivedData reads a grid's or an overlay's data up to its version and
// flags, and returns the rest and how many bits its sizes take: 32 when
// the flags' lowest bit is set, else 16.
func derivedData(it *heifItem) (r *bigEndianReader, sizeBits int) {
	r = &bigEndianReader{data: bytes.Join(it.data, nil)}
	r.read(8) // version
	if r.read(8)&1 != 0 {
		return r, 32
	}
	return r, 16
}

// tiles reports whether n tiles of side cover length, and n-1 do not.
func tiles(n, side, length int) bool {
	return int64(n)*int64(side) >= int64(length) && int64(n-1)*int64(side) < int64(length)
}

// checkOverlay says why an overlay would not decode to its declared size:
// its canvas (ISO/IEC 23008-12 6.6.2.2) is another.
func (it *heifItem) checkOverlay() string {
	r, sizeBits := derivedData(it)
	r.read(4 * 16) // canvas fill
	canvas := image.Pt(int(r.read(sizeBits)), int(r.read(sizeBits)))
	switch {
	case r.short:
		return "is an overlay whose layout is cut short"
	case canvas != it.size:
		return fmt.Sprintf("declares %d×%d pixels but is an overlay on a canvas of %d×%d", it.size.X, it.size.Y, canvas.X, canvas.Y)
	}
	return ""
}

// heifAlpha lists the auxiliary types libheif decodes with an image as
// its alpha.
var heifAlpha = map[string]bool{
	"urn:mpeg:avc:2015:auxid:1":                   true,
	"urn:mpeg:hevc:2015:auxid:1":                  true,
	"urn:mpeg:mpegB:cicp:systems:auxiliary:alpha": true,
}

// decode is what decoding m's heaviest image makes, m having passed
// check.
func (m heifMeta) decode() heifDecode {
	pixels := map[uint32]int64{}
	var d heifDecode
	// decoded is the pixels libheif makes to decode id: saturated, so
	// that a sum cannot wrap.
	var decoded func(id uint32) int64
	decoded = func(id uint32) int64 {
		if n, seen := pixels[id]; seen {
			return n
		}
		pixels[id] = 0 // a loop, which checkHEIFReferences refused, adds nothing
		it, ok := m.items[id]
		if !ok || !heifDecodable[it.typ] {
			return 0
		}
		var n int64
		add := func(more int64) { n = min(n+more, math.MaxInt64/2) }
		switch it.typ {
		case "hvc1", "av01":
			sizes, _ := it.codedSizes()
			for _, s := range sizes {
				n = max(n, int64(s.X)*int64(s.Y))
				d.side = max(d.side, s.X, s.Y)
			}
		case "iovl":
			add(int64(it.size.X) * int64(it.size.Y))
		}
		d.side = max(d.side, it.size.X, it.size.Y)
		for _, part := range it.dimg {
			add(decoded(part))
		}
		for _, aux := range it.aux {
			if a, ok := m.items[aux]; ok && heifAlpha[a.auxType] {
				add(decoded(aux))
			}
		}
		pixels[id] = n
		return n
	}
	for id := range m.items {
		d.pixels = max(d.pixels, decoded(id))
	}
	return d
}
