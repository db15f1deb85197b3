package libvips

import (
	"encoding/binary"

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
// all of them leaves none out). It reads an iref box as libheif 1.15 does:
// 16-bit item IDs in version 0 and 32-bit ones in any other, each
// reference's box header and then its IDs, one after the other, whatever
// size the header gives (the fuzzer's looping files hid their auxl
// reference behind a size that runs past the file). It stops once it has
// read more than maxHEIFDecodes references, and returns how many it read.
func heifReferences(src []byte) (refs map[uint32][]uint32, n int) {
	refs = map[uint32][]uint32{}
	for _, meta := range isoBoxes(src) {
		if meta.typ != "meta" || len(meta.body) < 4 {
			continue
		}
		for _, iref := range isoBoxes(meta.body[4:]) { // after meta's version and flags
			if iref.typ != "iref" || len(iref.body) < 4 {
				continue
			}
			idBits := 32
			if iref.body[0] == 0 {
				idBits = 16
			}
			r := &bigEndianReader{data: iref.body[4:]}
			for !r.done() && n <= maxHEIFDecodes {
				// A box header: its size, which libheif does not use here,
				// a 64-bit size after size 1, and a 16-byte extended type
				// after type uuid.
				size, typ := r.read(32), string(r.bytes(4))
				if size == 1 {
					r.read(64)
				}
				if typ == "uuid" {
					r.bytes(16)
				}
				from, count := uint32(r.read(idBits)), r.read(16)
				for range count {
					if r.done() || n > maxHEIFDecodes {
						break
					}
					target := uint32(r.read(idBits))
					switch typ {
					case "dimg": // from is made of target
						refs[from] = append(refs[from], target)
						n++
					case "auxl": // from is target's auxiliary image, decoded with it
						refs[target] = append(refs[target], from)
						n++
					}
				}
			}
		}
	}
	return refs, n
}

// bigEndianReader reads big-endian numbers from data until it runs out,
// then reads zeros.
type bigEndianReader struct {
	data []byte
}

func (r *bigEndianReader) done() bool { return len(r.data) == 0 }

// bytes returns the next n bytes, fewer at the end.
func (r *bigEndianReader) bytes(n int) []byte {
	n = min(n, len(r.data))
	b := r.data[:n]
	r.data = r.data[n:]
	return b
}

// read returns the next bits-bit number (16, 32 or 64).
func (r *bigEndianReader) read(bits int) uint64 {
	var v uint64
	for _, b := range r.bytes(bits / 8) {
		v = v<<8 | uint64(b)
	}
	return v
}

// isoBox is one box of an ISO BMFF file: its type and what it holds.
type isoBox struct {
	typ  string
	body []byte
}

// isoBoxes splits data into the boxes it holds, one after another. A box
// whose size runs past the end of data is read to that end, so that no
// reference libheif might read is missed.
func isoBoxes(data []byte) []isoBox {
	var boxes []isoBox
	for len(data) >= 8 {
		size, header := uint64(binary.BigEndian.Uint32(data)), uint64(8)
		switch size {
		case 0: // to the end
			size = uint64(len(data))
		case 1: // a 64-bit size follows the type
			if len(data) < 16 {
				return boxes
			}
			size, header = binary.BigEndian.Uint64(data[8:]), 16
		}
		if size < header {
			return boxes
		}
		size = min(size, uint64(len(data)))
		boxes = append(boxes, isoBox{string(data[4:8]), data[header:size]})
		data = data[size:]
	}
	return boxes
}
