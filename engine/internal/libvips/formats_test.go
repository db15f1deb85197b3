package libvips_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"image"
	"image/color"
	"image/gif"
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

// TestAnimationRefused: an animated GIF is refused with a clear 400, not
// flattened to its first frame.
func TestAnimationRefused(t *testing.T) {
	palette := color.Palette{color.Black, color.White}
	anim := &gif.GIF{LoopCount: 0}
	for i := range 3 {
		frame := image.NewPaletted(image.Rect(0, 0, 8, 8), palette)
		frame.SetColorIndex(i, i, 1)
		anim.Image, anim.Delay = append(anim.Image, frame), append(anim.Delay, 10)
	}
	var b bytes.Buffer
	if err := gif.EncodeAll(&b, anim); err != nil {
		t.Fatal(err)
	}
	_, err := vips.New(vips.Options{}).Upscale(context.Background(), b.Bytes(), upscale.Params{Scale: 2, ImageType: upscale.Anime, Denoise: upscale.DenoiseNone})
	if !errors.Is(err, upscale.ErrUnsupportedImage) {
		t.Errorf("an animated GIF: %v, want ErrUnsupportedImage", err)
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

// TestHostileNewFormats: corrupt or hostile HEIC and TIFF files, TIFFs of
// samples the pipeline does not read (floats) and AVIF animations are
// refused with a 400 (unsupported_image or image_too_large), quickly, and
// the sizes a header claims are refused before any pixel is decoded.
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
	e := vips.New(vips.Options{})
	for _, tc := range []struct {
		name string
		src  []byte
	}{
		{"TruncatedHEIC", heic[:len(heic)/2]},
		{"HEICBomb", bomb},
		{"TIFFFlood", tiffHeader(100_000, 100_000, 100_000, 8, 1)},
		{"TIFFHugeStrip", tiffHeader(4000, 4000, 4000, 8, 1)},
		{"FloatTIFF", tiffHeader(8, 8, 8, 32, 3)},
		{"AVIFSequence", avifSequence},
		{"NotAnyFormat", []byte("\x00\x00\x00\x18ftypmp42\x00\x00\x00\x00mp42isom")},
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
			t.Logf("refused: %v", err)
		})
	}
}
