package libvips

import "github.com/upscalekit/upscale"

// checkGIF refuses a GIF that is cut short, before libnsgif decodes it:
// one whose stream ends inside one of its blocks, or one of whose frames'
// image data decodes to fewer pixels than the frame has. libnsgif shows
// the frames before such a cut as the whole animation, and fills a short
// frame's missing pixels with black: either way the result would show
// what the file does not hold. The blocks are walked and each frame's LZW
// codes counted, not decoded. A stream that ends between blocks without
// its trailer is taken as it is, as browsers take it.
func checkGIF(src []byte) error {
	truncated := upscale.Explain(upscale.ErrUnsupportedImage, "The GIF ends inside one of its frames; the file is truncated.")
	const header = 6 + 7 // signature and version, logical screen descriptor
	if len(src) < header {
		return truncated
	}
	at := header + colourTable(src[10])
	var data []byte // a frame's image data, its sub-blocks joined
	// subBlocks reads data sub-blocks up to their terminator into data,
	// or reports false when src ends first.
	subBlocks := func() bool {
		data = data[:0]
		for at < len(src) {
			n := int(src[at])
			if n == 0 {
				at++
				return true
			}
			if at+1+n > len(src) {
				return false
			}
			data = append(data, src[at+1:at+1+n]...)
			at += 1 + n
		}
		return false
	}
	for frame := 1; at < len(src); {
		switch src[at] {
		case 0x3B: // trailer
			return nil
		case 0x21: // extension: its label, then sub-blocks
			at += 2
			if !subBlocks() {
				return truncated
			}
		case 0x2C: // image descriptor, colour table, LZW code size, sub-blocks
			if at+10 > len(src) {
				return truncated
			}
			w, h := int64(src[at+5])|int64(src[at+6])<<8, int64(src[at+7])|int64(src[at+8])<<8
			at += 10 + colourTable(src[at+9])
			if at >= len(src) {
				return truncated
			}
			literalBits := int(src[at])
			at++
			if !subBlocks() {
				return truncated
			}
			if n := lzwPixels(data, literalBits, w*h); n < w*h {
				return upscale.Explain(upscale.ErrUnsupportedImage, "Frame %d of the GIF holds %d of its %d×%d pixels; the file is truncated or corrupt.", frame, n, w, h)
			}
			frame++
		default: // not a block: the decoder judges the rest
			return nil
		}
	}
	return nil
}

// colourTable is the size of the colour table a GIF descriptor's packed
// fields announce.
func colourTable(packed byte) int {
	if packed&0x80 == 0 {
		return 0
	}
	return 3 << (packed&7 + 1)
}

// lzwPixels counts the pixels a GIF frame's LZW data (GIF89a, appendix
// F) decodes to, up to limit, without making them: the length of each
// code's string is tracked, not the string. It stops at the end code, at
// the end of the data, or at a code no decoder can read.
func lzwPixels(data []byte, literalBits int, limit int64) int64 {
	if literalBits < 1 || literalBits > 11 {
		return 0
	}
	const maxCodes = 1 << 12
	clear := 1 << literalBits
	end := clear + 1
	var lengths [maxCodes]int64 // of each code's string
	for literal := range clear {
		lengths[literal] = 1
	}
	width, next, prev := literalBits+1, clear+2, -1
	var bits uint64
	held, at := 0, 0
	var n int64
	for n < limit {
		for held < width && at < len(data) {
			bits |= uint64(data[at]) << held
			held += 8
			at++
		}
		if held < width {
			return n
		}
		code := int(bits & (1<<width - 1))
		bits >>= width
		held -= width
		var length int64
		switch {
		case code == clear:
			width, next, prev = literalBits+1, clear+2, -1
			continue
		case code == end:
			return n
		case code < next:
			length = lengths[code]
		case code == next && prev >= 0: // the string before, and its first pixel again
			length = lengths[prev] + 1
		default:
			return n
		}
		n += length
		if prev >= 0 && next < maxCodes {
			lengths[next] = lengths[prev] + 1
			if next++; next == 1<<width && width < 12 {
				width++
			}
		}
		prev = code
	}
	return n
}
