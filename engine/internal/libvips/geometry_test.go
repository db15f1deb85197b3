package libvips_test

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"math"
	"testing"

	"github.com/h2non/bimg"

	"github.com/upscalekit/upscale"
	vips "github.com/upscalekit/upscale/engine/internal/libvips"
	"github.com/upscalekit/upscale/upscaletest"
)

func upscalePNG(t *testing.T, src image.Image, opts upscale.Params) image.Image {
	t.Helper()
	return upscaletest.UpscalePNG(t, vips.New(vips.Options{}), src, opts)
}

// TestSamplingIsCentred puts one bright pixel at (4, 2) of a black 9×5
// image: enlarged s times, its light must be centred where that pixel's
// centre lands, ((4 + 0.5)·s − 0.5, (2 + 0.5)·s − 0.5), not shifted by a
// fraction of a pixel as plain vips_affine leaves it.
func TestSamplingIsCentred(t *testing.T) {
	for _, scale := range upscale.Scales() {
		for _, imageType := range []upscale.ImageType{upscale.Photo, upscale.Anime} {
			src := image.NewGray(image.Rect(0, 0, 9, 5))
			src.SetGray(4, 2, color.Gray{200})
			out := upscalePNG(t, src, upscale.Params{Scale: scale, ImageType: imageType, Denoise: upscale.DenoiseNone})
			var mass, mx, my float64
			for y := range out.Bounds().Dy() {
				for x := range out.Bounds().Dx() {
					v, _, _, _ := out.At(x, y).RGBA()
					mass += float64(v)
					mx += float64(v) * float64(x)
					my += float64(v) * float64(y)
				}
			}
			wantX, wantY := 4.5*float64(scale)-0.5, 2.5*float64(scale)-0.5
			if gotX, gotY := mx/mass, my/mass; math.Abs(gotX-wantX) > 0.01 || math.Abs(gotY-wantY) > 0.01 {
				t.Errorf("×%d %s: light centred at (%.3f, %.3f), want (%.1f, %.1f)", scale, imageType, gotX, gotY, wantX, wantY)
			}
		}
	}
}

// TestEdgesExtend enlarges a flat image: every result pixel must keep the
// colour, none fades toward black at the borders.
func TestEdgesExtend(t *testing.T) {
	src := image.NewNRGBA(image.Rect(0, 0, 7, 5))
	want := color.NRGBA{200, 100, 50, 255}
	for i := range 7 * 5 {
		copy(src.Pix[4*i:], []uint8{want.R, want.G, want.B, want.A})
	}
	out := upscalePNG(t, src, upscale.Params{Scale: 4, ImageType: upscale.Photo, Denoise: upscale.DenoiseMax})
	for y := range 20 {
		for x := range 28 {
			if got := color.NRGBAModel.Convert(out.At(x, y)); got != want {
				t.Fatalf("pixel (%d, %d) = %v, want %v everywhere", x, y, got, want)
			}
		}
	}
}

// TestCMYKJPEG: a CMYK JPEG (libvips writes one through bimg) comes out as
// an sRGB JPEG of the same colour, with and without denoising.
func TestCMYKJPEG(t *testing.T) {
	src := image.NewNRGBA(image.Rect(0, 0, 16, 16))
	want := color.NRGBA{200, 40, 40, 255}
	for i := range 16 * 16 {
		copy(src.Pix[4*i:], []uint8{want.R, want.G, want.B, want.A})
	}
	cmyk, err := bimg.NewImage(encodePNG(t, src)).Process(bimg.Options{Type: bimg.JPEG, Quality: 95, Interpretation: bimg.InterpretationCMYK})
	if err != nil {
		t.Fatal(err)
	}
	if meta, _ := bimg.NewImage(cmyk).Metadata(); meta.Space != "cmyk" {
		t.Fatalf("test source is %q, want a CMYK JPEG", meta.Space)
	}
	for _, level := range []upscale.Denoise{upscale.DenoiseNone, upscale.DenoiseMax} {
		img, err := vips.New(vips.Options{}).Upscale(context.Background(), cmyk, upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: level})
		if err != nil {
			t.Fatal(err)
		}
		meta, err := bimg.NewImage(img.Data).Metadata()
		if err != nil || meta.Space != "srgb" || meta.Channels != 3 || img.ContentType != "image/jpeg" {
			t.Fatalf("denoise %s: result %+v, %v; want a 3-channel sRGB JPEG", level, meta, err)
		}
		out, _, err := image.Decode(bytes.NewReader(img.Data))
		if err != nil {
			t.Fatal(err)
		}
		got := color.NRGBAModel.Convert(out.At(16, 16)).(color.NRGBA)
		for _, d := range []int{int(got.R) - int(want.R), int(got.G) - int(want.G), int(got.B) - int(want.B)} {
			if d < -20 || d > 20 {
				t.Fatalf("denoise %s: colour %v after the CMYK round trip, want about %v", level, got, want)
			}
		}
	}
}
