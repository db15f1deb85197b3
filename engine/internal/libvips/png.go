package libvips

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/adler32"
	"hash/crc32"
	"io"
	"runtime"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/flate"
)

// Encode's PNG results are written in two steps. libvips writes the file
// with every row unfiltered and stored (zlib level 0), which costs it
// little; packPNG then Paeth-filters the rows and deflates them in parts
// on every core, keeping every other chunk libvips wrote (the profile,
// the EXIF block libvips rebuilds, the resolution) byte for byte.
// libvips filters and deflates on one thread: the 15-megapixel result
// of SPAN ×4 took it about a second, a quarter of the request.

// packLevel is the deflate level packPNG compresses with LZ77's matches
// at, klauspost's level 2: on one core it deflated the Paeth-filtered
// rows of Set14's baboon at 4000×3840 (46 MB) at 188 MB/s to 16.97 MiB,
// where compress/flate's level 1 did 98 MB/s to 18.22 MiB and its level
// 2 55 MB/s to 16.99 MiB. Huffman codes alone (deflateMethod) did 588
// MB/s to 15.27 MiB.
const packLevel = 2

// packPartBytes is about how many bytes of rows a part of packPNG's work
// takes. Each part's deflate starts without a window: in parts of 4 MiB
// at level 2, a 15-megapixel photo's result came out 0.01% larger than
// in one part, a cel image's 0.04%.
const packPartBytes = 4 << 20

// idatMax is the most bytes an IDAT chunk of packPNG's carries.
const idatMax = 1 << 20

var pngSignature = []byte("\x89PNG\r\n\x1a\n")

// pngChannels is the samples a pixel of each PNG colour type libvips
// writes: grey, RGB, grey and alpha, RGBA (no palette).
var pngChannels = map[byte]int{0: 1, 2: 3, 4: 2, 6: 4}

// storedPNG is a PNG whose image data is deflate's stored blocks: its
// rows, each a filter byte and the row's bytes, lie in the file whole,
// in pieces between the blocks' headers and the chunks' framing.
type storedPNG struct {
	// before holds the chunks ahead of the first IDAT, IHDR first; after,
	// those behind the last, IEND last.
	before, after []byte
	height        int
	pixelBytes    int // a pixel's bytes: how far back Paeth's left neighbour is
	rowBytes      int // a row's bytes, its filter byte left out
	pieces        []piece
}

// piece is a run of the rows' bytes in the file: data, from byte at of
// the rows.
type piece struct {
	at   int
	data []byte
}

// parseStoredPNG reads file as libvips writes a PNG at zlib level 0:
// 8 or 16 bits, not interlaced, not a palette, its IDAT chunks one zlib
// stream of stored blocks holding exactly the rows. The zlib checksum is
// not checked: libvips made the file in this process.
func parseStoredPNG(file []byte) (*storedPNG, error) {
	if !bytes.HasPrefix(file, pngSignature) {
		return nil, errors.New("png: no signature")
	}
	p := &storedPNG{}
	var idat [][]byte
	firstIDAT, afterIDAT := -1, -1
	for at := len(pngSignature); at < len(file); {
		if len(file)-at < 12 {
			return nil, errors.New("png: truncated chunk")
		}
		n := int(binary.BigEndian.Uint32(file[at:]))
		if n > len(file)-at-12 {
			return nil, errors.New("png: truncated chunk")
		}
		kind, body := string(file[at+4:at+8]), file[at+8:at+8+n]
		switch {
		case at == len(pngSignature):
			if kind != "IHDR" {
				return nil, errors.New("png: IHDR is not first")
			}
			if err := p.readHeader(body); err != nil {
				return nil, err
			}
		case kind == "IDAT":
			if afterIDAT >= 0 && afterIDAT != at {
				return nil, errors.New("png: IDAT chunks apart")
			}
			if firstIDAT < 0 {
				firstIDAT = at
			}
			idat = append(idat, body)
			afterIDAT = at + 12 + n
		}
		at += 12 + n
	}
	if firstIDAT < 0 {
		return nil, errors.New("png: no IDAT")
	}
	p.before, p.after = file[len(pngSignature):firstIDAT], file[afterIDAT:]
	return p, p.readStored(idat)
}

