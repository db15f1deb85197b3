package libvips_test

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"math/rand/v2"
	"testing"

	"github.com/h2non/bimg"

	"github.com/upscalekit/upscale"
	vips "github.com/upscalekit/upscale/engine/internal/libvips"
)

// TestWebPMatchesLibvips: webp.c converts the pixels to YUV in bands of
// rows, so that it can stop between them, and its bitstream is still
// vips_webpsave's, byte for byte: for odd sizes, many bands, and an alpha
// that is opaque in some bands (rows 0-127 and from 256) and not in others.
// The sources are lossless WebP, so that the result is WebP too.
func TestWebPMatchesLibvips(t *testing.T) {
	e := vips.New(vips.Options{Concurrency: 1})
	for _, tc := range []struct {
		name        string
		w, h        int
		alpha       bool
		transparent image.Rectangle // alpha below 255 here
	}{
		{"RGB", 301, 517, false, image.Rectangle{}},
		{"RGBA", 333, 481, true, image.Rect(40, 130, 200, 211)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, err := bimg.NewImage(noisyPicture(t, tc.w, tc.h, tc.alpha, tc.transparent)).Process(bimg.Options{Type: bimg.WEBP, Lossless: true})
			if err != nil {
				t.Fatal(err)
			}
			px, err := e.Decode(context.Background(), src, upscale.Params{Scale: 1})
			if err != nil {
				t.Fatal(err)
			}
			ours, err := e.Encode(context.Background(), px, 1, upscale.Photo)
			if err != nil {
				t.Fatal(err)
			}
			theirs, err := bimg.NewImage(src).Process(bimg.Options{Type: bimg.WEBP, Quality: 90})
			if err != nil {
				t.Fatal(err)
			}
			for _, chunk := range []string{"VP8 ", "ALPH"} {
				a, b := webpChunkNamed(ours.Data, chunk), webpChunkNamed(theirs, chunk)
				if !bytes.Equal(a, b) {
					t.Errorf("%q chunk: %d bytes, libvips's %d, differ", chunk, len(a), len(b))
				}
			}
			if webpChunkNamed(ours.Data, "VP8 ") == nil {
				t.Error("no lossy bitstream")
			}
			if hasAlpha := webpChunkNamed(ours.Data, "ALPH") != nil; hasAlpha != !tc.transparent.Empty() {
				t.Errorf("alpha chunk present: %v", hasAlpha)
			}
		})
	}
}

// noisyPicture is a w×h PNG of noise over a gradient, RGB, or RGBA with
// alpha 255 outside transparent and varying inside it.
func noisyPicture(t *testing.T, w, h int, alpha bool, transparent image.Rectangle) []byte {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	r := rand.New(rand.NewPCG(3, 4))
	for y := range h {
		for x := range w {
			i := img.PixOffset(x, y)
			for c := range 3 {
				img.Pix[i+c] = uint8(x*160/w + c*20 + r.IntN(64))
			}
			img.Pix[i+3] = 255
			if image.Pt(x, y).In(transparent) {
				img.Pix[i+3] = uint8(r.IntN(255))
			}
		}
	}
	var out image.Image = img
	if !alpha {
		rgb := image.NewRGBA(img.Bounds()) // opaque: PNG writes RGB
		copy(rgb.Pix, img.Pix)
		out = rgb
	}
	var b bytes.Buffer
	if err := png.Encode(&b, out); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
