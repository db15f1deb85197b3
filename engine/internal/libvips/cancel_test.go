package libvips_test

import (
	"bytes"
	"cmp"
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

// A cancelled call returns soon wherever its pipeline is: decoding,
// measuring the noise, denoising, enlarging or encoding. Noisy PNGs decode
// and compress slowly, the worst case for the strips libvips hands its
// encoders: libvips looks at its kill flag only between them, and
// compressing one took 0.1 s for an 8000-pixel-wide PNG, 0.4 s for a
// 32000-pixel-wide one, while WebP's encoder did not stop at all.
//
// TestCancelStops holds each pipeline to stopping, well before its end;
// BenchmarkCancelLatency measures how soon (tens of milliseconds), which a
// timed test could not hold on a shared machine.

// stopsWithin is how soon TestCancelStops wants a cancelled call back: each
// pipeline runs for seconds uncancelled, and returns within 0.2 s of a
// cancel on an idle machine.
const stopsWithin = time.Second

// cancelCase is one pipeline and the delays after its start at which it is
// cancelled: quick is a few for TestCancelStops, all the benchmark's.
type cancelCase struct {
	name       string
	run        func(context.Context) error
	quick, all []time.Duration
	// stopsWithin replaces the package's bound where a stage cannot be
	// stopped in the middle.
	stopsWithin time.Duration
}

// cancelCases builds the pipelines; each runs 2 to 8 s uncancelled on two
// cores.
func cancelCases(tb testing.TB) []cancelCase {
	tb.Helper()
	e := vips.New(vips.Options{Concurrency: 1})
	square := noisyPNG(tb, 2000, 2000)
	wide := noisyPNG(tb, 8000, 500)
	webp, err := bimg.NewImage(square).Process(bimg.Options{Type: bimg.WEBP, Quality: 90})
	if err != nil {
		tb.Fatal(err)
	}
	animation := noisyGIF(tb, 600, 600, 6)
	px, err := e.Decode(context.Background(), square, upscale.Params{Scale: 4})
	if err != nil {
		tb.Fatal(err)
	}
	upscaling := func(src []byte, scale int, imageType upscale.ImageType, level upscale.Denoise) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := e.Upscale(ctx, src, upscale.Params{Scale: scale, ImageType: imageType, Denoise: level})
			return err
		}
	}
	return []cancelCase{
		// Decoding, sharpening, enlarging, then mostly the encoder.
		{name: "PNG/x4/photo/none", run: upscaling(square, 4, upscale.Photo, upscale.DenoiseNone),
			quick: ms(30, 1000, 4000), all: ms(30, 300, 1000, 3000, 5000)},
		// The source in memory, its noise measured twice, denoised tile
		// by tile, enlarged and encoded.
		{name: "PNG/x2/anime/max", run: upscaling(square, 2, upscale.Anime, upscale.DenoiseMax),
			quick: ms(30, 450, 1500), all: ms(30, 150, 300, 450, 700, 1500)},
		// 32000-pixel-wide strips.
		{name: "PNG/wide/x4/photo/none", run: upscaling(wide, 4, upscale.Photo, upscale.DenoiseNone),
			quick: ms(1000, 3000), all: ms(1000, 3000, 5000)},
		{name: "Encode/x4/photo", run: func(ctx context.Context) error {
			_, err := e.Encode(ctx, px, 4, upscale.Photo)
			return err
		}, quick: ms(30, 3000), all: ms(30, 1000, 3000, 5000)},
		// An animation: each frame enlarged in turn into the strip, then
		// the GIF encoder's palettes, which stops between frames only:
		// libimagequant cannot be stopped while it quantises one (up to
		// about 1 s for these 1200×1200 frames on two cores).
		{name: "GIF/animated/x2/photo/none", run: upscaling(animation, 2, upscale.Photo, upscale.DenoiseNone),
			quick: ms(500, 2000), all: ms(100, 500, 1000, 2000, 4000), stopsWithin: 3 * time.Second},
		// libwebp converting the pixels to YUV (a second at 64
		// megapixels), then encoding, which it reports by the percent.
		{name: "WebP/x2/photo/none", run: upscaling(webp, 2, upscale.Photo, upscale.DenoiseNone),
			quick: ms(300, 900), all: ms(300, 600, 900, 1200, 1500)},
		{name: "WebP/x4/photo/none", run: upscaling(webp, 4, upscale.Photo, upscale.DenoiseNone),
			quick: ms(1000, 3000, 5000), all: ms(500, 1000, 1500, 2000, 2500, 3000, 3500, 4000, 5000)},
	}
}

func TestCancelStops(t *testing.T) {
	if testing.Short() {
		t.Skip("enlarges large images for seconds")
	}
	for _, tc := range cancelCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			bound := cmp.Or(tc.stopsWithin, stopsWithin)
			returned := 0
			for _, delay := range tc.quick {
				// A second try absorbs a stall of the machine itself.
				best := time.Duration(-1)
				for try := 0; try < 2 && (best < 0 || best > bound); try++ {
					latency, ok := cancelAfter(t, tc.run, delay)
					if !ok {
						break
					}
					returned++
					if best < 0 || latency < best {
						best = latency
					}
				}
				if best > bound {
					t.Errorf("cancelled %v in: returned %v later, want within %v", delay, best, bound)
				}
			}
			if returned == 0 {
				t.Fatalf("finished before every cancel (%v)", tc.quick)
			}
		})
	}
}

// BenchmarkCancelLatency reports how soon each pipeline returns once
// cancelled, over its delays: the median and the worst.
//
//	go test -run '^$' -bench CancelLatency -benchtime 1x ./engine/internal/libvips
func BenchmarkCancelLatency(b *testing.B) {
	for _, tc := range cancelCases(b) {
		b.Run(tc.name, func(b *testing.B) {
			var latencies []time.Duration
			for b.Loop() {
				for _, delay := range tc.all {
					if latency, ok := cancelAfter(b, tc.run, delay); ok {
						latencies = append(latencies, latency)
					}
				}
			}
			if len(latencies) == 0 {
				b.Fatalf("finished before every cancel (%v)", tc.all)
			}
			slices.Sort(latencies)
			b.ReportMetric(float64(latencies[len(latencies)/2].Microseconds())/1000, "median-ms")
			b.ReportMetric(float64(latencies[len(latencies)-1].Microseconds())/1000, "max-ms")
		})
	}
}

// cancelAfter runs run and cancels its context after delay. It returns how
// long run then took to return, and false if run returned first.
func cancelAfter(tb testing.TB, run func(context.Context) error, delay time.Duration) (time.Duration, bool) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	time.Sleep(delay)
	select {
	case err := <-done:
		if err != nil {
			tb.Fatal(err)
		}
		return 0, false
	default:
	}
	cancelled := time.Now()
	cancel()
	err := <-done
	latency := time.Since(cancelled)
	if err != nil && !errors.Is(err, context.Canceled) {
		tb.Fatalf("err = %v, want context.Canceled or a result", err)
	}
	return latency, true
}

// noisyPNG is a w×h RGB PNG of a gradient under strong noise, which
// neither decodes nor compresses quickly and which the denoise levels
// filter.
func noisyPNG(tb testing.TB, w, h int) []byte {
	tb.Helper()
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
		tb.Fatal(err)
	}
	return b.Bytes()
}

// noisyGIF is an animated GIF of frames frames of w×h pixels of noise in
// Plan 9's palette.
func noisyGIF(tb testing.TB, w, h, frames int) []byte {
	tb.Helper()
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
		tb.Fatal(err)
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
