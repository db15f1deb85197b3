package libvips

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/binary"
	"errors"
	"hash/adler32"
	"hash/crc32"
	"image"
	"image/png"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/h2non/bimg"
	"github.com/klauspost/compress/flate"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/internal/quality"
)

// storedSource is an image for packPNG's tests: its samples, from 0 to
// 65535 whatever the depth, and the PNG of them that libvips would write
// at zlib level 0.
type storedSource struct {
	width, height, channels, depth int
	samples                        []uint16
}

// newStoredSource makes a w×h image of smooth gradients, with noise on
// them in its right half and its bottom half, as an enlarged photo has,
// and a run of one colour at its top left, as a cel image has.
func newStoredSource(w, h, channels, depth int) storedSource {
	s := storedSource{w, h, channels, depth, make([]uint16, w*h*channels)}
	rng := rand.New(rand.NewPCG(uint64(w), uint64(h*channels*depth)))
	top := 1<<depth - 1
	for y := range h {
		for x := range w {
			for c := range channels {
				v := (x*(c+1)*7 + y*5) % (top + 1)
				if x > w/2 || y > h/2 {
					v = min(top, max(0, v+rng.IntN(9)-4))
				} else if y < h/4 {
					v = top / 3
				}
				s.samples[(y*w+x)*channels+c] = uint16(v * (65535 / top))
			}
		}
	}
	return s
}

// file is s as libvips writes it at level 0: IHDR, a chunk that must stay
// where it is before the image data and one after, the rows unfiltered
// and stored (Go's blocks of 65535 bytes), in IDAT chunks of idatSize
// bytes.
func (s storedSource) file(t testing.TB, idatSize int) []byte {
	return storedFile(s.header(), s.stream(t), idatSize)
}

// stream is s's rows unfiltered, as a zlib stream of stored blocks.
func (s storedSource) stream(t testing.TB) []byte {
	t.Helper()
	rows := make([]byte, 0, s.height*(1+len(s.samples)/s.height*s.depth/8))
	for y := range s.height {
		rows = append(rows, 0)
		for _, v := range s.samples[y*s.width*s.channels : (y+1)*s.width*s.channels] {
			if s.depth == 16 {
				rows = binary.BigEndian.AppendUint16(rows, v)
			} else {
				rows = append(rows, byte(v>>8))
			}
		}
	}
	var z bytes.Buffer
	zw, err := zlib.NewWriterLevel(&z, zlib.NoCompression)
	if err != nil {
		t.Fatal(err)
	}
	zw.Write(rows)
	zw.Close()
	return z.Bytes()
}

// storedFile is a PNG of header (IHDR's body) and stream, its image data,
// in IDAT chunks of idatSize bytes, between two text chunks.
func storedFile(header, stream []byte, idatSize int) []byte {
	file := appendChunk(bytes.Clone(pngSignature), "IHDR", header)
	file = appendChunk(file, "tEXt", []byte("Comment\x00before"))
	for data := stream; len(data) > 0; data = data[min(idatSize, len(data)):] {
		file = appendChunk(file, "IDAT", data[:min(idatSize, len(data))])
	}
	file = appendChunk(file, "tEXt", []byte("Comment\x00after"))
	return appendChunk(file, "IEND", nil)
}

// pack is packPNG's result for file.
func pack(t testing.TB, file []byte) []byte {
	t.Helper()
	packed, err := packPNG(context.Background(), file)
	if err != nil {
		t.Fatal(err)
	}
	out, err := packed.layout(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// header is the body of s's IHDR.
func (s storedSource) header() []byte {
	header := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, uint32(s.width)), uint32(s.height))
	return append(header, byte(s.depth), map[int]byte{1: 0, 2: 4, 3: 2, 4: 6}[s.channels], 0, 0, 0)
}

// appendChunk appends a chunk of kind with data to file.
func appendChunk(file []byte, kind string, data []byte) []byte {
	file = binary.BigEndian.AppendUint32(file, uint32(len(data)))
	start := len(file)
	file = append(append(file, kind...), data...)
	return binary.BigEndian.AppendUint32(file, crc32.ChecksumIEEE(file[start:]))
}

