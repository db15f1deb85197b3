package libvips

import (
	"context"
	"errors"
	"testing"
	"time"

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
		if err := decodeStrictly(context.Background(), c.src, meta, c.frames); err != nil {
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
	// A caller who goes during the decode (here, 20 ms into one of 16 MP)
	// stops it, in a fraction of the whole decode's time: the engine's
	// slot is not held for a whole decode, and the answer is the caller's
	// going, not a verdict on the file.
	large := upscaletest.TestImagePNG(t, 4000, 4000)
	meta, err = bimg.NewImage(large).Metadata()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := decodeStrictly(context.Background(), large, meta, 1); err != nil {
		t.Fatal(err)
	}
	whole := time.Since(start)
	// A second try, should a loaded machine stall the first past the bound.
	var ctx context.Context
	for try := 1; ; try++ {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		start = time.Now()
		if err := decodeStrictly(ctx, large, meta, 1); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the strict decode of 16 MP past its deadline: %v, want context.DeadlineExceeded", err)
		}
		stopped := time.Since(start)
		if stopped <= whole/2 {
			break
		}
		if try == 2 {
			t.Errorf("the strict decode stopped %v after it began, its deadline 20 ms in; the whole decode took %v", stopped, whole)
			break
		}
	}
	if err := failure(ctx, large, meta, 1, errors.New("killed")); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a failure past the deadline is %v, want context.DeadlineExceeded", err)
	}
}
