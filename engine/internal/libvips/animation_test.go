package libvips

import (
	"bytes"
	"context"
	"image"
	"image/color/palette"
	"image/draw"
	"image/gif"
	"testing"
	"time"

	"github.com/h2non/bimg"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/internal/quality"
)

// BenchmarkAnimations enlarges 1000 frames of 4×4 ×2 (the most frames,
// where each frame's own cost shows), and a 48-frame animation of 320×240 (a pan
// across Set14's baboon, dithered to Plan 9's palette; 3.7 megapixels in
// all) ×2 with the classical engine: as an animated GIF with the GIF
// settings chosen and libvips's default effort (7), and as an animated
// WebP. It reports the time per frame, the result's size and, for GIF,
// the PSNR of the first frame's luma against the same frame enlarged as
// a still PNG, which is what quantising the result's palette costs. Run
// it once (-benchtime 1x).
func BenchmarkAnimations(b *testing.B) {
	baboon := quality.SetFile(b, "Set14/baboon.png")
	picture, _, err := image.Decode(bytes.NewReader(baboon))
	if err != nil {
		b.Fatal(err)
	}
	const w, h, frames = 320, 240, 48
	anim := &gif.GIF{}
	for k := range frames {
		frame := image.NewPaletted(image.Rect(0, 0, w, h), palette.Plan9)
		draw.FloydSteinberg.Draw(frame, frame.Bounds(), picture, image.Pt(4*k, 2*k))
		anim.Image, anim.Delay = append(anim.Image, frame), append(anim.Delay, 4)
	}
	animated, first := encodeGIF(b, anim), encodeGIF(b, &gif.GIF{Image: anim.Image[:1], Delay: anim.Delay[:1]})
	r := recipeFor(upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone})
	enlarged := geometry{scale: 2, size: image.Pt(2*w, 2*h), frames: frames}
	still, err := run(context.Background(), first, pngFormat, geometry{scale: 2, size: enlarged.size, frames: 1}, r, bimg.ImageMetadata{})
	if err != nil {
		b.Fatal(err)
	}
	reference, _, _ := quality.Luma(quality.Decode(b, still), 0)
	webp, err := run(context.Background(), animated, webpFormat, geometry{scale: 1, size: image.Pt(w, h), frames: frames}, recipe{}, bimg.ImageMetadata{})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("gif/1000-frames-of-4x4", func(b *testing.B) {
		levels := make([]uint8, DefaultMaxFrames)
		for k := range levels {
			levels[k] = uint8(k)
		}
		src := SolidAnimation(b, 4, 4, levels...)
		e := New(Options{})
		for range b.N {
			start := time.Now()
			if _, err := e.Upscale(context.Background(), src, upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone}); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/DefaultMaxFrames/1000, "ms/frame")
		}
	})
	for _, tc := range []struct {
		name string
		src  []byte
		f    format
	}{
		{"gif/effort4", animated, gifFormat},
		{"gif/effort7", animated, withSetting(gifFormat, func(f *format) { f.effort, f.largeEffort = 7, 7 })},
		{"webp", webp, webpFormat},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				start := time.Now()
				out, err := run(context.Background(), tc.src, tc.f, enlarged, r, bimg.ImageMetadata{})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(time.Since(start).Milliseconds())/frames, "ms/frame")
				b.ReportMetric(float64(len(out))/(1<<20), "MiB")
				if tc.f.saver != saveGIF {
					continue
				}
				result, err := gif.DecodeAll(bytes.NewReader(out))
				if err != nil {
					b.Fatal(err)
				}
				frame := image.NewRGBA(image.Rect(0, 0, 2*w, 2*h))
				draw.Draw(frame, frame.Bounds(), result.Image[0], image.Point{}, draw.Src)
				y, _, _ := quality.Luma(quality.FromImage(frame), 0)
				b.ReportMetric(quality.PSNR(reference, y), "dB-luma")
			}
		})
	}
}

func encodeGIF(tb testing.TB, g *gif.GIF) []byte {
	tb.Helper()
	var b bytes.Buffer
	if err := gif.EncodeAll(&b, g); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

// TestWebPAnimationKeepsEveryFrame: an animated WebP result has every
// frame of its source, also frames alike (0, 0) or a level apart (1),
// which libwebp's animation encoder merges into the frame before.
func TestWebPAnimationKeepsEveryFrame(t *testing.T) {
	webp, err := run(context.Background(), SolidAnimation(t, 8, 6, 0, 0, 1, 255), webpFormat, geometry{scale: 1, size: image.Pt(8, 6), frames: 4}, recipe{}, bimg.ImageMetadata{})
	if err != nil {
		t.Fatal(err)
	}
	if l, err := readLayout(webp); err != nil || l.pages != 4 {
		t.Fatalf("the source made here: %d frames (%v), want 4", l.pages, err)
	}
	img, err := New(Options{}).Upscale(context.Background(), webp, upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone})
	if err != nil {
		t.Fatal(err)
	}
	if l, err := readLayout(img.Data); err != nil || l.pages != 4 {
		t.Errorf("the result: %d frames (%v), want 4", l.pages, err)
	}
}
