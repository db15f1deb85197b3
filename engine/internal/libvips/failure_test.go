package libvips

import (
	"context"
	"errors"
	"testing"

	"github.com/h2non/bimg"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/internal/quality"
	"github.com/upscalekit/upscale/upscaletest"
)

// TestFailureBlamesTheEngineForAGoodFile: when the pipeline fails on a
// file that decodes whole as the pipeline reads it, the failure is the
// engine's (502, retrying is safe) for a PNG, a JPEG turned or not, a
// WebP, an AVIF and an animated GIF, whatever the failure's message names
// (libheif's encoder shares its decoder's "heif" domain); only a file that
// does not decode is the caller's. The strict decode once refused every
// JPEG and PNG, and answered every engine failure on them as a corrupt
// source.
func TestFailureBlamesTheEngineForAGoodFile(t *testing.T) {
	png := quality.CelImage(1, 64).PNG(t)
	convert := func(to bimg.ImageType) []byte {
		out, err := bimg.NewImage(png).Convert(to)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, c := range []struct {
		name   string
		src    []byte
		frames int
	}{
		{"PNG", png, 1}, {"JPEG", convert(bimg.JPEG), 1}, {"turned JPEG", upscaletest.WithEXIFOrientation(convert(bimg.JPEG), 6), 1},
		{"WebP", convert(bimg.WEBP), 1}, {"AVIF", convert(bimg.AVIF), 1}, {"animated GIF", SolidAnimation(t, 8, 8, 0, 100, 200), 3},
	} {
		meta, err := bimg.NewImage(c.src).Metadata()
		if err != nil {
			t.Fatal(err)
		}
		if err := decodeStrictly(c.src, meta, c.frames); err != nil {
			t.Errorf("%s: the strict decode refused a good file: %v", c.name, err)
		}
		for _, engineErr := range []error{errors.New("vips_sink_disc: out of memory"), errors.New("heif: Unsupported feature: encoder")} {
			if err := failure(context.Background(), c.src, meta, c.frames, engineErr); !errors.Is(err, upscale.ErrUpstream) {
				t.Errorf("%s: the engine's failure %q on a good file is %v, want ErrUpstream", c.name, engineErr, err)
			}
		}
	}
	meta, err := bimg.NewImage(png).Metadata()
	if err != nil {
		t.Fatal(err)
	}
	if err := failure(context.Background(), png[:len(png)/2], meta, 1, errors.New("vips_sink_disc: out of memory")); !errors.Is(err, upscale.ErrUnsupportedImage) {
		t.Errorf("a failure on a truncated PNG is %v, want ErrUnsupportedImage", err)
	}
}
