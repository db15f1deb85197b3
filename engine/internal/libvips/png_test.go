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
	"image/color"
	"image/png"
	"math/rand/v2"
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
// and stored, in IDAT chunks of idatSize bytes, which the stored blocks'
// headers and bodies cross.
func (s storedSource) file(t testing.TB, idatSize int) []byte {
	t.Helper()
	var rows bytes.Buffer
	for y := range s.height {
		rows.WriteByte(0)
		for _, v := range s.samples[y*s.width*s.channels : (y+1)*s.width*s.channels] {
			if s.depth == 16 {
				rows.Write(binary.BigEndian.AppendUint16(nil, v))
			} else {
				rows.WriteByte(byte(v >> 8))
			}
		}
	}
	var z bytes.Buffer
	zw, err := zlib.NewWriterLevel(&z, zlib.NoCompression)
	if err != nil {
		t.Fatal(err)
	}
	zw.Write(rows.Bytes())
	zw.Close()
	file := appendChunk(bytes.Clone(pngSignature), "IHDR", s.header())
	file = appendChunk(file, "tEXt", []byte("Comment\x00before"))
	for data := z.Bytes(); len(data) > 0; data = data[min(idatSize, len(data)):] {
		file = appendChunk(file, "IDAT", data[:min(idatSize, len(data))])
	}
	file = appendChunk(file, "tEXt", []byte("Comment\x00after"))
	return appendChunk(file, "IEND", nil)
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
// PNG libvips writes, each row Paeth-filtered, the chunks around the image
// data as they were, and the same bytes each time; a result of more
// than packPartBytes of rows is deflated in parts that make one stream.
func TestPackPNG(t *testing.T) {
	for _, tc := range []struct {
		name                           string
		width, height, channels, depth int
	}{
		{"grey", 37, 23, 1, 8},
		{"grey16", 37, 23, 1, 16},
		{"grey and alpha", 37, 23, 2, 8},
		{"grey and alpha 16", 37, 23, 2, 16},
		{"RGB", 37, 23, 3, 8},
		{"RGB16", 37, 23, 3, 16},
		{"RGBA", 37, 23, 4, 8},
		{"RGBA16", 37, 23, 4, 16},
		{"one pixel", 1, 1, 3, 8},
		{"one column", 1, 300, 4, 16},
		{"RGBA in parts", 1500, 1000, 4, 8},
		{"RGBA16 in three parts", 1201, 1003, 4, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := newStoredSource(tc.width, tc.height, tc.channels, tc.depth)
			stored := src.file(t, 1000)
			packed, err := packPNG(context.Background(), stored)
			if err != nil {
				t.Fatal(err)
			}
			again, err := packPNG(context.Background(), stored)
			if err != nil || !bytes.Equal(again, packed) {
				t.Errorf("packed twice, the files differ (%v)", err)
			}
			if got, want := notImageData(t, packed), notImageData(t, stored); !bytes.Equal(got, want) {
				t.Errorf("the chunks other than IDAT are %q, want %q", got, want)
			}
			for y, row := range pngRows(t, packed) {
				if row[0] != 4 {
					t.Fatalf("row %d: filter %d, want Paeth (4)", y, row[0])
				}
			}
			src.check(t, packed)
			if tc.width*tc.height*tc.channels*tc.depth/8 > 2*packPartBytes && len(packed) >= len(stored)/2 {
				t.Errorf("%d bytes packed from %d stored; want a photo-like image less than half", len(packed), len(stored))
			}
		})
	}
}

