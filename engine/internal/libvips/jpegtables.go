package libvips

import (
	"encoding/binary"
	"math"
	"slices"
)

// zigzag[i] is the row-major index of the i-th coefficient in the order
// JPEG stores them.
var zigzag = [64]int{
	0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5,
	12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6, 7, 14, 21, 28,
	35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51,
	58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
}

// quantTables reads the quantisation tables of a JPEG's first (luma) and
// second (chroma) components, row-major, from the segments before its
// first scan. ok is false when src is not a JPEG, a table is missing, or
// the file has four components (CMYK), whose blocks are not the Y, Cb and
// Cr the denoiser works in; a greyscale JPEG has no chroma table and
// leaves it zero. (A three-component JPEG is taken to be YCbCr: the rare
// RGB JPEG gets thresholds from tables of another plane.)
func quantTables(src []byte) (luma, chroma [64]float32, ok bool) {
	if len(src) < 2 || src[0] != 0xFF || src[1] != 0xD8 {
		return luma, chroma, false
	}
	var tables [4]*[64]float32
	var components []byte // table number of each component
	for pos := 2; pos+4 <= len(src); {
		if src[pos] != 0xFF {
			return luma, chroma, false
		}
		marker := src[pos+1]
		if marker == 0xFF { // fill byte
			pos++
			continue
		}
		if marker == 0xDA { // start of scan: every table the scan needs is known
			break
		}
		length := int(binary.BigEndian.Uint16(src[pos+2:]))
		if length < 2 || pos+2+length > len(src) {
			return luma, chroma, false
		}
		segment := src[pos+4 : pos+2+length]
		pos += 2 + length
		switch {
		case marker == 0xDB: // DQT: one or more tables
			for len(segment) > 0 {
				precision, id := segment[0]>>4, segment[0]&15
				size := 64 << min(precision, 1)
				if id > 3 || len(segment) < 1+size {
					return luma, chroma, false
				}
				table := new([64]float32)
				for i := range 64 {
					if precision == 0 {
						table[zigzag[i]] = float32(segment[1+i])
					} else {
						table[zigzag[i]] = float32(binary.BigEndian.Uint16(segment[1+2*i:]))
					}
				}
				tables[id] = table
				segment = segment[1+size:]
			}
		case marker >= 0xC0 && marker <= 0xC2: // SOF: baseline, extended, progressive
			if len(segment) < 6 || len(segment) < 6+3*int(segment[5]) {
				return luma, chroma, false
			}
			for c := range int(segment[5]) {
				components = append(components, segment[6+3*c+2]&3)
			}
		}
	}
	if len(components) != 1 && len(components) != 3 || tables[components[0]] == nil {
		return luma, chroma, false
	}
	luma = *tables[components[0]]
	if len(components) >= 2 {
		if tables[components[1]] == nil {
			return luma, chroma, false
		}
		chroma = *tables[components[1]]
	}
	return luma, chroma, true
}

// transpose swaps a table's rows and columns.
func transpose(table [64]float32) [64]float32 {
	var out [64]float32
	for i, v := range table {
		out[i%8*8+i/8] = v
	}
	return out
}

// blocks says where a JPEG's 8×8 blocks lie once autorot has turned the
// image upright: their first full block starts at (x, y), and transposed
// says its rows and columns have swapped (EXIF orientations 5-8).
type blocks struct {
	x, y       int
	transposed bool
}

// uprightBlocks gives the blocks of a JPEG stored w×h with EXIF
// orientation. The file's blocks start at its top left corner, so an axis
// that autorot mirrors ends, rather than starts, on a block boundary.
func uprightBlocks(orientation, w, h int) blocks {
	var b blocks
	mirrorX, mirrorY := false, false
	switch orientation {
	case 2:
		mirrorX = true
	case 3:
		mirrorX, mirrorY = true, true
	case 4:
		mirrorY = true
	case 5:
		b.transposed = true
	case 6: // a quarter clockwise
		b.transposed, mirrorX = true, true
	case 7:
		b.transposed, mirrorX, mirrorY = true, true, true
	case 8: // a quarter anticlockwise
		b.transposed, mirrorY = true, true
	}
	if b.transposed {
		w, h = h, w
	}
	if mirrorX {
		b.x = w % 8
	}
	if mirrorY {
		b.y = h % 8
	}
	return b
}

// ijgLuma is the luma table of the JPEG standard's annex K, row-major,
// which libjpeg scales by quality.
var ijgLuma = [64]float32{
	16, 11, 10, 16, 24, 40, 51, 61,
	12, 12, 14, 19, 26, 58, 60, 55,
	14, 13, 16, 24, 40, 57, 69, 56,
	14, 17, 22, 29, 51, 87, 80, 62,
	18, 22, 37, 56, 68, 109, 103, 77,
	24, 35, 55, 64, 81, 104, 113, 92,
	49, 64, 78, 87, 103, 121, 120, 101,
	72, 92, 95, 98, 112, 100, 103, 99,
}

// ijgQuality is the libjpeg quality (1-100) whose luma table is closest to
// luma: libjpeg writes each entry as (annex K × s + 50) / 100, clipped to
// 1-255, with s = 5000 / q below quality 50 and 200 − 2q above. For a
// table of another encoder (a camera's, Photoshop's) it is the libjpeg
// quality that quantises about as coarsely. The median of the entries'
// estimates of s ignores the entries clipped at 1 or 255.
func ijgQuality(luma [64]float32) int {
	var scales []float64
	for i, v := range luma {
		if v > 1 && v < 255 {
			scales = append(scales, (100*float64(v)-50)/float64(ijgLuma[i]))
		}
	}
	if len(scales) == 0 {
		if luma[0] <= 1 {
			return 100
		}
		return 1
	}
	slices.Sort(scales)
	s := scales[len(scales)/2]
	q := 5000 / s
	if s <= 100 {
		q = (200 - s) / 2
	}
	return min(max(int(math.Round(q)), 1), 100)
}
