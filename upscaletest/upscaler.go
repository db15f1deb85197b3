package upscaletest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"math"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
)

// TestUpscaler checks that an Upscaler enlarges JPEG and PNG to exactly
// Scale times the source, keeps the format, refuses non-images with
// ErrUnsupportedImage and gives up on a done context.
func TestUpscaler(t *testing.T, newUpscaler func(t *testing.T) upscale.Upscaler) {
	src := TestImage(24, 16)
	inputs := []struct {
		name, contentType string
		data              []byte
		decode            func([]byte) (image.Image, error)
	}{
		{"PNG", "image/png", encode(t, "png", src), func(b []byte) (image.Image, error) { return png.Decode(bytes.NewReader(b)) }},
		{"JPEG", "image/jpeg", encode(t, "jpeg", src), func(b []byte) (image.Image, error) { return jpeg.Decode(bytes.NewReader(b)) }},
	}
	for _, in := range inputs {
		for _, scale := range upscale.Scales() {
			t.Run(fmt.Sprintf("%s/x%d", in.name, scale), func(t *testing.T) {
				u := newUpscaler(t)
				img, err := u.Upscale(context.Background(), in.data, upscale.Params{Scale: scale, ImageType: upscale.Photo, Denoise: upscale.DenoiseMax})
				if err != nil {
					t.Fatalf("Upscale: %v", err)
				}
				if img.ContentType != in.contentType {
					t.Errorf("content type %q, want %q", img.ContentType, in.contentType)
				}
				out, err := in.decode(img.Data)
				if err != nil {
					t.Fatalf("result does not decode as %s: %v", in.name, err)
				}
				want := image.Pt(24*scale, 16*scale)
				if got := out.Bounds().Size(); got != want || img.Width != want.X || img.Height != want.Y {
					t.Errorf("result %v (reported %dx%d), want %v", got, img.Width, img.Height, want)
				}
			})
		}
	}

	t.Run("SourcePixels", func(t *testing.T) {
		sizer, ok := newUpscaler(t).(upscale.SizeReader)
		if !ok {
			t.Skip("not a SizeReader")
		}
		for _, in := range inputs {
			if pixels, err := sizer.SourcePixels(in.data); err != nil || pixels != 24*16 {
				t.Errorf("SourcePixels(%s) = %d, %v; want 24×16", in.name, pixels, err)
			}
		}
		if _, err := sizer.SourcePixels([]byte("not an image at all")); !errors.Is(err, upscale.ErrUnsupportedImage) {
			t.Errorf("SourcePixels of a non-image: %v, want ErrUnsupportedImage", err)
		}
	})

	t.Run("InspectSource", func(t *testing.T) {
		u := newUpscaler(t)
		inspector, ok := u.(upscale.SourceInspector)
		if !ok {
			t.Skip("not a SourceInspector")
		}
		for _, in := range inputs {
			for _, params := range []upscale.Params{{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone}, {Scale: 8, ImageType: upscale.Anime, Denoise: upscale.DenoiseMax}} {
				report, err := inspector.InspectSource(in.data, params)
				if err != nil {
					t.Fatalf("InspectSource(%s): %v", in.name, err)
				}
				if want := estimates(t, u, in.data, params); report != want {
					t.Errorf("InspectSource(%s, %+v) = %+v; want what the estimators say alone, %+v", in.name, params, report, want)
				}
			}
		}
		if _, err := inspector.InspectSource([]byte("not an image at all"), upscale.Params{Scale: 2}); !errors.Is(err, upscale.ErrUnsupportedImage) {
			t.Errorf("InspectSource of a non-image: %v, want ErrUnsupportedImage", err)
		}
	})

	t.Run("ErrUnsupportedImage", func(t *testing.T) {
		u := newUpscaler(t)
		for _, data := range [][]byte{nil, []byte("not an image at all"), []byte("GIF89a\x01\x00\x01\x00\x00\x00\x00;")} {
			if _, err := u.Upscale(context.Background(), data, upscale.Params{Scale: 2}); !errors.Is(err, upscale.ErrUnsupportedImage) {
				t.Errorf("Upscale(%q): err = %v, want ErrUnsupportedImage", data, err)
			}
		}
	})

	t.Run("ContextDone", func(t *testing.T) {
		u := newUpscaler(t)
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		defer cancel()
		if _, err := u.Upscale(ctx, inputs[0].data, upscale.Params{Scale: 2}); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Upscale past its deadline: err = %v, want context.DeadlineExceeded", err)
		}
	})
}