// TestPackPNG: packPNG's file decodes (image/png checks every CRC and
// the zlib checksum) to the samples of the stored one, in every kind of
// PNG libvips writes, each row Paeth-filtered, the chunks around the
// image data as they were, and the same bytes on one core as on many; a
// result of more than packPartBytes of rows is deflated in parts (LZ77
// for the flat top, Huffman codes alone for the noisy bottom) that make
// one stream. IDAT chunks of 1, 3 and 7 bytes, and of 65541 for the
// large ones, split the stored blocks' headers between chunks.
func TestPackPNG(t *testing.T) {
	for _, tc := range []struct {
		name                           string
		width, height, channels, depth int
		idatSize                       int
	}{
		{"grey", 37, 23, 1, 8, 1},
		{"grey16", 37, 23, 1, 16, 3},
		{"grey and alpha", 37, 23, 2, 8, 7},
		{"grey and alpha 16", 37, 23, 2, 16, 1000},
		{"RGB", 37, 23, 3, 8, 7},
		{"RGB16", 37, 23, 3, 16, 3},
		{"RGBA", 37, 23, 4, 8, 1},
		{"RGBA16", 37, 23, 4, 16, 1000},
		{"one pixel", 1, 1, 3, 8, 1},
		{"one column", 1, 300, 4, 16, 7},
		{"many stored blocks", 300, 300, 3, 8, 3},
		{"RGBA in parts", 1100, 1000, 4, 8, 65541},
		{"RGBA16 in three parts", 1024, 1025, 4, 16, 65541},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := newStoredSource(tc.width, tc.height, tc.channels, tc.depth)
			stored := src.file(t, tc.idatSize)
			packed := pack(t, stored)
			cores := runtime.GOMAXPROCS(1)
			oneCore := pack(t, stored)
			runtime.GOMAXPROCS(cores)
			if !bytes.Equal(oneCore, packed) {
				t.Errorf("packed on one core and on %d, the files differ", cores)
			}
			if got, want := notImageData(t, packed), notImageData(t, stored); !bytes.Equal(got, want) {
				t.Errorf("the chunks other than IDAT are %q, want %q", got, want)
			}
			for y, row := range pngRows(t, packed) {
				if row[0] != 4 {
					t.Fatalf("row %d: filter %d, want Paeth (4)", y, row[0])
				}
			}
			if !bytes.Equal(pixelBytes(t, packed), pixelBytes(t, stored)) {
				t.Errorf("the packed file's pixels differ from the stored file's")
			}
			if tc.width*tc.height*tc.channels*tc.depth/8 > 2*packPartBytes && len(packed) >= len(stored)/2 {
				t.Errorf("%d bytes packed from %d stored; want a photo-like image less than half", len(packed), len(stored))
			}
		})
	}
}

// pixelBytes decodes file with image/png, which checks every CRC and the
// zlib checksum, and returns its samples as image/png holds them.
func pixelBytes(t *testing.T, file []byte) []byte {
	t.Helper()
	m, err := png.Decode(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	switch m := m.(type) {
	case *image.Gray:
		return m.Pix
	case *image.Gray16:
		return m.Pix
	case *image.NRGBA:
		return m.Pix
	case *image.NRGBA64:
		return m.Pix
	case *image.RGBA:
		return m.Pix
	case *image.RGBA64:
		return m.Pix
	}
	t.Fatalf("image/png decoded a %T", m)
	return nil
}

// notImageData is file without its IDAT chunks.
func notImageData(t *testing.T, file []byte) []byte {
	t.Helper()
	var out []byte
	for at := 8; at < len(file); {
		n := int(binary.BigEndian.Uint32(file[at:]))
		if string(file[at+4:at+8]) != "IDAT" {
			out = append(out, file[at:at+12+n]...)
		}
		at += 12 + n
	}
	return out
}

// TestEncodePacksPNG: Encode's PNG (a learned engine's result) goes
// through packPNG, not libvips's encoder: its zlib stream starts with
// packPNG's header (78 01; libvips writes 78 5e at level 2) and every row
// is Paeth-filtered; Upscale's, from libvips alone, starts otherwise.
func TestEncodePacksPNG(t *testing.T) {
	src := quality.SetFile(t, "Set5/bird.png")
	e := New(Options{})
	px, err := e.Decode(context.Background(), src, upscale.Params{Scale: 2})
	if err != nil {
		t.Fatal(err)
	}
	encoded, err := e.Encode(context.Background(), px, 2, upscale.Photo)
	if err != nil {
		t.Fatal(err)
	}
	upscaled, err := e.Upscale(context.Background(), src, upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone})
	if err != nil {
		t.Fatal(err)
	}
	if got := zlibHeader(t, encoded.Data); got != [2]byte{0x78, 0x01} {
		t.Errorf("Encode's zlib header is % x, want packPNG's 78 01", got)
	}
	if got := zlibHeader(t, upscaled.Data); got == [2]byte{0x78, 0x01} {
		t.Errorf("Upscale's zlib header is % x too: the test cannot tell the encoders apart", got)
	}
	for y, row := range pngRows(t, encoded.Data) {
		if row[0] != 4 {
			t.Fatalf("row %d: filter %d, want Paeth (4)", y, row[0])
		}
	}
}