// check decodes file and compares every sample with s's.
func (s storedSource) check(t *testing.T, file []byte) {
	t.Helper()
	m, err := png.Decode(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if m.Bounds().Dx() != s.width || m.Bounds().Dy() != s.height {
		t.Fatalf("decoded %v, want %d×%d", m.Bounds(), s.width, s.height)
	}
	for y := range s.height {
		for x := range s.width {
			v := s.samples[(y*s.width+x)*s.channels:][:s.channels]
			var want color.NRGBA64
			switch s.channels {
			case 1:
				want = color.NRGBA64{v[0], v[0], v[0], 0xffff}
			case 2:
				want = color.NRGBA64{v[0], v[0], v[0], v[1]}
			case 3:
				want = color.NRGBA64{v[0], v[1], v[2], 0xffff}
			case 4:
				want = color.NRGBA64{v[0], v[1], v[2], v[3]}
			}
			if got := nrgba64At(m, x, y); got != want {
				t.Fatalf("pixel (%d, %d) is %v, want %v", x, y, got, want)
			}
		}
	}
}

// nrgba64At is the pixel at (x, y) of an image image/png decoded,
// exactly: not premultiplied where it has alpha.
func nrgba64At(m image.Image, x, y int) color.NRGBA64 {
	switch m := m.(type) {
	case *image.NRGBA:
		c := m.NRGBAAt(x, y)
		return color.NRGBA64{uint16(c.R) * 257, uint16(c.G) * 257, uint16(c.B) * 257, uint16(c.A) * 257}
	case *image.NRGBA64:
		return m.NRGBA64At(x, y)
	}
	c := m.(image.RGBA64Image).RGBA64At(x, y) // opaque: premultiplied is the same
	return color.NRGBA64{c.R, c.G, c.B, c.A}
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

// TestDeflateMethod: a part's rows are deflated with LZ77's matches
// where they repeat, as flat colour's filtered rows (zeros) do, and
// with Huffman codes alone where they are a photo's small, unrepeating
// residuals.
func TestDeflateMethod(t *testing.T) {
	pk := packer{rows: make([]byte, 1<<20)}
	if got := pk.deflateMethod(); got != packLevel {
		t.Errorf("flat colour: method %d, want level %d", got, packLevel)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range pk.rows {
		pk.rows[i] = byte(int(rng.NormFloat64() * 3))
	}
	if got := pk.deflateMethod(); got != flate.HuffmanOnly {
		t.Errorf("a photo's residuals: method %d, want Huffman codes alone (%d)", got, flate.HuffmanOnly)
	}
}

// TestPackPNGRefuses: packPNG takes only what libvips writes at level 0,
// and says what it found instead.
func TestPackPNGRefuses(t *testing.T) {
	src := newStoredSource(20, 10, 3, 8)
	stored := src.file(t, 64)
	deflated := quality.CelImage(2, 16).PNG(t)
	withHeader := func(set func(ihdr []byte)) []byte {
		file := bytes.Clone(stored)
		set(file[16:29])
		binary.BigEndian.PutUint32(file[29:], crc32.ChecksumIEEE(file[12:29]))
		return file
	}
	for _, tc := range []struct {
		name, file string
		want       string
	}{
		{"not a PNG", "GIF89a", "no signature"},
		{"deflated", string(deflated), "not stored"},
		{"interlaced", string(withHeader(func(h []byte) { h[12] = 1 })), "interlace 1"},
		{"a palette", string(withHeader(func(h []byte) { h[9] = 3 })), "colour type 3"},
		{"taller than its rows", string(withHeader(func(h []byte) { h[7]++ })), "want 671"},
		{"truncated", string(stored[:len(stored)-40]), "truncated"},
		{"no image data", string(appendChunk(appendChunk(bytes.Clone(pngSignature), "IHDR", src.header()), "IEND", nil)), "no IDAT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := packPNG(context.Background(), []byte(tc.file))
			if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.want)) {
				t.Errorf("packPNG: %v; want an error saying %q", err, tc.want)
			}
		})
	}
}

// TestPackPNGCancelled: packPNG stops once its context is done.
func TestPackPNGCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := packPNG(ctx, newStoredSource(300, 200, 3, 8).file(t, 8192))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("packPNG: %v; want context.Canceled", err)
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

// TestPaethRow: the predictor's choices and ties as the specification
// orders them, in 1, 3 and 8 bytes a pixel.
func TestPaethRow(t *testing.T) {
	for _, tc := range []struct{ left, up, upLeft, want byte }{
		{10, 20, 10, 20}, // p = 20: up
		{20, 10, 10, 20}, // p = 20: left
		{10, 10, 30, 10}, // p = -10: left and up tie, left first
		{50, 10, 40, 10}, // p = 20: up (10 away) before upLeft (20)
		{0, 0, 0, 0},
		{255, 0, 128, 128}, // p = 127: upLeft
		{0, 255, 255, 0},   // p = 0: left
	} {
		if got := specPaeth(tc.left, tc.up, tc.upLeft); got != tc.want {
			t.Errorf("paeth(left %d, up %d, upLeft %d) = %d, want %d", tc.left, tc.up, tc.upLeft, got, tc.want)
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