// readHeader takes the geometry from IHDR's body and refuses what
// packPNG does not write.
func (p *storedPNG) readHeader(ihdr []byte) error {
	if len(ihdr) != 13 {
		return errors.New("png: IHDR is not 13 bytes")
	}
	width, height := binary.BigEndian.Uint32(ihdr), binary.BigEndian.Uint32(ihdr[4:])
	depth, colour, interlace := ihdr[8], ihdr[9], ihdr[12]
	channels := pngChannels[colour]
	if channels == 0 || depth != 8 && depth != 16 || interlace != 0 {
		return fmt.Errorf("png: colour type %d, depth %d, interlace %d", colour, depth, interlace)
	}
	p.height, p.pixelBytes = int(height), channels*int(depth)/8
	// At most 2^46 bytes of rows (64 TiB), so that no count of them
	// overflows.
	stride := uint64(width)*uint64(p.pixelBytes) + 1
	if width == 0 || height == 0 || uint64(height) > (1<<46)/stride {
		return fmt.Errorf("png: %d×%d", width, height)
	}
	p.rowBytes = int(width) * p.pixelBytes
	return nil
}

// readStored finds the rows in idat, the IDAT chunks' bodies: a zlib
// header, then stored blocks, each a byte of header (a stored block
// after the zlib header or another stored block starts on a byte's
// boundary), LEN and its complement, and LEN bytes of rows.
func (p *storedPNG) readStored(idat [][]byte) error {
	s := stream{chunks: idat}
	var zlibHeader [2]byte
	if !s.read(zlibHeader[:]) || zlibHeader[0]&0x0f != 8 || zlibHeader[1]&0x20 != 0 ||
		binary.BigEndian.Uint16(zlibHeader[:])%31 != 0 {
		return errors.New("png: no zlib header")
	}
	rows := 0
	for final := false; !final; {
		var block [5]byte
		if !s.read(block[:]) {
			return errors.New("png: truncated image data")
		}
		if block[0]>>1&3 != 0 {
			return errors.New("png: image data not stored")
		}
		final = block[0]&1 == 1
		n := int(binary.LittleEndian.Uint16(block[1:]))
		if ^binary.LittleEndian.Uint16(block[3:]) != uint16(n) {
			return errors.New("png: a stored block's length does not check")
		}
		for n > 0 {
			data, ok := s.take(n)
			if !ok {
				return errors.New("png: truncated image data")
			}
			p.pieces = append(p.pieces, piece{at: rows, data: data})
			rows += len(data)
			n -= len(data)
		}
	}
	if want := p.height * (1 + p.rowBytes); rows != want {
		return fmt.Errorf("png: %d bytes of rows, want %d", rows, want)
	}
	return nil
}

// stream reads across the bodies of consecutive chunks.
type stream struct {
	chunks [][]byte
}

// take returns the next up to n bytes, within one chunk.
func (s *stream) take(n int) ([]byte, bool) {
	for len(s.chunks) > 0 && len(s.chunks[0]) == 0 {
		s.chunks = s.chunks[1:]
	}
	if len(s.chunks) == 0 {
		return nil, false
	}
	n = min(n, len(s.chunks[0]))
	out := s.chunks[0][:n]
	s.chunks[0] = s.chunks[0][n:]
	return out, true
}

// read fills dst.
func (s *stream) read(dst []byte) bool {
	for len(dst) > 0 {
		b, ok := s.take(len(dst))
		if !ok {
			return false
		}
		dst = dst[copy(dst, b):]
	}
	return true
}

// copyRows fills dst with the rows' bytes from at.
func (p *storedPNG) copyRows(dst []byte, at int) {
	i := sort.Search(len(p.pieces), func(i int) bool { return p.pieces[i].at+len(p.pieces[i].data) > at })
	for ; len(dst) > 0; i++ {
		dst = dst[copy(dst, p.pieces[i].data[at-p.pieces[i].at:]):]
		at = p.pieces[i].at + len(p.pieces[i].data)
	}
}

// packPNG packs the image data of file, a PNG as parseStoredPNG reads
// it: each row Paeth-filtered and the rows deflated in parts of about
// packPartBytes, as many at once as there are cores, every part but the
// last ending on a sync flush so that the parts' blocks make one deflate
// stream. The parts are cut by size alone, so a file packs to the same
// bytes on any machine (with the same klauspost/compress). What it
// returns holds no reference into file, whose memory the caller may free
// before packedFile.layout makes the result.
func packPNG(ctx context.Context, file []byte) (*packedFile, error) {
	p, err := parseStoredPNG(file)
	if err != nil {
		return nil, err
	}
	rowsPerPart := max(1, packPartBytes/(1+p.rowBytes))
	parts := make([]packedPart, (p.height+rowsPerPart-1)/rowsPerPart)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(parts)) {
		wg.Go(func() {
			var pk packer
			for i := int(next.Add(1)) - 1; i < len(parts); i = int(next.Add(1)) - 1 {
				from, to := i*rowsPerPart, min(p.height, (i+1)*rowsPerPart)
				parts[i] = pk.pack(ctx, p, from, to, i == len(parts)-1)
			}
		})
	}
	wg.Wait()
	packed := &packedFile{before: bytes.Clone(p.before), after: bytes.Clone(p.after), parts: parts}
	packed.checksum = 1 // adler32 of nothing
	for _, part := range parts {
		if part.err != nil {
			return nil, part.err
		}
		packed.checksum = adler32Join(packed.checksum, part.adler, part.length)
	}
	return packed, nil
}

