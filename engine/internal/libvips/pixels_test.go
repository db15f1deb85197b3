package libvips_test

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/color"
	_ "image/png"
	"strings"
	"testing"

	"github.com/upscalekit/upscale"
	vips "github.com/upscalekit/upscale/engine/internal/libvips"
	"github.com/upscalekit/upscale/internal/quality"
	"github.com/upscalekit/upscale/upscaletest"
)

// TestDecodeEncodeIsUpscale: decoding to memory and encoding with a
// classical enlargement is the same pipeline as Upscale without
// denoising, byte for byte for every kind of opaque source, pixel for
// pixel where Encode packs its PNG on every core (packedPNG) and Upscale
// has libvips deflate it; with alpha, whose premultiplied colour Pixels
// rounds to 16 bits, within one level.
func TestDecodeEncodeIsUpscale(t *testing.T) {
	grey16 := image.NewGray16(image.Rect(0, 0, 10, 6))
	for i := range grey16.Pix {
		grey16.Pix[i] = uint8(i * 37)
	}
	sources := map[string][]byte{
		"PNG RGBA":       encodePNG(t, gradient(12, 9, 0)),
		"PNG RGB":        encodePNG(t, gradient(12, 9, 255)),
		"PNG Gray16":     encodePNG(t, grey16),
		"JPEG":           encodeJPEG(t, gradient(16, 8, 255)),
		"JPEG rotated 6": upscaletest.WithEXIFOrientation(encodeJPEG(t, gradient(16, 8, 255)), 6),
	}
	e := vips.New(vips.Options{})
	for name, src := range sources {
		for _, scale := range []int{1, 2, 4} {
			px, err := e.Decode(context.Background(), src, upscale.Params{Scale: scale})
			if err != nil {
				t.Fatalf("%s: Decode: %v", name, err)
			}
			got, err := e.Encode(context.Background(), px, scale, upscale.Anime)
			if err != nil {
				t.Fatalf("%s: Encode: %v", name, err)
			}
			if scale == 1 {
				if got.Width != px.Width || got.Height != px.Height {
					t.Errorf("%s: encoded %dx%d from %dx%d", name, got.Width, got.Height, px.Width, px.Height)
				}
				continue
			}
			want, err := e.Upscale(context.Background(), src, upscale.Params{Scale: scale, ImageType: upscale.Anime, Denoise: upscale.DenoiseNone})
			if err != nil {
				t.Fatal(err)
			}
			if got.ContentType != want.ContentType {
				t.Errorf("%s ×%d: Decode and Encode give %s, Upscale %s", name, scale, got.ContentType, want.ContentType)
			}
			if bytes.Equal(got.Data, want.Data) {
				continue
			}
			switch {
			case strings.Contains(name, "RGBA"):
				if d := maxLevelDiff(t, got.Data, want.Data); d > 1 {
					t.Errorf("%s ×%d: Decode and Encode differ from Upscale by %d levels, want at most 1", name, scale, d)
				}
			case got.ContentType == "image/png":
				if x, y, differ := firstDifference(t, got.Data, want.Data); differ {
					t.Errorf("%s ×%d: Decode and Encode differ from Upscale at (%d, %d)", name, scale, x, y)
				}
			default:
				t.Errorf("%s ×%d: Decode and Encode give %d bytes, Upscale %d", name, scale, len(got.Data), len(want.Data))
			}
		}
	}
}

// firstDifference is the first pixel where two encoded images of the same
// size differ in any of their 16 bits a sample.
func firstDifference(t *testing.T, a, b []byte) (x, y int, differ bool) {
	t.Helper()
	ia, _, errA := image.Decode(bytes.NewReader(a))
	ib, _, errB := image.Decode(bytes.NewReader(b))
	if errA != nil || errB != nil {
		t.Fatalf("decode: %v, %v", errA, errB)
	}
	if ia.Bounds() != ib.Bounds() {
		t.Fatalf("bounds %v, %v", ia.Bounds(), ib.Bounds())
	}
	for y := ia.Bounds().Min.Y; y < ia.Bounds().Max.Y; y++ {
		for x := ia.Bounds().Min.X; x < ia.Bounds().Max.X; x++ {
			if color.RGBA64Model.Convert(ia.At(x, y)) != color.RGBA64Model.Convert(ib.At(x, y)) {
				return x, y, true
			}
		}
	}
	return 0, 0, false
}

