package libvips_test

import (
	"context"
	"errors"
	"image"
	"os"
	"testing"
	"time"

	"github.com/h2non/bimg"

	"github.com/upscalekit/upscale"
	vips "github.com/upscalekit/upscale/engine/internal/libvips"
)

// FuzzUpscaleImage feeds the decoders (JPEG, PNG, WebP, GIF, HEIC, AVIF,
// TIFF, animated GIF and WebP) mutations of a small file of each: whatever the bytes, Upscale
// answers a result or a caller's error (unsupported_image,
// image_too_large), never an engine failure, a crash or a hang. The
// limits are small so that every input is cheap.
func FuzzUpscaleImage(f *testing.F) {
	png := encodePNG(&testing.T{}, gradient(24, 16, 128))
	f.Add(png)
	f.Add(encodeJPEG(&testing.T{}, gradient(24, 16, 255)))
	for _, kind := range []bimg.ImageType{bimg.WEBP, bimg.GIF, bimg.HEIF, bimg.AVIF, bimg.TIFF} {
		src, err := bimg.NewImage(png).Process(bimg.Options{Type: kind, Quality: 50})
		if err != nil {
			f.Fatalf("make a %s: %v", bimg.ImageTypeName(kind), err)
		}
		f.Add(src)
	}
	for _, animation := range []string{"motion.gif", "motion.webp"} {
		src, err := os.ReadFile("../../../upscaletest/testdata/formats/" + animation)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(src)
	}
	// Files that lie about their size: HEIC and AVIF images whose streams
	// code 8192×8192 while they declare 64×64, alone and as a grid's
	// tiles, an honest tile of 8192×8192 as a grid of one pixel, and a GIF
	// whose frames' data ends early; and an honest grid.
	lying := readFile(&testing.T{}, "testdata/hostile/lying.heic")
	f.Add(lying)
	f.Add(readFile(&testing.T{}, "testdata/hostile/lying.avif"))
	f.Add(vips.HEIFGrid(&testing.T{}, lying, 2, 2, image.Pt(128, 128)))
	f.Add(readFile(&testing.T{}, "testdata/hostile/lying-grid-63x64.heic"))
	f.Add(readFile(&testing.T{}, "testdata/hostile/overhanging-grid-1x1.heic"))
	f.Add(vips.HEIFGrid(&testing.T{}, heicTile(&testing.T{}), 1, 2, image.Pt(100, 40)))
	f.Add(shortGIF(&testing.T{}, 2, 40, 40, 20))
	e := vips.New(vips.Options{MaxSourcePixels: 64 * 64, MaxOutputPixels: 128 * 128, MaxSide: 256})
	f.Fuzz(func(t *testing.T, src []byte) {
		done := make(chan error, 1)
		go func() {
			_, err := e.Upscale(context.Background(), src, upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone})
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, upscale.ErrUnsupportedImage) && !errors.Is(err, upscale.ErrImageTooLarge) {
				t.Errorf("err = %v, want a result, unsupported_image or image_too_large", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Upscale still runs after 5 s")
		}
	})
}