// zlibHeader is the first two bytes of file's first IDAT chunk.
func zlibHeader(t *testing.T, file []byte) [2]byte {
	t.Helper()
	for at := 8; at+12 <= len(file); {
		n := int(binary.BigEndian.Uint32(file[at:]))
		if string(file[at+4:at+8]) == "IDAT" && n >= 2 {
			return [2]byte{file[at+8], file[at+9]}
		}
		at += 12 + n
	}
	t.Fatal("no IDAT")
	return [2]byte{}
}

// TestDeflateMethod: a part's rows are deflated with LZ77's matches
// where they repeat, as flat colour's filtered rows (zeros) do, and
// with Huffman codes alone where they are a photo's small, unrepeating
// residuals.
func TestDeflateMethod(t *testing.T) {
	pk := packer{sample: make([]byte, methodSample)}
	if got, _ := pk.deflateMethod(); got != packLevel {
		t.Errorf("flat colour: method %d, want level %d", got, packLevel)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range pk.sample {
		pk.sample[i] = byte(int(rng.NormFloat64() * 3))
	}
	if got, _ := pk.deflateMethod(); got != flate.HuffmanOnly {
		t.Errorf("a photo's residuals: method %d, want Huffman codes alone (%d)", got, flate.HuffmanOnly)
	}
}

// TestPackPNGRefuses: packPNG takes only what libvips writes at level 0,
// and says what it found instead.
func TestPackPNGRefuses(t *testing.T) {
	src := newStoredSource(20, 10, 3, 8)
	stream := src.stream(t)
	stored := storedFile(src.header(), stream, 64)
	withHeader := func(set func(ihdr []byte)) []byte {
		header := src.header()
		set(header)
		return storedFile(header, stream, 64)
	}
	withStream := func(set func(stream []byte) []byte) []byte {
		return storedFile(src.header(), set(bytes.Clone(stream)), 64)
	}
	signature := func() []byte { return bytes.Clone(pngSignature) }
	for _, tc := range []struct {
		name string
		file []byte
		want string
	}{
		{"not a PNG", []byte("GIF89a"), "no signature"},
		{"deflated", quality.CelImage(2, 16).PNG(t), "not stored"},
		{"interlaced", withHeader(func(h []byte) { h[12] = 1 }), "interlace 1"},
		{"a palette", withHeader(func(h []byte) { h[9] = 3 }), "colour type 3"},
		{"rows past 64 TiB", withHeader(func(h []byte) { copy(h, "\xff\xff\xff\xff\x00\x01\x00\x00") }), "4294967295×65536"},
		{"rows past 64 TiB, the stride near 2^33", withHeader(func(h []byte) {
			copy(h, "\x40\x00\x00\x00\x80\x00\x00\x00\x10\x06") // 2^30 × 2^31 RGBA16
		}), "1073741824×2147483648"},
		{"taller than its rows", withHeader(func(h []byte) { h[7]++ }), "want 671"},
		{"a chunk cut short", stored[:len(stored)-40], "truncated chunk"},
		{"image data cut short", withStream(func(s []byte) []byte { return s[:300] }), "truncated image data"},
		{"no zlib header", withStream(func(s []byte) []byte { s[0] = 0; return s }), "no zlib header"},
		{"a preset dictionary", withStream(func(s []byte) []byte { s[1] = 0x20 | (31 - 0x7820%31); return s }), "no zlib header"},
		{"a length that does not check", withStream(func(s []byte) []byte { s[5]++; return s }), "does not check"},
		{"a row filtered", withStream(func(s []byte) []byte { s[7] = 1; return s }), "row 0 has filter 1"},
		{"no image data", appendChunk(appendChunk(signature(), "IHDR", src.header()), "IEND", nil), "no IDAT"},
		{"IHDR not first", appendChunk(signature(), "tEXt", []byte("a\x00b")), "IHDR is not first"},
		{"image data apart", appendChunk(appendChunk(appendChunk(appendChunk(signature(), "IHDR", src.header()),
			"IDAT", stream[:10]), "tEXt", []byte("a\x00b")), "IDAT", stream[10:]), "IDAT chunks apart"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := packPNG(context.Background(), tc.file)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("packPNG: %v; want an error saying %q", err, tc.want)
			}
		})
	}
}

