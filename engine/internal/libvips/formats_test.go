package libvips_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"image/gif"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/h2non/bimg"

	"github.com/upscalekit/upscale"
	vips "github.com/upscalekit/upscale/engine/internal/libvips"
)

// convert makes src (a PNG) into a file of kind with libvips's own savers,
// as a camera or a CDN would make one.
func convert(t *testing.T, src []byte, kind bimg.ImageType) []byte {
	t.Helper()
	out, err := bimg.NewImage(src).Process(bimg.Options{Type: kind, Quality: 90})
	if err != nil {
		t.Fatalf("make a %s: %v", bimg.ImageTypeName(kind), err)
	}
	return out
}

// TestAnimationFramesAlone: each frame of an animation is enlarged alone,
// by Upscale and by Decode and Encode, so a black frame between white ones
// stays black to its edges rather than taking grey from its neighbours.
func TestAnimationFramesAlone(t *testing.T) {
	e := vips.New(vips.Options{})
	src := vips.SolidAnimation(t, 8, 6, 255, 0, 255)
	px, err := e.Decode(context.Background(), src, upscale.Params{Scale: 2})
	if err != nil {
		t.Fatal(err)
	}
	if px.Frames != 3 || px.Width != 8 || px.Height != 18 || px.Frame(1).Height != 6 || px.Frame(1).Pix[0] != 0 {
		t.Fatalf("decoded %d frames of %dx%d (frame 1 %d rows from %d), want 3 of 8x6 from 0",
			px.Frames, px.Width, px.Height, px.Frame(1).Height, px.Frame(1).Pix[0])
	}
	viaPixels, err := e.Encode(context.Background(), px, 2, upscale.Photo)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := e.Upscale(context.Background(), src, upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseMax})
	if err != nil {
		t.Fatal(err)
	}
	for name, img := range map[string]upscale.Image{"Encode": viaPixels, "Upscale": whole} {
		g, err := gif.DecodeAll(bytes.NewReader(img.Data))
		if err != nil || img.ContentType != "image/gif" || img.Width != 16 || img.Height != 12 || len(g.Image) != 3 {
			t.Fatalf("%s: %s %dx%d, %v; want a GIF of 3 frames of 16x12", name, img.ContentType, img.Width, img.Height, err)
		}
		if err := solidFrame(g.Image[0], 255); err != nil {
			t.Errorf("%s: frame 0: %v", name, err)
		}
		if err := solidFrame(g.Image[1], 0); err != nil { // a later frame may cover only what changed: here, all of it
			t.Errorf("%s: frame 1: %v", name, err)
		}
	}
}

// TestAnimationNotTurned: an animation's EXIF orientation is not applied,
// as browsers do not apply it. A 16×12 animated WebP whose EXIF says to
// turn it a quarter (6) is enlarged ×2 into 32×24 frames, and the result
// does not pass the orientation on for a viewer to apply.
func TestAnimationNotTurned(t *testing.T) {
	e := vips.New(vips.Options{})
	src := webpWith(t, motionWebP(t), 16, 12, nil, exifBlock("Jane Doe", "", "", 6), nil)
	if meta, err := bimg.NewImage(src).Metadata(); err != nil || meta.Orientation != 6 {
		t.Fatalf("libvips reads the test's source's orientation as %d (%v), want 6", meta.Orientation, err)
	}
	if h, err := e.Header(src, upscale.Params{Scale: 2}); err != nil || h.Frames != 3 || h.Result != image.Pt(32, 24) {
		t.Errorf("header: %+v, %v; want 3 frames of 32x24", h, err)
	}
	img, err := e.Upscale(context.Background(), src, upscale.Params{Scale: 2})
	if err != nil {
		t.Fatal(err)
	}
	if img.Width != 32 || img.Height != 24 || !bytes.Contains(img.Data, []byte("Jane Doe")) {
		t.Errorf("the result is %dx%d, with its EXIF %v; want 32x24 frames with the source's EXIF", img.Width, img.Height, bytes.Contains(img.Data, []byte("Jane Doe")))
	}
	if h, err := e.Header(img.Data, upscale.Params{Scale: 1}); err != nil || h.Frames != 3 || h.Result != image.Pt(32, 24) {
		t.Errorf("the result read back: %+v, %v; want 3 frames of 32x24", h, err)
	}
	if meta, err := bimg.NewImage(img.Data).Metadata(); err != nil || meta.Orientation > 1 {
		t.Errorf("the result's orientation is %d (%v), want none or 1", meta.Orientation, err)
	}
}