// packedFile is a PNG's image data packed, with copies of the chunks
// around it.
type packedFile struct {
	before, after []byte
	parts         []packedPart
	checksum      uint32 // adler32 of the filtered rows
}

// packedPart is a part of the rows, filtered and deflated: its bytes,
// and the adler32 checksum and length of its filtered rows.
type packedPart struct {
	deflated []byte
	adler    uint32
	length   int
	err      error
}

// packer is one goroutine's means of packing parts: the filtered rows
// its methods are tried on, and a deflate writer for each method,
// reused from part to part.
type packer struct {
	sample  []byte
	writers map[int]*flate.Writer
}

// pack filters rows from to to of p and deflates them by the method
// deflateMethod picks for their first methodSample bytes; last ends the
// stream.
func (pk *packer) pack(ctx context.Context, p *storedPNG, from, to int, last bool) packedPart {
	stride := 1 + p.rowBytes
	up, row := make([]byte, stride), make([]byte, stride)
	if from > 0 {
		p.copyRows(up, (from-1)*stride)
	}
	filter := func(y int, dst []byte) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		p.copyRows(row, y*stride)
		if row[0] != 0 {
			return fmt.Errorf("png: row %d has filter %d, want none", y, row[0])
		}
		dst[0] = 4 // Paeth
		paethRow(dst[1:], row[1:], up[1:], p.pixelBytes)
		up, row = row, up
		return nil
	}
	sampleRows := min(to-from, max(1, methodSample/stride))
	pk.sample = slices.Grow(pk.sample[:0], sampleRows*stride)[:sampleRows*stride]
	for i := range sampleRows {
		if err := filter(from+i, pk.sample[i*stride:][:stride]); err != nil {
			return packedPart{err: err}
		}
	}
	method, sampleDeflated := pk.deflateMethod()
	// Room for the part at the sample's ratio, so that it seldom grows.
	out := bytes.NewBuffer(make([]byte, 0, sampleDeflated*(to-from)/sampleRows+64<<10))
	w, err := pk.writer(method, out)
	if err != nil {
		return packedPart{err: err}
	}
	sum := adler32.New()
	sum.Write(pk.sample)
	if _, err := w.Write(pk.sample); err != nil {
		return packedPart{err: err}
	}
	filtered := make([]byte, stride)
	for y := from + sampleRows; y < to; y++ {
		if err := filter(y, filtered); err != nil {
			return packedPart{err: err}
		}
		sum.Write(filtered)
		if _, err := w.Write(filtered); err != nil {
			return packedPart{err: err}
		}
	}
	if last {
		err = w.Close()
	} else {
		err = w.Flush()
	}
	return packedPart{deflated: out.Bytes(), adler: sum.Sum32(), length: (to - from) * stride, err: err}
}

// methodSample is how many bytes of a part's filtered rows (whole rows,
// at least one) deflateMethod tries each method on.
const methodSample = 256 << 10

// deflateMethod picks how a part is deflated, by deflating pk.sample,
// its first rows filtered, both ways and taking the smaller, whose size
// it returns too: Huffman codes alone or LZ77's matches as well
// (klauspost's level 2). A photo's filtered rows seldom repeat, so
// matches cost more bits than they save: Huffman codes alone made Set14's
// and Set5's photos at 2048² 0.5-17% smaller (baboon 10%) and took a
// third of the time; long runs of one colour, as a cel image or a chart
// has, are what matches are for (comic 10% smaller with them, ppt3 45%).
// On those images, the first 256 KiB chose as the whole did, except where
// the two came within 0.5% (face).
func (pk *packer) deflateMethod() (method, deflated int) {
	method, deflated = packLevel, -1
	for _, m := range []int{flate.HuffmanOnly, packLevel} {
		var n countingWriter
		w, err := pk.writer(m, &n)
		if err != nil {
			continue
		}
		if _, err := w.Write(pk.sample); err != nil || w.Close() != nil {
			continue
		}
		if deflated < 0 || int(n) < deflated {
			method, deflated = m, int(n)
		}
	}
	return method, max(deflated, 0)
}

