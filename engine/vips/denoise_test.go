package vips

import (
	"bytes"
	"image"
	"image/color"
	"image/jpeg"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/upscalekit/upscale"
)

func TestQuantTables(t *testing.T) {
	photo := celImage(1, 64).toNRGBA()
	var colour, grey bytes.Buffer
	if err := jpeg.Encode(&colour, photo, &jpeg.Options{Quality: 50}); err != nil {
		t.Fatal(err)
	}
	gray := image.NewGray(photo.Bounds())
	for i := range gray.Pix {
		gray.Pix[i] = photo.Pix[4*i]
	}
	if err := jpeg.Encode(&grey, gray, &jpeg.Options{Quality: 50}); err != nil {
		t.Fatal(err)
	}

	// At quality 50 the tables are those of the JPEG standard's annex K.
	luma, chroma, ok := quantTables(colour.Bytes())
	wantLuma := []float32{16, 11, 10, 16, 24, 40, 51, 61}       // first row
	wantChroma := []float32{17, 18, 24, 47, 99, 99, 99, 99}     // first row
	wantLumaColumn := []float32{16, 12, 14, 14, 18, 24, 49, 72} // first column
	for i := range 8 {
		if !ok || luma[i] != wantLuma[i] || chroma[i] != wantChroma[i] || luma[8*i] != wantLumaColumn[i] {
			t.Fatalf("quality 50: ok %v, luma %v, chroma %v; want the annex K tables", ok, luma, chroma)
		}
	}
	if transposed := transpose(luma); transposed[1] != 12 || transposed[8] != 11 {
		t.Errorf("transpose: %v", transposed)
	}
	if luma, chroma, ok := quantTables(grey.Bytes()); !ok || luma[0] != 16 || chroma != [64]float32{} {
		t.Errorf("greyscale: ok %v, luma %v, chroma %v; want the luma table alone", ok, luma[:8], chroma[:8])
	}
	// Truncated anywhere, a file gives no tables or the right ones, and
	// never a panic.
	for n := range colour.Len() {
		if l, _, ok := quantTables(colour.Bytes()[:n]); ok && l != luma {
			t.Fatalf("cut at %d bytes: wrong tables %v", n, l[:8])
		}
	}
	if _, _, ok := quantTables(celImage(1, 16).png(t)); ok {
		t.Error("a PNG has quantisation tables")
	}
}

// TestDenoisedJPEGStaysConsistent denoises a quality-30 JPEG without
// enlarging it: every luma block on the file's grid must still be one the
// JPEG could have been decoded to, each DCT coefficient within half a
// quantisation step of the file's (plus the rounding of the result to
// 8-bit RGB), while the filter has changed the image.
func TestDenoisedJPEGStaysConsistent(t *testing.T) {
	photo := celImage(2, 96)
	rng := rand.New(rand.NewPCG(1, 2))
	// Mid-range colours, so that no decoder clips them, with texture for
	// the quantisation to remove.
	for _, plane := range [][]float64{photo.r, photo.g, photo.b} {
		for i, v := range plane {
			plane[i] = 48 + 0.6*v + 12*rng.NormFloat64()
		}
	}
	src := encodeJPEG(t, photo, 30)
	luma, _, _ := quantTables(src)
	var planes [2][]float64 // as libvips decodes the file, and denoised
	for i, level := range []upscale.Denoise{upscale.DenoiseNone, upscale.DenoiseMax} {
		out, err := run(src, pngFormat, 1, recipe{interpolator: "bicubic", denoise: denoiseLevels[level]}, 1)
		if err != nil {
			t.Fatal(err)
		}
		planes[i] = jpegLuma(decodeRGB(t, out))
	}
	decoded, denoised := planes[0], planes[1]
	var changed float64
	for by := 0; by < photo.h; by += 8 {
		for bx := 0; bx < photo.w; bx += 8 {
			a, b := blockDCT(decoded, photo.w, bx, by), blockDCT(denoised, photo.w, bx, by)
			for k := range 64 {
				changed += math.Abs(a[k] - b[k])
				if d := math.Abs(a[k] - b[k]); d > float64(luma[k])/2+2 {
					t.Fatalf("block (%d, %d) coefficient %d moved %.1f, more than half its step %v", bx, by, k, d, luma[k])
				}
			}
		}
	}
	if changed < float64(photo.w*photo.h)/10 {
		t.Errorf("the filter changed the DCT coefficients by %.0f in all; want a visible change", changed)
	}
}

// jpegLuma is JPEG's Y plane of m.
func jpegLuma(m *rgbImage) []float64 {
	y := make([]float64, len(m.r))
	for i := range y {
		y[i] = 0.299*m.r[i] + 0.587*m.g[i] + 0.114*m.b[i]
	}
	return y
}

// blockDCT is the orthonormal 2-D DCT of the 8×8 block at (bx, by).
func blockDCT(plane []float64, w, bx, by int) [64]float64 {
	var out [64]float64
	basis := func(k, n int) float64 {
		scale := math.Sqrt(2.0 / 8)
		if k == 0 {
			scale = math.Sqrt(1.0 / 8)
		}
		return scale * math.Cos(math.Pi*float64(2*n+1)*float64(k)/16)
	}
	for v := range 8 {
		for u := range 8 {
			for y := range 8 {
				for x := range 8 {
					out[v*8+u] += basis(v, y) * basis(u, x) * plane[(by+y)*w+bx+x]
				}
			}
		}
	}
	return out
}

// TestDenoiseLeavesAlphaAndTinyImages checks that filtering touches colour
// only, and that an image smaller than one block still comes out.
func TestDenoiseLeavesAlphaAndTinyImages(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	src := image.NewNRGBA(image.Rect(0, 0, 40, 40))
	for i := 0; i < len(src.Pix); i += 4 {
		src.Pix[i], src.Pix[i+1], src.Pix[i+2], src.Pix[i+3] = uint8(rng.IntN(256)), 128, 64, uint8(i/4%40*6)
	}
	alphaOf := func(level upscale.Denoise, img image.Image) []uint8 {
		out, err := run(encodeImagePNG(t, img), pngFormat, 2, recipeFor(upscale.Options{Scale: 2, Denoise: level}), 1)
		if err != nil {
			t.Fatal(err)
		}
		decoded, _, err := image.Decode(bytes.NewReader(out))
		if err != nil {
			t.Fatal(err)
		}
		var alpha []uint8
		for y := range decoded.Bounds().Dy() {
			for x := range decoded.Bounds().Dx() {
				alpha = append(alpha, color.NRGBAModel.Convert(decoded.At(x, y)).(color.NRGBA).A)
			}
		}
		return alpha
	}
	if !bytes.Equal(alphaOf(upscale.DenoiseNone, src), alphaOf(upscale.DenoiseMax, src)) {
		t.Error("denoising changed the alpha channel")
	}
	if alpha := alphaOf(upscale.DenoiseMax, src.SubImage(image.Rect(0, 0, 5, 3))); len(alpha) != 10*6 {
		t.Errorf("a 5×3 image came out with %d pixels, want 10×6", len(alpha))
	}
}