// solidFrame checks that every pixel of a frame covering 16x12 is level.
func solidFrame(frame *image.Paletted, level uint8) error {
	if frame.Bounds() != image.Rect(0, 0, 16, 12) {
		return fmt.Errorf("covers %v", frame.Bounds())
	}
	for y := range 12 {
		for x := range 16 {
			if r, g, b, _ := frame.At(x, y).RGBA(); r>>8 != uint32(level) || g>>8 != uint32(level) || b>>8 != uint32(level) {
				return fmt.Errorf("pixel (%d,%d) is %d,%d,%d", x, y, r>>8, g>>8, b>>8)
			}
		}
	}
	return nil
}

// TestAnimationLimits: the limits count every frame. An animation of more
// frames than MaxFrames, or whose frames hold more than MaxSourcePixels in
// all, or whose enlarged frames one above the other would be taller than
// libvips makes an image, is refused with a 400 before it is decoded; one
// whose result would be over MaxOutputPixels in all is fitted, every
// frame, and stays an animation, never a still.
func TestAnimationLimits(t *testing.T) {
	src := vips.SolidAnimation(t, 100, 50, 0, 128, 255) // 15000 pixels in all
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts vips.Options
	}{
		{"MaxFrames", vips.Options{MaxFrames: 2}},
		{"MaxSourcePixels", vips.Options{MaxSourcePixels: 14999}},
	} {
		_, err := vips.New(tc.opts).Upscale(ctx, src, upscale.Params{Scale: 2})
		if !errors.Is(err, upscale.ErrImageTooLarge) {
			t.Errorf("%s: %v, want ErrImageTooLarge", tc.name, err)
		}
	}
	e := vips.New(vips.Options{MaxOutputPixels: 4 * 15000}) // ×2 fits exactly, ×4 does not
	h, err := e.Header(src, upscale.Params{Scale: 4})
	if err != nil || h.Frames != 3 || !h.Fitted || h.Result != image.Pt(200, 100) {
		t.Fatalf("header: %+v, %v; want 3 frames fitted to 200x100", h, err)
	}
	img, err := e.Upscale(ctx, src, upscale.Params{Scale: 4})
	if err != nil {
		t.Fatal(err)
	}
	g, err := gif.DecodeAll(bytes.NewReader(img.Data))
	if err != nil || len(g.Image) != 3 || !img.Fitted || g.Config.Width != 200 || g.Config.Height != 100 {
		t.Errorf("×4: %d frames of %dx%d, fitted %v, %v; want 3 of 200x100, fitted", len(g.Image), g.Config.Width, g.Config.Height, img.Fitted, err)
	}
	// The frames are enlarged one above the other in one image, of at most
	// 10,000,000 rows (libvips's largest): 1000 frames of 1×2501 make
	// 5,002,000 at ×2, and 10,004,000 at ×4, refused before decoding.
	e = vips.New(vips.Options{})
	tall := vips.SolidAnimation(t, 1, 2501, make([]uint8, 1000)...)
	if h, err := e.Header(tall, upscale.Params{Scale: 2}); err != nil || h.Frames != 1000 {
		t.Errorf("1000 frames of 1x2501 ×2: %+v, %v; want them admitted", h, err)
	}
	if _, err := e.Upscale(ctx, tall, upscale.Params{Scale: 4}); !errors.Is(err, upscale.ErrImageTooLarge) || !strings.Contains(err.Error(), "rows") {
		t.Errorf("1000 frames of 1x2501 ×4: %v; want ErrImageTooLarge for the rows", err)
	}
	two, err := e.EstimateMemory(vips.SolidAnimation(t, 100, 50, 0, 255), upscale.Params{Scale: 2})
	if err != nil {
		t.Fatal(err)
	}
	four, err := e.EstimateMemory(vips.SolidAnimation(t, 100, 50, 0, 255, 0, 255), upscale.Params{Scale: 2})
	if err != nil || four != 2*two {
		t.Errorf("EstimateMemory: %d for four frames (%v), want twice the %d of two", four, err, two)
	}
}

