package libvips_test

import (
	"context"
	"errors"
	"image"
	"image/color"
	"testing"

	"github.com/h2non/bimg"

	"github.com/upscalekit/upscale"
	vips "github.com/upscalekit/upscale/engine/internal/libvips"
	"github.com/upscalekit/upscale/internal/quality"
	"github.com/upscalekit/upscale/upscaletest"
)

// TestEstimateMemory: the estimate follows the pipeline (the encoded result
// twice; the decoded source too when it is denoised or turned), reads
// 16-bit sources as such, refuses what Upscale refuses, and bounds the real
// result of a photograph.
func TestEstimateMemory(t *testing.T) {
	e := vips.New(vips.Options{})
	rgb := encodePNG(t, gradient(40, 30, 255))
	grey16 := image.NewGray16(image.Rect(0, 0, 40, 30))
	grey16.SetGray16(3, 4, color.Gray16{Y: 40000})
	jpg := encodeJPEG(t, gradient(40, 30, 255))
	webp, webpAlpha := convert(t, jpg, bimg.WEBP), convert(t, encodePNG(t, gradient(40, 30, 128)), bimg.WEBP)
	const source = 40 * 30 * 3
	cases := []struct {
		name string
		src  []byte
		opts upscale.Params
		want int64
	}{
		{"PNG×2", rgb, upscale.Params{Scale: 2}, 2 * storedPNGBytes(4*source, 60)},
		{"PNG×4", rgb, upscale.Params{Scale: 4}, 2 * storedPNGBytes(16*source, 120)},
		{"PNG16", encodePNG(t, grey16), upscale.Params{Scale: 2}, 2 * storedPNGBytes(4*40*30*2, 60)},
		{"JPEG", jpg, upscale.Params{Scale: 2}, 2 * 4 * source / 2},
		{"JPEGDenoised", jpg, upscale.Params{Scale: 2, Denoise: upscale.DenoiseMax}, 2*4*source/2 + source},
		{"JPEGTurned", upscaletest.WithEXIFOrientation(jpg, 6), upscale.Params{Scale: 2}, 2*4*source/2 + source},
		// A WebP result: encoded twice, the raw frame held whole, and its
		// YUV planes (80×60 luma, two 40×30 chroma planes).
		{"WebP", webp, upscale.Params{Scale: 2}, 2*4*source/2 + 4*source + 80*60 + 2*40*30},
		{"WebPWithAlpha", webpAlpha, upscale.Params{Scale: 2}, 2*4*40*30*4/2 + 4*40*30*4 + 2*80*60 + 2*40*30},
	}
	for _, c := range cases {
		got, err := e.EstimateMemory(c.src, c.opts)
		if err != nil || got != c.want {
			t.Errorf("%s: EstimateMemory = %d, %v; want %d", c.name, got, err, c.want)
		}
	}
	if _, err := e.EstimateMemory([]byte("not an image"), upscale.Params{Scale: 2}); !errors.Is(err, upscale.ErrUnsupportedImage) {
		t.Errorf("EstimateMemory of text: %v, want ErrUnsupportedImage", err)
	}

	butterfly := quality.SetFile(t, "Set5/butterfly.png")
	header, err := e.Header(butterfly, upscale.Params{Scale: 4})
	if err != nil {
		t.Fatal(err)
	}
	img, err := e.Upscale(context.Background(), butterfly, upscale.Params{Scale: 4})
	if err != nil {
		t.Fatal(err)
	}
	if bound := header.EncodedBytes(); int64(len(img.Data)) > bound {
		t.Errorf("butterfly ×4 encodes to %d bytes, more than the %d the estimate allows", len(img.Data), bound)
	}
}

// storedPNGBytes is the size of a PNG's raw rows with their filter bytes and
// a 256th for the framing of rows stored uncompressed.
func storedPNGBytes(raw, rows int64) int64 { return raw + rows + raw/256 }

// TestEstimateWholeDecoders: an AVIF source is decoded whole by libheif
// and its AVIF result encoded whole, so its estimate holds the raw source
// and the raw result on top of what a JPEG of the same size needs.
func TestEstimateWholeDecoders(t *testing.T) {
	png := encodePNG(t, gradient(40, 30, 255))
	e := vips.New(vips.Options{})
	estimate := func(kind bimg.ImageType) int64 {
		src, err := bimg.NewImage(png).Process(bimg.Options{Type: kind, Quality: 90})
		if err != nil {
			t.Fatal(err)
		}
		need, err := e.EstimateMemory(src, upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone})
		if err != nil {
			t.Fatal(err)
		}
		return need
	}
	const source, result = 40 * 30 * 3, 80 * 60 * 3
	if jpeg, avif := estimate(bimg.JPEG), estimate(bimg.AVIF); avif-jpeg != source+result {
		t.Errorf("AVIF needs %d bytes, a JPEG %d: want %d more, the raw source and result", avif, jpeg, source+result)
	}
}
