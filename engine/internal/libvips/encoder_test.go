package libvips

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/binary"
	"io"
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
		{"png/packed", packedPNG},
		{"png/level1-none", withSetting(pngFormat, func(f *format) { f.compression, f.filter = 1, pngFilterNone })},
		{"png/level1-up", withSetting(pngFormat, func(f *format) { f.compression, f.filter = 1, pngFilterUp })},
		{"png/level1-paeth", withSetting(pngFormat, func(f *format) { f.compression, f.filter = 1, pngFilterPaeth })},
		{"png/level2-paeth", withSetting(pngFormat, func(f *format) { f.compression, f.filter = 2, pngFilterPaeth })},
		{"png/level4-paeth", withSetting(pngFormat, func(f *format) { f.compression, f.filter = 4, pngFilterPaeth })},
		{"png/level6-none", withSetting(pngFormat, func(f *format) { f.compression, f.filter = 6, pngFilterNone })},
		{"png/level6-up", withSetting(pngFormat, func(f *format) { f.compression, f.filter = 6, pngFilterUp })},
		{"png/level6-paeth", withSetting(pngFormat, func(f *format) { f.compression, f.filter = 6, pngFilterPaeth })},
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

// TestPNGRowsFiltered: a PNG result's rows are each Paeth-filtered, which
// makes an enlarged photo (Set14's baboon ×2) at least a tenth smaller
// than unfiltered rows do.
func TestPNGRowsFiltered(t *testing.T) {
	r := recipeFor(upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone})
	save := func(f format) []byte {
		out, err := run(context.Background(), quality.SetFile(t, "Set14/baboon.png"), f, geometry{scale: 2}, r, bimg.ImageMetadata{})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	filtered := save(pngFormat)
	for i, row := range pngRows(t, filtered) {
		if row[0] != 4 {
			t.Fatalf("row %d: filter %d, want Paeth (4)", i, row[0])
		}
	}
	unfiltered := save(withSetting(pngFormat, func(f *format) { f.filter = pngFilterNone }))
	if 10*len(filtered) > 9*len(unfiltered) {
		t.Errorf("%d bytes Paeth-filtered, %d unfiltered; want at least a tenth fewer", len(filtered), len(unfiltered))
	}
}

// pngRows returns the rows of an 8- or 16-bit, non-interlaced PNG, each
// its filter byte and its pixels' bytes.
func pngRows(t *testing.T, data []byte) [][]byte {
	t.Helper()
	var idat []byte
	var width, height, channels, sampleBytes int
	for p := 8; p+12 <= len(data); {
		n := int(binary.BigEndian.Uint32(data[p:]))
		kind, body := string(data[p+4:p+8]), data[p+8:p+8+n]
		switch kind {
		case "IHDR":
			width, height = int(binary.BigEndian.Uint32(body)), int(binary.BigEndian.Uint32(body[4:]))
			depth, interlaced := body[8], body[12]
			if depth != 8 && depth != 16 || interlaced != 0 {
				t.Fatalf("a PNG of depth %d, interlace %d; want 8 or 16 and none", depth, interlaced)
			}
			sampleBytes = int(depth) / 8
			channels = pngChannels[body[9]]
		case "IDAT":
			idat = append(idat, body...)
		}
		p += 12 + n
	}
	r, err := zlib.NewReader(bytes.NewReader(idat))
	if err != nil {
		t.Fatal(err)
	}
	pixels, err := io.ReadAll(r)
	rowBytes := 1 + width*channels*sampleBytes
	if err != nil || len(pixels) != height*rowBytes {
		t.Fatalf("%d bytes of rows, %v; want %d rows of %d", len(pixels), err, height, rowBytes)
	}
	rows := make([][]byte, height)
	for i := range rows {
		rows[i] = pixels[i*rowBytes : (i+1)*rowBytes]
	}
	return rows
}