// writer is pk's writer for method, writing to out.
func (pk *packer) writer(method int, out io.Writer) (*flate.Writer, error) {
	if w := pk.writers[method]; w != nil {
		w.Reset(out)
		return w, nil
	}
	w, err := flate.NewWriter(out, method)
	if err != nil {
		return nil, err
	}
	if pk.writers == nil {
		pk.writers = make(map[int]*flate.Writer)
	}
	pk.writers[method] = w
	return w, nil
}

// countingWriter counts what is written to it.
type countingWriter int

func (c *countingWriter) Write(b []byte) (int, error) {
	*c += countingWriter(len(b))
	return len(b), nil
}

// paethRow writes into dst each byte of row less its Paeth prediction
// from the byte a pixel to the left, the byte above (in up) and the byte
// above that one: the specification's predictor (whichever of the three
// is nearest left + up - upLeft, left first on a tie, then up), written
// for conditional moves rather than branches, which a photo's bytes make
// a coin's toss: 83 ms for 46 MB on a core, against 144 ms with them.
func paethRow(dst, row, up []byte, pixelBytes int) {
	n := len(row)
	dst, up = dst[:n], up[:n]
	for i := range pixelBytes {
		dst[i] = row[i] - up[i] // left and above-left are 0: the prediction is up
	}
	cur, out := row[pixelBytes:], dst[pixelBytes:]
	left, above, aboveLeft := row[:len(cur)], up[pixelBytes:], up[:len(cur)]
	out, above = out[:len(cur)], above[:len(cur)]
	for i, x := range cur {
		a, b, c := int32(left[i]), int32(above[i]), int32(aboveLeft[i])
		da, db := abs32(b-c), abs32(a-c)
		dc := abs32(a + b - 2*c)
		p := a
		if db < da {
			da, p = db, b
		}
		if dc < da {
			p = c
		}
		out[i] = x - byte(p)
	}
}

func abs32(x int32) int32 {
	sign := x >> 31
	return (x ^ sign) - sign
}

// adler32Join is the adler32 checksum of two runs of bytes one after the
// other, from the first's checksum and the second's and its length: the
// sums of the second start from the first's sum of bytes, not from 1.
func adler32Join(first, second uint32, secondLength int) uint32 {
	const mod = 65521
	a1, b1 := uint64(first&0xffff), uint64(first>>16)
	a2, b2 := uint64(second&0xffff), uint64(second>>16)
	n := uint64(secondLength) % mod
	a := (a1 + a2 + mod - 1) % mod
	b := (b1 + b2 + n*((a1+mod-1)%mod)) % mod
	return uint32(b<<16 | a)
}

// layout makes the PNG: its signature, the chunks before, the zlib
// stream (its header, the parts, the checksum) in IDAT chunks of up to
// idatMax bytes, and the chunks after. It gives up once ctx is done:
// copying into new memory is bound by the first touch of each page.
func (pp *packedFile) layout(ctx context.Context) ([]byte, error) {
	// CMF 0x78: deflate with a 32 KiB window; FLG 0x01: compressed
	// "fastest" (FLEVEL 0), and FCHECK making the pair a multiple of 31.
	const cmf, flg = 0x78, 0x01
	zlib := [][]byte{{cmf, flg}}
	for _, part := range pp.parts {
		zlib = append(zlib, part.deflated)
	}
	zlib = append(zlib, binary.BigEndian.AppendUint32(nil, pp.checksum))
	size := 0
	for _, b := range zlib {
		size += len(b)
	}
	chunks := (size + idatMax - 1) / idatMax
	out := make([]byte, 0, len(pngSignature)+len(pp.before)+size+12*chunks+len(pp.after))
	out = append(append(out, pngSignature...), pp.before...)
	s := stream{chunks: zlib}
	for size > 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n := min(size, idatMax)
		size -= n
		out = binary.BigEndian.AppendUint32(out, uint32(n))
		start := len(out)
		out = append(out, "IDAT"...)
		for n > 0 {
			b, _ := s.take(n)
			out = append(out, b...)
			n -= len(b)
		}
		out = binary.BigEndian.AppendUint32(out, crc32.ChecksumIEEE(out[start:]))
	}
	return append(out, pp.after...), nil
}