// tiffHeader is a little-endian grey TIFF of w×h pixels of bits bits and
// sampleFormat (1 unsigned, 3 float) in one uncompressed strip of
// rowsPerStrip rows, whose data is a few bytes: a pixel flood, a strip
// that claims far more than the file holds, or samples the pipeline does
// not read.
func tiffHeader(w, h, rowsPerStrip, bits, sampleFormat uint32) []byte {
	entries := [][3]uint32{ // tag, type (3 SHORT, 4 LONG), value
		{256, 4, w}, {257, 4, h}, {258, 3, bits}, {259, 3, 1}, {262, 3, 1},
		{273, 4, 8 + 2 + 10*12 + 4}, {277, 3, 1}, {278, 4, rowsPerStrip}, {279, 4, w * rowsPerStrip * bits / 8}, {339, 3, sampleFormat},
	}
	b := []byte("II*\x00\x08\x00\x00\x00")
	b = binary.LittleEndian.AppendUint16(b, uint16(len(entries)))
	for _, e := range entries {
		b = binary.LittleEndian.AppendUint16(b, uint16(e[0]))
		b = binary.LittleEndian.AppendUint16(b, uint16(e[1]))
		b = binary.LittleEndian.AppendUint32(b, 1)
		b = binary.LittleEndian.AppendUint32(b, e[2])
	}
	b = binary.LittleEndian.AppendUint32(b, 0) // no next IFD
	return append(b, 1, 2, 3, 4, 5, 6, 7, 8)
}

