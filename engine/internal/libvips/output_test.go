package libvips_test

import (
	"context"
	"errors"
	"testing"

	"github.com/h2non/bimg"

	"github.com/upscalekit/upscale"
	vips "github.com/upscalekit/upscale/engine/internal/libvips"
)

// TestAskedFormat: a result is written in the format asked, whatever the
// source's, at the size asked; a format that cannot keep the source is
// refused before any pixel is decoded: transparency as JPEG, an animation
// in another format than its own.
func TestAskedFormat(t *testing.T) {
	e := vips.New(vips.Options{})
	opaque := encodePNG(t, gradient(40, 30, 255))
	jpegData := encodeJPEG(t, gradient(40, 30, 255))
	for _, tc := range []struct {
		name   string
		src    []byte
		format upscale.Format
		want   string
	}{
		{"PNGAsJPEG", opaque, upscale.FormatJPEG, "image/jpeg"},
		{"JPEGAsPNG", jpegData, upscale.FormatPNG, "image/png"},
		{"JPEGAsWebP", jpegData, upscale.FormatWebP, "image/webp"},
		{"PNGAsAVIF", opaque, upscale.FormatAVIF, "image/avif"},
		{"JPEGAsJPEG", jpegData, upscale.FormatJPEG, "image/jpeg"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img, err := e.Upscale(context.Background(), tc.src, upscale.Params{Scale: 2, Format: tc.format})
			if err != nil {
				t.Fatal(err)
			}
			if img.ContentType != tc.want || "image/"+bimg.NewImage(img.Data).Type() != tc.want {
				t.Errorf("%s, %s bytes; want %s", img.ContentType, bimg.NewImage(img.Data).Type(), tc.want)
			}
			if size, err := bimg.Size(img.Data); err != nil || size.Width != 80 || size.Height != 60 || img.Width != 80 {
				t.Errorf("result %+v (%v), reported %dx%d; want 80x60", size, err, img.Width, img.Height)
			}
		})
	}
	transparent := encodePNG(t, gradient(40, 30, 0))
	if _, err := e.Upscale(context.Background(), transparent, upscale.Params{Scale: 2, Format: upscale.FormatJPEG}); !errors.Is(err, upscale.ErrUnsupportedImage) {
		t.Errorf("transparency as JPEG: %v, want ErrUnsupportedImage", err)
	}
	if img, err := e.Upscale(context.Background(), transparent, upscale.Params{Scale: 2, Format: upscale.FormatWebP}); err != nil || img.ContentType != "image/webp" {
		t.Errorf("transparency as WebP: %v, %v", img.ContentType, err)
	}
	animation := noisyGIF(t, 16, 12, 3)
	for _, f := range []upscale.Format{upscale.FormatPNG, upscale.FormatWebP, upscale.FormatJPEG} {
		if _, err := e.Upscale(context.Background(), animation, upscale.Params{Scale: 2, Format: f}); !errors.Is(err, upscale.ErrUnsupportedImage) {
			t.Errorf("an animated GIF as %s: %v, want ErrUnsupportedImage", f, err)
		}
	}
	if h, err := e.Header(opaque, upscale.Params{Scale: 2, Format: upscale.FormatWebP}); err != nil || !h.WebP || !h.WholeResult || h.PNG {
		t.Errorf("the header of a PNG asked as WebP: %+v, %v; want a WebP result's estimate", h, err)
	}
}

// TestAskedQuality: a lossy result is smaller at a lower quality; a
// lossless one is the same at any.
func TestAskedQuality(t *testing.T) {
	e := vips.New(vips.Options{})
	src := noisyPNG(t, 64, 48)
	size := func(p upscale.Params) int {
		t.Helper()
		img, err := e.Upscale(context.Background(), src, p)
		if err != nil {
			t.Fatal(err)
		}
		return len(img.Data)
	}
	for _, f := range []upscale.Format{upscale.FormatJPEG, upscale.FormatWebP, upscale.FormatAVIF} {
		low, high := size(upscale.Params{Scale: 2, Format: f, Quality: 20}), size(upscale.Params{Scale: 2, Format: f, Quality: 95})
		if low >= high {
			t.Errorf("%s: %d bytes at quality 20, %d at 95; want fewer at 20", f, low, high)
		}
	}
	if a, b := size(upscale.Params{Scale: 2, Quality: 20}), size(upscale.Params{Scale: 2, Quality: 95}); a != b {
		t.Errorf("a PNG result: %d bytes at quality 20, %d at 95; want the same", a, b)
	}
}
