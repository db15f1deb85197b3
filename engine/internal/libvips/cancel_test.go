package libvips_test

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/color/palette"
	"image/gif"
	"image/png"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/h2non/bimg"

	"github.com/upscalekit/upscale"
	vips "github.com/upscalekit/upscale/engine/internal/libvips"
)

// TestCancelLatency: once its context is done, a call returns within tens
// of milliseconds wherever its pipeline is: decoding, measuring the noise,
// denoising, enlarging or encoding. Noisy PNGs decode and compress slowly,
// the worst case for the strips libvips hands its encoders: libvips looks
// at its kill flag only between them, and compressing one took 0.1 s for
// an 8000-pixel-wide PNG, 0.4 s for a 32000-pixel-wide one, while WebP's
// encoder did not stop at all.
//
// Each pipeline is cancelled after several delays; a delay whose call
// returns later than the bound is tried up to three times and the best
// counts, so that a busy machine does not fail the test.
func TestCancelLatency(t *testing.T) {
	if testing.Short() {
		t.Skip("enlarges large images for seconds")
	}
	e := vips.New(vips.Options{Concurrency: 1})
	square := noisyPNG(t, 2000, 2000)
	wide := noisyPNG(t, 8000, 500)
	webp, err := bimg.NewImage(square).Process(bimg.Options{Type: bimg.WEBP, Quality: 90})
	if err != nil {
		t.Fatal(err)
	}
	animation := noisyGIF(t, 600, 600, 6)
	px, err := e.Decode(context.Background(), square, 4)
	if err != nil {
		t.Fatal(err)
	}
	upscaling := func(src []byte, scale int, imageType upscale.ImageType, level upscale.Denoise) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := e.Upscale(ctx, src, upscale.Params{Scale: scale, ImageType: imageType, Denoise: level})
			return err
		}
	}
	const bound = 150 * time.Millisecond
	for _, tc := range []struct {
		name   string
		run    func(context.Context) error
		delays []time.Duration // after start
		bound  time.Duration
	}{
		// Decoding, sharpening, enlarging, then mostly the encoder.
		{"PNG/x4/photo/none", upscaling(square, 4, upscale.Photo, upscale.DenoiseNone), ms(30, 300, 1000, 3000), bound},
		// The source in memory, its noise measured twice, denoised tile
		// by tile, enlarged and encoded.
		{"PNG/x2/anime/max", upscaling(square, 2, upscale.Anime, upscale.DenoiseMax), ms(30, 150, 300, 450, 700, 1500), bound},
		// 32000-pixel-wide strips.
		{"PNG/wide/x4/photo/none", upscaling(wide, 4, upscale.Photo, upscale.DenoiseNone), ms(1000, 3000), bound},
		{"Decode", func(ctx context.Context) error {
			_, err := e.Decode(ctx, square, 1)
			return err
		}, ms(10, 100, 200), bound},
		{"Encode/x4/photo", func(ctx context.Context) error {
			_, err := e.Encode(ctx, px, 4, upscale.Photo)
			return err
		}, ms(30, 1000, 3000), bound},
		// libwebp converting the pixels to YUV (a second at 64
		// megapixels), then encoding, which it reports by the percent.
		// An animation: each frame enlarged in turn into the strip, then
		// the GIF encoder's palettes, which stops between frames only:
		// libimagequant cannot be stopped while it quantises one (up to
		// about 1 s for these 1200×1200 frames on two cores).
		{"GIF/animated/x2/photo/none", upscaling(animation, 2, upscale.Photo, upscale.DenoiseNone), ms(100, 500, 1000, 2000), 2 * time.Second},
		{"WebP/x2/photo/none", upscaling(webp, 2, upscale.Photo, upscale.DenoiseNone), ms(300, 600, 900, 1200, 1500), bound},
		{"WebP/x4/photo/none", upscaling(webp, 4, upscale.Photo, upscale.DenoiseNone), ms(500, 1000, 1500, 2000, 2500, 3000, 3500, 4000), bound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var all []time.Duration
			for _, delay := range tc.delays {
				best := time.Duration(-1)
				for try := 0; try < 3 && (best < 0 || best > tc.bound); try++ {
					latency, ok := cancelAfter(t, tc.run, delay)
					if !ok {
						break
					}
					t.Logf("cancelled %v in: returned %v later", delay, latency.Round(100*time.Microsecond))
					all = append(all, latency)
					if best < 0 || latency < best {
						best = latency
					}
				}
				if best > tc.bound {
					t.Errorf("cancelled %v in: returned %v later, want at most %v", delay, best, tc.bound)
				}
			}
			if len(all) == 0 {
				t.Fatalf("finished before every cancel (%v)", tc.delays)
			}
			slices.Sort(all)
			t.Logf("%d cancels: returned %v to %v later, median %v", len(all), all[0], all[len(all)-1], all[len(all)/2])
		})
	}
}

// cancelAfter runs run and cancels its context after delay. It returns how
// long run then took to return, and false if run returned first.
func cancelAfter(t *testing.T, run func(context.Context) error, delay time.Duration) (time.Duration, bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	time.Sleep(delay)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
		return 0, false
	default:
	}
	cancelled := time.Now()
	cancel()
	err := <-done
	latency := time.Since(cancelled)
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled or a result", err)
	}
	return latency, true
}

// noisyPNG is a w×h RGB PNG of a gradient under strong noise, which
// neither decodes nor compresses quickly and which the denoise levels
// filter.
func noisyPNG(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	r := rand.New(rand.NewPCG(1, 2))
	for i := range img.Pix {
		if i%4 == 3 {
			img.Pix[i] = 255
		} else {
			img.Pix[i] = uint8(i/4%w*192/w + r.IntN(64))
		}
	}
	var b bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// noisyGIF is an animated GIF of frames frames of w×h pixels of noise in
// Plan 9's palette.
func noisyGIF(t *testing.T, w, h, frames int) []byte {
	t.Helper()
	r := rand.New(rand.NewPCG(3, 4))
	anim := &gif.GIF{}
	for range frames {
		frame := image.NewPaletted(image.Rect(0, 0, w, h), palette.Plan9)
		for i := range frame.Pix {
			frame.Pix[i] = uint8(r.IntN(len(palette.Plan9)))
		}
		anim.Image, anim.Delay = append(anim.Image, frame), append(anim.Delay, 10)
	}
	var b bytes.Buffer
	if err := gif.EncodeAll(&b, anim); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func ms(delays ...int) []time.Duration {
	out := make([]time.Duration, len(delays))
	for i, d := range delays {
		out[i] = time.Duration(d) * time.Millisecond
	}
	return out
}