// TestPackPNGCancelled: packPNG, and laying out its result, stop once
// their context is done.
func TestPackPNGCancelled(t *testing.T) {
	stored := newStoredSource(300, 200, 3, 8).file(t, 8192)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := packPNG(ctx, stored); !errors.Is(err, context.Canceled) {
		t.Errorf("packPNG: %v; want context.Canceled", err)
	}
	packed, err := packPNG(context.Background(), stored)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := packed.layout(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("layout: %v; want context.Canceled", err)
	}
}

// TestAdler32Join: joining two runs' checksums gives the checksum of
// both, long runs (past the modulus) and empty ones included.
func TestAdler32Join(t *testing.T) {
	data := make([]byte, 300000)
	for i := range data {
		data[i] = byte(i*i>>3 + i)
	}
	for _, cut := range []int{0, 1, 5552, 65521, 65522, 200000, len(data)} {
		first, second := data[:cut], data[cut:]
		if got, want := adler32Join(adler32.Checksum(first), adler32.Checksum(second), len(second)), adler32.Checksum(data); got != want {
			t.Errorf("cut at %d: %08x, want %08x", cut, got, want)
		}
	}
}

// TestPaethRow: paethRow predicts every byte as the specification does,
// for every left, up and upLeft, ties included, and in rows of 1, 3 and 8
// bytes a pixel, the first pixel's left and upLeft being zero.
func TestPaethRow(t *testing.T) {
	dst := make([]byte, 2)
	for i := range 1 << 24 {
		left, up, upLeft := byte(i), byte(i>>8), byte(i>>16)
		paethRow(dst, []byte{left, 0}, []byte{upLeft, up}, 1)
		if want := specPaeth(left, up, upLeft); -dst[1] != want {
			t.Fatalf("left %d, up %d, upLeft %d: predicted %d, want %d", left, up, upLeft, -dst[1], want)
		}
	}
	for _, pixelBytes := range []int{1, 3, 8} {
		row, up := make([]byte, 64), make([]byte, 64)
		for i := range row {
			row[i], up[i] = byte(i*37), byte(i*i)
		}
		got := make([]byte, len(row))
		paethRow(got, row, up, pixelBytes)
		for i := range row {
			var left, upLeft byte
			if i >= pixelBytes {
				left, upLeft = row[i-pixelBytes], up[i-pixelBytes]
			}
			if want := row[i] - specPaeth(left, up[i], upLeft); got[i] != want {
				t.Fatalf("%d bytes a pixel, byte %d: %d, want %d", pixelBytes, i, got[i], want)
			}
		}
	}
}

// specPaeth is the specification's predictor as it is written there,
// with branches, for TestPaethRow to check paethRow against.
func specPaeth(left, up, upLeft byte) byte {
	a, b, c := int(left), int(up), int(upLeft)
	p := a + b - c
	pa, pb, pc := p-a, p-b, p-c
	pa, pb, pc = max(pa, -pa), max(pb, -pb), max(pc, -pc)
	if pa <= pb && pa <= pc {
		return left
	}
	if pb <= pc {
		return up
	}
	return upLeft
}

// BenchmarkPackPNG enlarges a photo (Set14's baboon at 1000×960) and a
// cel image of the same size ×4 through the classical pipeline to a
// 15-megapixel PNG both ways, side by side: libvips's own encoder (zlib
// level 2, Paeth, one thread), as before packPNG, and packed (libvips at
// level 0, then packPNG on every core). The enlargement is the same in
// both, so the difference is the encoders'. Run it with -benchtime 1x
// -count 3 or more.
func BenchmarkPackPNG(b *testing.B) {
	photo, err := bimg.NewImage(quality.SetFile(b, "Set14/baboon.png")).Process(bimg.Options{Width: 1000, Height: 960, Force: true, Enlarge: true, Type: bimg.PNG})
	if err != nil {
		b.Fatal(err)
	}
	sources := []struct {
		name string
		png  []byte
	}{{"photo", photo}, {"cel", quality.CelImage(5, 1000).PNG(b)}}
	ways := []struct {
		name string
		f    format
	}{{"libvips", pngFormat}, {"packed", packedPNG}}
	r := recipeFor(upscale.Params{Scale: 4, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone})
	for _, src := range sources {
		b.Run(src.name, func(b *testing.B) {
			for range b.N {
				for _, way := range ways {
					start := time.Now()
					out, err := run(context.Background(), src.png, way.f, geometry{scale: 4}, r, bimg.ImageMetadata{})
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(float64(time.Since(start).Milliseconds()), way.name+"-ms")
					b.ReportMetric(float64(len(out))/(1<<20), way.name+"-MiB")
				}
			}
		})
	}
}