// maxLevelDiff is the largest difference of one channel of one pixel
// between two encoded images of the same size, in 8-bit levels of their
// unpremultiplied colour.
func maxLevelDiff(t *testing.T, a, b []byte) int {
	t.Helper()
	ia, _, errA := image.Decode(bytes.NewReader(a))
	ib, _, errB := image.Decode(bytes.NewReader(b))
	if errA != nil || errB != nil || ia.Bounds() != ib.Bounds() {
		t.Fatalf("decode: %v, %v; bounds %v, %v", errA, errB, ia.Bounds(), ib.Bounds())
	}
	most := 0
	for y := ia.Bounds().Min.Y; y < ia.Bounds().Max.Y; y++ {
		for x := ia.Bounds().Min.X; x < ia.Bounds().Max.X; x++ {
			ca, cb := color.NRGBAModel.Convert(ia.At(x, y)).(color.NRGBA), color.NRGBAModel.Convert(ib.At(x, y)).(color.NRGBA)
			for _, d := range []int{int(ca.R) - int(cb.R), int(ca.G) - int(cb.G), int(ca.B) - int(cb.B), int(ca.A) - int(cb.A)} {
				most = max(most, d, -d)
			}
		}
	}
	return most
}

// TestDecodeUpright: Decode applies the EXIF orientation and premultiplies
// alpha, in 16-bit samples whatever the source's depth.
func TestDecodeUpright(t *testing.T) {
	e := vips.New(vips.Options{})
	px, err := e.Decode(context.Background(), upscaletest.WithEXIFOrientation(encodeJPEG(t, gradient(16, 8, 255)), 6), upscale.Params{Scale: 2})
	if err != nil {
		t.Fatal(err)
	}
	if px.Width != 8 || px.Height != 16 || px.Bands != 3 || px.Alpha || px.Pix[0]%257 != 0 {
		t.Errorf("rotated JPEG: %dx%d, %d bands, alpha %v, first sample %d; want 8x16, 3, false, an 8-bit value times 257", px.Width, px.Height, px.Bands, px.Alpha, px.Pix[0])
	}
	half := image.NewNRGBA64(image.Rect(0, 0, 2, 1))
	half.SetNRGBA64(0, 0, color.NRGBA64{R: 65535, A: 32768})
	px, err = e.Decode(context.Background(), encodePNG(t, half), upscale.Params{Scale: 2})
	if err != nil {
		t.Fatal(err)
	}
	if px.Bands != 4 || !px.Alpha || px.Pix[0] < 32767 || px.Pix[0] > 32769 || px.Pix[3] != 32768 {
		t.Errorf("16-bit RGBA: %d bands, alpha %v, first pixel %v; want 4, true, red premultiplied to 32768", px.Bands, px.Alpha, px.Pix[:4])
	}
}

// TestDecodeChecksLimits: the limits apply to the final scale before
// any pixel is decoded, a result past them is fitted when Encode makes it,
// and a corrupt file is the caller's fault.
func TestDecodeChecksLimits(t *testing.T) {
	e := vips.New(vips.Options{MaxOutputPixels: 1000})
	src := encodePNG(t, gradient(12, 9, 255))
	if _, err := e.Decode(context.Background(), src, upscale.Params{Scale: 2}); err != nil {
		t.Errorf("24x18 result: %v", err)
	}
	px, err := e.Decode(context.Background(), src, upscale.Params{Scale: 4})
	if err != nil {
		t.Fatalf("48x36 result past 1000 pixels: %v, want it fitted", err)
	}
	if img, err := e.Encode(context.Background(), px, 2, upscale.Photo); err != nil || !img.Fitted || img.Width != 36 || img.Height != 27 {
		t.Errorf("48x36 result past 1000 pixels: %dx%d, fitted %v, %v; want 36x27, fitted", img.Width, img.Height, img.Fitted, err)
	}
	if _, err := vips.New(vips.Options{MaxOutputPixels: 100}).Decode(context.Background(), src, upscale.Params{Scale: 2}); !errors.Is(err, upscale.ErrImageTooLarge) {
		t.Errorf("12x9 with results of 100 pixels at most: err = %v, want ErrImageTooLarge", err)
	}
	if _, err := e.Decode(context.Background(), src[:len(src)/2], upscale.Params{Scale: 2}); !errors.Is(err, upscale.ErrUnsupportedImage) {
		t.Errorf("truncated PNG: err = %v, want ErrUnsupportedImage", err)
	}
}

// TestJPEGQuality: Decode reads the quality a JPEG was saved at; other
// sources have none.
func TestJPEGQuality(t *testing.T) {
	e := vips.New(vips.Options{})
	butterfly := quality.LoadSet(t, "Set5")[2]
	for _, tc := range []struct {
		src  []byte
		want int
	}{{quality.EncodeJPEG(t, butterfly, 60), 60}, {quality.EncodeJPEG(t, butterfly, 95), 95}, {butterfly.PNG(t), 0}} {
		px, err := e.Decode(context.Background(), tc.src, upscale.Params{Scale: 2})
		if err != nil {
			t.Fatal(err)
		}
		if q, ok := px.JPEGQuality(); q != tc.want || ok != (tc.want > 0) {
			t.Errorf("JPEGQuality() = %d, %v; want %d", q, ok, tc.want)
		}
	}
}
