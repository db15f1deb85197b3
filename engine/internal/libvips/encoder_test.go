package libvips

import (
	"context"
	"testing"
	"time"

	"github.com/h2non/bimg"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/internal/quality"
)

// BenchmarkEncoders enlarges a 1024² photo (Set14's baboon) and a 1024²
// cel image ×2 and saves the result with each candidate setting: the
// size, the time of the whole enlargement (the enlarging part is the
// same in every row, so differences are the encoder's), and for lossy
// formats the PSNR of luma and of chroma against the lossless result. Run it once
// (-benchtime 1x).
func BenchmarkEncoders(b *testing.B) {
	baboon := quality.SetFile(b, "Set14/baboon.png")
	photo, err := bimg.NewImage(baboon).Process(bimg.Options{Width: 1024, Height: 1024, Force: true, Enlarge: true, Type: bimg.PNG})
	if err != nil {
		b.Fatal(err)
	}
	sources := []struct {
		name string
		png  []byte
	}{{"photo", photo}, {"cel", quality.CelImage(5, 1024).PNG(b)}}
	settings := []struct {
		name string
		f    format
	}{
		{"png/level1", withSetting(pngFormat, func(f *format) { f.compression = 1 })},
		{"png/level2", withSetting(pngFormat, func(f *format) { f.compression = 2 })},
		{"png/level4", withSetting(pngFormat, func(f *format) { f.compression = 4 })},
		{"png/level6", withSetting(pngFormat, func(f *format) { f.compression = 6 })},
		{"jpeg/q90-444", withSetting(jpegFormat, func(f *format) { f.quality, f.subsample = 90, subsampleOff })},
		{"jpeg/q90-420", withSetting(jpegFormat, func(f *format) { f.quality, f.subsample = 90, subsampleOn })},
		{"jpeg/q85-420", withSetting(jpegFormat, func(f *format) { f.quality, f.subsample = 85, subsampleOn })},
		{"webp/q90-effort2", withSetting(webpFormat, func(f *format) { f.quality, f.effort = 90, 2 })},
		{"webp/q90-effort4", withSetting(webpFormat, func(f *format) { f.quality, f.effort = 90, 4 })},
		{"webp/q90-effort6", withSetting(webpFormat, func(f *format) { f.quality, f.effort = 90, 6 })},
		{"avif/q50-effort2", withSetting(avifFormat, func(f *format) { f.quality, f.effort = 50, 2 })},
		{"avif/q50-effort4", withSetting(avifFormat, func(f *format) { f.quality, f.effort = 50, 4 })},
		{"avif/q65-effort2", withSetting(avifFormat, func(f *format) { f.quality, f.effort = 65, 2 })},
		{"avif/q65-effort4", withSetting(avifFormat, func(f *format) { f.quality, f.effort = 65, 4 })},
		{"avif/q80-effort2", withSetting(avifFormat, func(f *format) { f.quality, f.effort = 80, 2 })},
	}
	r := recipeFor(upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone})
	for _, src := range sources {
		lossless, err := run(context.Background(), src.png, pngFormat, geometry{scale: 2}, r, bimg.ImageMetadata{})
		if err != nil {
			b.Fatal(err)
		}
		reference := quality.Decode(b, lossless)
		for _, s := range settings {
			b.Run(src.name+"/"+s.name, func(b *testing.B) {
				for range b.N {
					start := time.Now()
					out, err := run(context.Background(), src.png, s.f, geometry{scale: 2}, r, bimg.ImageMetadata{})
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(float64(time.Since(start).Milliseconds()), "ms")
					b.ReportMetric(float64(len(out))/(1<<20), "MiB")
					if s.f.saver != savePNG {
						decoded, err := bimg.NewImage(out).Convert(bimg.PNG) // image/* has no WebP
						if err != nil {
							b.Fatal(err)
						}
						encoded := quality.Decode(b, decoded)
						y, _, _ := quality.Luma(encoded, 0)
						yRef, _, _ := quality.Luma(reference, 0)
						b.ReportMetric(quality.PSNR(yRef, y), "dB-luma")
						b.ReportMetric(quality.PSNR(chroma(reference), chroma(encoded)), "dB-chroma")
					}
				}
			})
		}
	}
}

func withSetting(f format, set func(*format)) format {
	set(&f)
	return f
}

// chroma is BT.601 Cb and Cr of every pixel, one after the other.
func chroma(m *quality.Image) []float64 {
	out := make([]float64, 0, 2*len(m.R))
	for i := range m.R {
		out = append(out,
			-0.168736*m.R[i]-0.331264*m.G[i]+0.5*m.B[i],
			0.5*m.R[i]-0.418688*m.G[i]-0.081312*m.B[i])
	}
	return out
}

// TestWebPEffortBySize: effort 4 up to effortPixels of result, effort 2
// above, where libwebp's effort 4 cannot be stopped for long stretches.
func TestWebPEffortBySize(t *testing.T) {
	for _, tc := range []struct {
		pixels int64
		want   int
	}{{1, 4}, {effortPixels, 4}, {effortPixels + 1, 2}, {64 << 20, 2}} {
		if got := webpFormat.effortFor(tc.pixels); got != tc.want {
			t.Errorf("%d pixels: effort %d, want %d", tc.pixels, got, tc.want)
		}
	}
}
