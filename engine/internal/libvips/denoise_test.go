package libvips

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/jpeg"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/h2non/bimg"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/internal/quality"
	"github.com/upscalekit/upscale/upscaletest"
)

func TestQuantTables(t *testing.T) {
	photo := quality.CelImage(1, 64).NRGBA()
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
	cmyk, err := bimg.NewImage(colour.Bytes()).Process(bimg.Options{Type: bimg.JPEG, Quality: 50, Interpretation: bimg.InterpretationCMYK})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := quantTables(cmyk); ok {
		t.Error("a CMYK JPEG gives tables, but its blocks are not Y, Cb and Cr")
	}
	if _, _, ok := quantTables(quality.CelImage(1, 16).PNG(t)); ok {
		t.Error("a PNG has quantisation tables")
	}
}

// TestDenoisedJPEGStaysConsistent denoises a quality-30 JPEG without
// enlarging it, stored with each EXIF orientation: every luma block on the
// file's grid must still be one the JPEG could have been decoded to, each
// DCT coefficient within half a quantisation step of the file's (plus the
// rounding of the result to 8-bit RGB), while the filter has changed the
// image. The JPEG is 101×75, so that a mirrored axis does not end on a
// block boundary.
func TestDenoisedJPEGStaysConsistent(t *testing.T) {
	photo := quality.CelImage(2, 104).Crop(101, 75)
	rng := rand.New(rand.NewPCG(1, 2))
	// Mid-range colours, so that no decoder clips them, with texture for
	// the quantisation to remove.
	for _, plane := range [][]float64{photo.R, photo.G, photo.B} {
		for i, v := range plane {
			plane[i] = 48 + 0.6*v + 12*rng.NormFloat64()
		}
	}
	jpg := quality.EncodeJPEG(t, photo, 30)
	luma, _, _ := quantTables(jpg)
	for orientation := 1; orientation <= 8; orientation++ {
		src := upscaletest.WithEXIFOrientation(jpg, uint16(orientation))
		meta, err := bimg.NewImage(src).Metadata()
		if err != nil {
			t.Fatal(err)
		}
		var planes [2][]float64 // as libvips decodes the file, and denoised; as stored
		for i, level := range []upscale.Denoise{upscale.DenoiseNone, upscale.DenoiseMax} {
			out, err := run(context.Background(), src, pngFormat, geometry{scale: 1}, recipe{interpolator: "bicubic", denoise: denoiseLevels[level]}, meta)
			if err != nil {
				t.Fatal(err)
			}
			planes[i] = asStored(jpegLuma(quality.Decode(t, out)), orientation, photo.W, photo.H)
		}
		decoded, denoised := planes[0], planes[1]
		var changed float64
		for by := 0; by+8 <= photo.H; by += 8 {
			for bx := 0; bx+8 <= photo.W; bx += 8 {
				a, b := blockDCT(decoded, photo.W, bx, by), blockDCT(denoised, photo.W, bx, by)
				for k := range 64 {
					changed += math.Abs(a[k] - b[k])
					if d := math.Abs(a[k] - b[k]); d > float64(luma[k])/2+2 {
						t.Fatalf("orientation %d: block (%d, %d) coefficient %d moved %.1f, more than half its step %v", orientation, bx, by, k, d, luma[k])
					}
				}
			}
		}
		if changed < float64(photo.W*photo.H)/10 {
			t.Errorf("orientation %d: the filter changed the DCT coefficients by %.0f in all; want a visible change", orientation, changed)
		}
	}
}

// asStored turns a plane shown upright back into the w×h plane a JPEG with
// EXIF orientation stored: the orientation says where stored pixel (x, y)
// is shown.
func asStored(upright []float64, orientation, w, h int) []float64 {
	shownAt := func(x, y int) (int, int) {
		switch orientation {
		case 2:
			return w - 1 - x, y
		case 3:
			return w - 1 - x, h - 1 - y
		case 4:
			return x, h - 1 - y
		case 5:
			return y, x
		case 6:
			return h - 1 - y, x
		case 7:
			return h - 1 - y, w - 1 - x
		case 8:
			return y, w - 1 - x
		}
		return x, y
	}
	uprightW := w
	if orientation >= 5 {
		uprightW = h
	}
	stored := make([]float64, w*h)
	for y := range h {
		for x := range w {
			ux, uy := shownAt(x, y)
			stored[y*w+x] = upright[uy*uprightW+ux]
		}
	}
	return stored
}

// jpegLuma is JPEG's Y plane of m.
func jpegLuma(m *quality.Image) []float64 {
	y := make([]float64, len(m.R))
	for i := range y {
		y[i] = 0.299*m.R[i] + 0.587*m.G[i] + 0.114*m.B[i]
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
		out, err := run(context.Background(), quality.EncodePNG(t, img), pngFormat, geometry{scale: 2}, recipeFor(upscale.Params{Scale: 2, Denoise: level}), bimg.ImageMetadata{})
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

func TestIJGQuality(t *testing.T) {
	photo := quality.CelImage(3, 64)
	for _, q := range []int{10, 30, 50, 60, 75, 90, 95, 100} {
		luma, _, ok := quantTables(quality.EncodeJPEG(t, photo, q))
		if !ok {
			t.Fatal("no tables")
		}
		if got := ijgQuality(luma); got < q-1 || got > q+1 {
			t.Errorf("quality %d estimated as %d", q, got)
		}
	}
}
