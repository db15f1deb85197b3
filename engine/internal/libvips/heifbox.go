package libvips

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"image"
)

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

// bigEndianReader reads big-endian numbers from data until it runs out,
// then reads zeros and reports short.
type bigEndianReader struct {
	data  []byte
	short bool
}

func (r *bigEndianReader) done() bool { return len(r.data) == 0 }

// bytes returns the next n bytes, fewer at the end.
func (r *bigEndianReader) bytes(n int) []byte {
	if n > len(r.data) {
		n, r.short = len(r.data), true
	}
	b := r.data[:n]
	r.data = r.data[n:]
	return b
}

// read returns the next bits-bit number (0, 8, 16, 32 or 64).
func (r *bigEndianReader) read(bits int) uint64 {
	var v uint64
	for _, b := range r.bytes(bits / 8) {
		v = v<<8 | uint64(b)
	}
	return v
}

// readIref calls visit for each reference of an iref box's body, read as
// libheif 1.15 reads it: 16-bit item IDs in version 0 and 32-bit ones in
// any other, each reference's box header and then its IDs, one after the
// other, whatever size the header gives (the fuzzer's looping files hid
// their auxl reference behind a size that runs past the file). visit
// returns false to stop.
func readIref(body []byte, visit func(typ string, from, to uint32) bool) {
	if len(body) < 4 {
		return
	}
	idBits := 32
	if body[0] == 0 {
		idBits = 16
	}
	r := &bigEndianReader{data: body[4:]}
	for !r.done() {
		// A box header: its size, which libheif does not use here, a
		// 64-bit size after size 1, and a 16-byte extended type after
		// type uuid.
		size, typ := r.read(32), string(r.bytes(4))
		if size == 1 {
			r.read(64)
		}
		if typ == "uuid" {
			r.bytes(16)
		}
		from, count := uint32(r.read(idBits)), r.read(16)
		for range count {
			if r.done() {
				break
			}
			if !visit(typ, from, uint32(r.read(idBits))) {
				return
			}
		}
	}
}

// heifItem is what a meta box says of one of its items.
type heifItem struct {
	typ string // hvc1, av01, grid, iovl, iden, Exif, ...
	// size is the item's ispe property, the size it declares; zero when
	// it has none.
	size image.Point
	// config is the body of its hvcC or av1C property, nil when it has
	// neither.
	config []byte
	// auxType is its auxC property's type: what an auxiliary image is.
	auxType string
	// data is where its bytes are (iloc): nil when it has none, or when
	// they cannot be had (dataErr says why).
	data    [][]byte
	dataErr string
	// dimg lists the items it is made of, in order; aux the auxiliary
	// images that name it (auxl).
	dimg, aux []uint32
}

// heifMeta is a meta box's items, by ID.
type heifMeta struct {
	items map[uint32]*heifItem
}

// readHEIFMeta reads a top-level meta box's body: its items' types
// (iinf), properties (iprp), data (iloc, idat) and references (iref).
// file is the whole file, which iloc's offsets count from. A box that
// libheif reads once and that the meta holds more than once is refused,
// so that the items read here are the ones libheif decodes.
func readHEIFMeta(body, file []byte) (heifMeta, string) {
	m := heifMeta{items: map[uint32]*heifItem{}}
	if len(body) < 4 {
		return m, "its meta box is empty"
	}
	boxes := map[string][]byte{}
	var irefs [][]byte
	for _, b := range isoBoxes(body[4:]) { // after meta's version and flags
		switch b.typ {
		case "iref":
			irefs = append(irefs, b.body)
			continue
		case "iinf", "iloc", "iprp", "idat", "pitm":
		default:
			continue
		}
		if _, twice := boxes[b.typ]; twice {
			return m, "its meta box holds two " + b.typ + " boxes"
		}
		boxes[b.typ] = b.body
	}
	item := func(id uint32) *heifItem {
		it, ok := m.items[id]
		if !ok {
			it = &heifItem{}
			m.items[id] = it
		}
		return it
	}
	if why := readIinf(boxes["iinf"], item); why != "" {
		return m, why
	}
	if why := readIprp(boxes["iprp"], item); why != "" {
		return m, why
	}
	if why := readIloc(boxes["iloc"], boxes["idat"], file, item); why != "" {
		return m, why
	}
	for _, iref := range irefs {
		readIref(iref, func(typ string, from, to uint32) bool {
			switch typ {
			case "dimg":
				item(from).dimg = append(item(from).dimg, to)
			case "auxl":
				item(to).aux = append(item(to).aux, from)
			}
			return true
		})
	}
	return m, ""
}