// TestHostileNewFormats: corrupt or hostile HEIC, AVIF, GIF and TIFF
// files, TIFFs of samples the pipeline does not read (floats) and AVIF
// animations are refused with a 400 (unsupported_image or
// image_too_large), quickly, and the sizes a header claims are refused
// before any pixel is decoded: HEIC and AVIF images whose streams code
// more than they declare, and GIF frames whose data ends early, by the
// header check's own sentence, so no decoder saw them.
func TestHostileNewFormats(t *testing.T) {
	heic := convert(t, encodePNG(t, gradient(64, 48, 255)), bimg.HEIF)
	bomb := bytes.Clone(heic)
	at := bytes.Index(bomb, []byte("ispe"))
	if at < 0 {
		t.Fatal("the HEIC has no ispe box")
	}
	binary.BigEndian.PutUint32(bomb[at+8:], 60000) // width, after the box's version and flags
	binary.BigEndian.PutUint32(bomb[at+12:], 60000)
	avifSequence := convert(t, encodePNG(t, gradient(64, 48, 255)), bimg.AVIF)
	copy(avifSequence[8:12], "avis") // the major brand of an AVIF animation
	lyingHEIC, lyingAVIF := readFile(t, "testdata/hostile/lying.heic"), readFile(t, "testdata/hostile/lying.avif")
	// The short GIF that other packages' tests send through the handler.
	shortFrames := readFile(t, "testdata/hostile/short-frames.gif")
	if !bytes.Equal(shortFrames, shortGIF(t, 2, 64, 64, 32)) {
		t.Error("testdata/hostile/short-frames.gif is not what shortGIF makes")
	}
	e := vips.New(vips.Options{})
	for _, tc := range []struct {
		name string
		src  []byte
		// refusal is part of the sentence the header check refuses the
		// file with, before any decoder sees it; empty for files a
		// decoder refuses.
		refusal string
	}{
		// Files whose images declare 64×64 pixels (ispe) while their
		// streams code 8192×8192: libheif decoded the HEIC in 4-5 s and
		// 430 MiB, unseen by the limits, and a grid of such tiles for as
		// long as it had tiles.
		{"LyingHEIC", lyingHEIC, "declares 64×64 pixels but its stream codes 8192×8192"},
		{"LyingAVIF", lyingAVIF, "declares 64×64 pixels but its stream codes 8192×8192"},
		{"LyingGrid2x2", vips.HEIFGrid(t, lyingHEIC, 2, 2, image.Pt(128, 128)), "declares 64×64 pixels but its stream codes 8192×8192"},
		{"LyingGrid63x64", vips.HEIFGrid(t, lyingHEIC, 63, 64, image.Pt(4096, 4032)), "declares 64×64 pixels but its stream codes 8192×8192"},
		// One honest 8192×8192 tile laid out as a 1×1 image: libheif
		// decoded all 67 MP of it, in 7.1 s and 289 MiB.
		{"OverhangingGrid1x1", readFile(t, "testdata/hostile/overhanging-grid-1x1.heic"), "reach 8191 pixels past its edge"},
		// An AVIF whose item list gives its image twice, as av01 and as
		// Exif (FuzzUpscaleImage found it): the size checks read the
		// second, libheif the first, and decoded it for 6 s.
		{"DuplicateItem", readFile(t, "testdata/hostile/duplicate-item.avif"), "its item list gives item 1 twice"},
		// 50 frames of 1000×1000 whose LZW data gives 1000×500 pixels
		// each, their blocks intact: libnsgif filled the rest with black.
		{"ShortGIFFrames", shortGIF(t, 50, 1000, 1000, 500), "Frame 1 of the GIF holds 500000 of its 1000×1000 pixels"},
		{"ShortGIFFile", shortFrames, "Frame 1 of the GIF holds 2048 of its 64×64 pixels"},
		{"TruncatedHEIC", heic[:len(heic)/2], ""},
		{"HEICBomb", bomb, ""},
		{"TIFFFlood", tiffHeader(100_000, 100_000, 100_000, 8, 1), ""},
		{"TIFFHugeStrip", tiffHeader(4000, 4000, 4000, 8, 1), ""},
		{"FloatTIFF", tiffHeader(8, 8, 8, 32, 3), ""},
		{"AVIFSequence", avifSequence, ""},
		{"NotAnyFormat", []byte("\x00\x00\x00\x18ftypmp42\x00\x00\x00\x00mp42isom"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, err := e.Upscale(context.Background(), tc.src, upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone})
			if !errors.Is(err, upscale.ErrUnsupportedImage) && !errors.Is(err, upscale.ErrImageTooLarge) {
				t.Errorf("err = %v, want unsupported_image or image_too_large", err)
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("refused after %v", took)
			}
			if err != nil && !strings.Contains(err.Error(), tc.refusal) {
				t.Errorf("err = %v, want the header's refusal %q", err, tc.refusal)
			}
			// Header decodes no pixel: the files it refuses never
			// reach libheif's or libnsgif's decoding.
			if _, err := e.Header(tc.src, upscale.Params{Scale: 2}); tc.refusal != "" && (err == nil || !strings.Contains(err.Error(), tc.refusal)) {
				t.Errorf("Header: %v, want the refusal %q", err, tc.refusal)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// readFile is the file at path.
func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// shortGIF is an animated GIF of frames frames of w×h pixels, each of
// whose image data is the LZW data of a w×given frame: complete blocks,
// ending early.
func shortGIF(t *testing.T, frames, w, h, given int) []byte {
	t.Helper()
	var one bytes.Buffer
	if err := gif.Encode(&one, gradient(w, given, 255), &gif.Options{NumColors: 256}); err != nil {
		t.Fatal(err)
	}
	// The encoded frame: header, screen, global table, descriptor, then
	// its LZW code size and data sub-blocks up to the trailer.
	enc := one.Bytes()
	table := 3 << (enc[10]&7 + 1)
	descriptor := 13 + table
	if enc[descriptor] != 0x2C {
		t.Fatalf("the encoded GIF has a %#x block where its frame should be", enc[descriptor])
	}
	data := enc[descriptor+10 : len(enc)-1]
	out := append([]byte(nil), enc[:descriptor]...)
	binary.LittleEndian.PutUint16(out[8:], uint16(h)) // the screen's height
	for range frames {
		frame := append([]byte(nil), enc[descriptor:descriptor+10]...)
		binary.LittleEndian.PutUint16(frame[7:], uint16(h))
		out = append(append(out, frame...), data...)
	}
	return append(out, 0x3B)
}

// TestHEIFGrids: a HEIC whose image is a grid of HEVC tiles, as phones
// make their photos, is enlarged from its declared size, cropped where its
// tiles overhang it, while what decoding it makes (its tiles whole) is
// what the limits, the memory estimate and SourcePixels count. A grid
// whose tiles decode to more than maxDecodedPixels allows is refused from
// its header.
func TestHEIFGrids(t *testing.T) {
	tile := heicTile(t)
	e := vips.New(vips.Options{})
	ctx := context.Background()
	for _, out := range []image.Point{image.Pt(128, 128), image.Pt(100, 90)} {
		src := vips.HEIFGrid(t, tile, 2, 2, out)
		h, err := e.Header(src, upscale.Params{Scale: 2})
		if err != nil || h.Width != out.X || h.Height != out.Y || h.DecodedPixels != 4*64*64 {
			t.Errorf("a 2×2 grid of 64×64 tiles laid out as %v: %+v, %v; want %v, 4×64×64 decoded", out, h, err, out)
			continue
		}
		if pixels, err := e.SourcePixels(src); err != nil || pixels != 4*64*64 {
			t.Errorf("SourcePixels of the grid laid out as %v: %d, %v; want 4×64×64", out, pixels, err)
		}
		img, err := e.Upscale(ctx, src, upscale.Params{Scale: 2, ImageType: upscale.Photo})
		if err != nil || img.Width != 2*out.X || img.Height != 2*out.Y {
			t.Errorf("the grid laid out as %v enlarged ×2: %dx%d, %v; want %v", out, img.Width, img.Height, err, out.Mul(2))
		}
	}
	// Laid out as 65×65, four 64×64 tiles decode 16384 pixels for 4225
	// shown: more than 2×(4225+4225/8), the most an honest file shows.
	small := vips.New(vips.Options{MaxSourcePixels: 65 * 65})
	_, err := small.Upscale(ctx, vips.HEIFGrid(t, tile, 2, 2, image.Pt(65, 65)), upscale.Params{Scale: 2})
	if !errors.Is(err, upscale.ErrImageTooLarge) || !strings.Contains(err.Error(), "decoding it makes 16384 pixels") {
		t.Errorf("a grid decoding 16384 pixels for 4225, with MaxSourcePixels 4225: %v; want image_too_large for what decoding makes", err)
	}
}

// heicTile is a HEIC file of a 64×64 image without alpha, whose image
// heifGrid takes for its tiles.
func heicTile(t *testing.T) []byte {
	t.Helper()
	return convert(t, encodeJPEG(t, gradient(64, 64, 255)), bimg.HEIF)
}

// BenchmarkHostileRefusal: how long Upscale takes to refuse the files that
// lie about their size, from their headers (TestHostileNewFormats asserts
// that it does): the 63×64 grid would otherwise hold an engine slot for
// hours.
func BenchmarkHostileRefusal(b *testing.B) {
	t := &testing.T{}
	e := vips.New(vips.Options{})
	names, err := filepath.Glob("testdata/hostile/*")
	if err != nil {
		b.Fatal(err)
	}
	for _, path := range names {
		name, src := filepath.Base(path), readFile(t, path)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := e.Upscale(context.Background(), src, upscale.Params{Scale: 2}); !errors.Is(err, upscale.ErrUnsupportedImage) {
					b.Fatal(err)
				}
			}
		})
	}
	short := shortGIF(t, 50, 1000, 1000, 500)
	b.Run("short-gif-frames", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := e.Upscale(context.Background(), short, upscale.Params{Scale: 2}); !errors.Is(err, upscale.ErrUnsupportedImage) {
				b.Fatal(err)
			}
		}
	})
}