// estimates is what u's SizeReader, MemoryEstimator and DurationEstimator
// each say of src, as a SourceReport.
func estimates(t *testing.T, u upscale.Upscaler, src []byte, params upscale.Params) upscale.SourceReport {
	t.Helper()
	var r upscale.SourceReport
	var err error
	if sizer, ok := u.(upscale.SizeReader); ok {
		if r.Pixels, err = sizer.SourcePixels(src); err != nil {
			t.Fatal(err)
		}
	}
	if estimator, ok := u.(upscale.MemoryEstimator); ok {
		if r.Memory, err = estimator.EstimateMemory(src, params); err != nil {
			t.Fatal(err)
		}
	}
	if estimator, ok := u.(upscale.DurationEstimator); ok {
		expected, known, err := estimator.EstimateDuration(src, params)
		if err != nil {
			t.Fatal(err)
		}
		if known {
			r.Duration = expected
		}
	}
	return r
}

// TestImage returns a w×h opaque image with smooth gradients and a sharp
// edge, for feeding to Upscalers.
func TestImage(w, h int) *image.NRGBA {
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			c := color.NRGBA{uint8(x * 255 / w), uint8(y * 255 / h), 96, 255}
			if x > w/2 {
				c.B = 224
			}
			img.SetNRGBA(x, y, c)
		}
	}
	return img
}

// TestImagePNG is TestImage(w, h) as a PNG file.
func TestImagePNG(t *testing.T, w, h int) []byte { return encode(t, "png", TestImage(w, h)) }

func encode(t *testing.T, format string, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	var err error
	if format == "jpeg" {
		err = jpeg.Encode(&b, img, &jpeg.Options{Quality: 95})
	} else {
		err = png.Encode(&b, img)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// PixelUpscaler is a pure-Go Upscaler that enlarges PNG and JPEG by
// repeating pixels. It is for tests of code that needs an Upscaler without
// libvips; its output is exact in size and crude in looks, and its
// Image.Engine "repeat;scale=N". A result over MaxOutputPixels (zero: no
// limit) is fitted, as the engines fit theirs (Image.Fitted).
type PixelUpscaler struct {
	MaxOutputPixels int64
}

var _ upscale.SizeReader = PixelUpscaler{}

// SourcePixels implements upscale.SizeReader.
func (PixelUpscaler) SourcePixels(src []byte) (int64, error) {
	cfg, format, err := image.DecodeConfig(bytes.NewReader(src))
	if err != nil || (format != "png" && format != "jpeg") {
		return 0, fmt.Errorf("%w: %v", upscale.ErrUnsupportedImage, err)
	}
	return int64(cfg.Width) * int64(cfg.Height), nil
}

// Upscale implements upscale.Upscaler.
func (u PixelUpscaler) Upscale(ctx context.Context, src []byte, opts upscale.Params) (upscale.Image, error) {
	if err := ctx.Err(); err != nil {
		return upscale.Image{}, err
	}
	img, format, err := image.Decode(bytes.NewReader(src))
	if err != nil || (format != "png" && format != "jpeg") {
		return upscale.Image{}, fmt.Errorf("%w: %v", upscale.ErrUnsupportedImage, err)
	}
	b := img.Bounds()
	w, h, fitted := b.Dx()*opts.Scale, b.Dy()*opts.Scale, false
	if most := u.MaxOutputPixels; most > 0 && int64(w)*int64(h) > most {
		factor := math.Sqrt(float64(most) / float64(b.Dx()*b.Dy()))
		w, h, fitted = int(float64(b.Dx())*factor), int(float64(b.Dy())*factor), true
	}
	out := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			out.Set(x, y, img.At(b.Min.X+x*b.Dx()/w, b.Min.Y+y*b.Dy()/h))
		}
	}
	var buf bytes.Buffer
	contentType := "image/png"
	if format == "jpeg" {
		contentType = "image/jpeg"
		err = jpeg.Encode(&buf, out, &jpeg.Options{Quality: 90})
	} else {
		err = png.Encode(&buf, out)
	}
	if err != nil {
		return upscale.Image{}, fmt.Errorf("%w: encode: %v", upscale.ErrUpstream, err)
	}
	return upscale.Image{Data: buf.Bytes(), ContentType: contentType, Width: w, Height: h, Fitted: fitted,
		Engine: fmt.Sprintf("repeat;scale=%d", opts.Scale)}, nil
}

// GatedUpscaler is a PixelUpscaler that holds each image until Gate lets
// it through (a send lets one image go, a close all of them) or its
// context ends, first telling Entered, when set, that an image arrived:
// for tests of what happens while the engine works.
type GatedUpscaler struct {
	PixelUpscaler
	Entered chan struct{}
	Gate    chan struct{}
}

// Upscale implements upscale.Upscaler.
func (u GatedUpscaler) Upscale(ctx context.Context, src []byte, opts upscale.Params) (upscale.Image, error) {
	if u.Entered != nil {
		u.Entered <- struct{}{}
	}
	select {
	case <-u.Gate:
	case <-ctx.Done():
		return upscale.Image{}, ctx.Err()
	}
	return u.PixelUpscaler.Upscale(ctx, src, opts)
}