// readIinf reads the item types of an iinf box's body.
func readIinf(body []byte, item func(uint32) *heifItem) string {
	if body == nil {
		return ""
	}
	r := &bigEndianReader{data: body}
	countBits := 16
	if r.read(8) != 0 {
		countBits = 32
	}
	r.read(24) // flags
	r.read(countBits)
	if r.short {
		return "its item list is cut short"
	}
	// An item given twice is refused: libheif keeps the first entry
	// where a map keeps the last, so the two readings would differ (a
	// fuzzed AVIF's second entry, of type Exif, hid its first, of type
	// av01, from the size checks, and libheif decoded it for 6 s). The
	// format allows one entry an item (ISO/IEC 23008-12 9.3.2).
	seen := map[uint32]bool{}
	for _, infe := range isoBoxes(r.data) {
		if infe.typ != "infe" {
			continue
		}
		e := &bigEndianReader{data: infe.body}
		version := e.read(8)
		e.read(24)
		if version < 2 { // no item type: never an image
			continue
		}
		idBits := 16
		if version >= 3 {
			idBits = 32
		}
		id := uint32(e.read(idBits))
		e.read(16) // protection index
		typ := string(e.bytes(4))
		if e.short {
			return "an item's entry is cut short"
		}
		if seen[id] {
			return fmt.Sprintf("its item list gives item %d twice", id)
		}
		seen[id] = true
		item(id).typ = typ
	}
	return ""
}

// readIprp reads the properties an iprp box's body gives items: ispe,
// hvcC, av1C and auxC, by way of its ipco and ipma boxes.
func readIprp(body []byte, item func(uint32) *heifItem) string {
	var properties []isoBox
	var ipmas [][]byte
	for _, b := range isoBoxes(body) {
		switch b.typ {
		case "ipco":
			if properties != nil {
				return "it holds two property containers"
			}
			properties = isoBoxes(b.body)
		case "ipma":
			ipmas = append(ipmas, b.body)
		}
	}
	seen := map[uint32]bool{} // one association entry an item, as for readIinf
	for _, ipma := range ipmas {
		r := &bigEndianReader{data: ipma}
		version, flags := r.read(8), r.read(24)
		idBits, indexBits := 16, 8
		if version >= 1 {
			idBits = 32
		}
		if flags&1 != 0 {
			indexBits = 16
		}
		for range r.read(32) {
			id, count := uint32(r.read(idBits)), r.read(8)
			if seen[id] && !r.short {
				return fmt.Sprintf("its property associations give item %d twice", id)
			}
			seen[id] = true
			for range count {
				index := int(r.read(indexBits) &^ (1 << (indexBits - 1))) // the top bit says essential
				if index == 0 || index > len(properties) {
					continue
				}
				if why := applyProperty(item(id), properties[index-1]); why != "" {
					return why
				}
			}
			if r.short {
				return "its property associations are cut short"
			}
		}
	}
	return ""
}

// applyProperty records a property of it.
func applyProperty(it *heifItem, p isoBox) string {
	switch p.typ {
	case "ispe":
		r := &bigEndianReader{data: p.body}
		r.read(32) // version and flags
		it.size = image.Pt(int(min(r.read(32), 1<<31-1)), int(min(r.read(32), 1<<31-1)))
		if r.short {
			return "an image's size (ispe) is cut short"
		}
	case "hvcC", "av1C":
		if it.config != nil {
			return "an image has two decoder configurations"
		}
		it.config = p.body
	case "auxC":
		if len(p.body) >= 4 {
			typ, _, _ := bytes.Cut(p.body[4:], []byte{0})
			it.auxType = string(typ)
		}
	}
	return ""
}

// readIloc finds each item's data: the extents an iloc box's body gives
// it, in the file (construction method 0) or in the idat box (1), as
// libheif reads them. An item whose extents lie outside what holds them
// has no data, and dataErr says why.
func readIloc(body, idat, file []byte, item func(uint32) *heifItem) string {
	if body == nil {
		return ""
	}
	r := &bigEndianReader{data: body}
	version := r.read(8)
	r.read(24)
	sizes := r.read(16)
	offsetBits, lengthBits, baseBits, indexBits := int(sizes>>12)*8, int(sizes>>8&15)*8, int(sizes>>4&15)*8, int(sizes&15)*8
	if version == 0 {
		indexBits = 0
	}
	countBits, idBits := 16, 16
	if version >= 2 {
		countBits, idBits = 32, 32
	}
	seen := map[uint32]bool{} // one location an item, as for readIinf
	for range r.read(countBits) {
		id := uint32(r.read(idBits))
		if seen[id] {
			return fmt.Sprintf("its item locations give item %d twice", id)
		}
		seen[id] = true
		method := uint64(0)
		if version >= 1 {
			method = r.read(16) & 15
		}
		reference := r.read(16)
		base := r.read(baseBits)
		it := item(id)
		for range r.read(16) {
			r.read(indexBits)
			offset, length := r.read(offsetBits), r.read(lengthBits)
			if r.short {
				return "its item locations are cut short"
			}
			from := file
			switch {
			case reference != 0:
				it.dataErr = "its data is in another file"
				continue
			case method == 1:
				from = idat
			case method != 0:
				it.dataErr = "its data is made from another item's"
				continue
			}
			start := base + offset
			if length == 0 { // to the end
				length = uint64(len(from)) - min(start, uint64(len(from)))
			}
			if start > uint64(len(from)) || length > uint64(len(from))-start {
				it.dataErr = "its data lies past the end of the file"
				continue
			}
			it.data = append(it.data, from[start:start+length])
		}
		if r.short {
			return "its item locations are cut short"
		}
	}
	return ""
}
