package onnx

import (
	"math"
	"testing"
)

// BenchmarkScatter writes one tile of SPAN ×4's result on oneDNN (500×480
// source pixels with a halo of 21, 2168×2088 made) into an RGB result,
// as each ×4 of a 1000×960 photo does four times.
func BenchmarkScatter(b *testing.B) {
	const scale, halo, tileW, tileH = 4, 21, 500, 480
	w, h := scale*(tileW+2*halo), scale*(tileH+2*halo)
	y := make([]float32, 3*w*h)
	for i := range y {
		y[i] = float32(i%1000) / 999
	}
	out := planes{pix: make([]uint16, 3*scale*tileW*scale*tileH), width: scale * tileW, height: scale * tileH, bands: 3}
	b.SetBytes(int64(len(out.pix) * 2))
	for b.Loop() {
		scatter(y, w, h, halo*scale, out, 0, 0)
	}
}

// TestScatter: scatter writes each sample of a tile's result, less its
// cut, at its place in the image, in whichever band the planes name,
// clipped and rounded to 16 bits; a grey band gets the mean of the three
// planes; what overhangs the image, and the other bands, stay as they
// were.
func TestScatter(t *testing.T) {
	const w, h, cut = 9, 7, 2 // a 5×3 result inside its cut
	y := make([]float32, 3*w*h)
	for i := range y {
		y[i] = float32(i) / float32(len(y)) // each sample its own value
	}
	y[0*w*h+cut*w+cut] = -0.5 // clipped to 0
	y[1*w*h+cut*w+cut] = 1.5  // clipped to 1
	for _, tc := range []struct {
		name         string
		bands, first int
		grey         bool
	}{{"RGB", 3, 0, false}, {"RGBA", 4, 0, false}, {"grey", 1, 0, true}, {"alpha of grey", 2, 1, true}} {
		t.Run(tc.name, func(t *testing.T) {
			// A 7×4 image with the tile at (3, 2): 4 columns and 2 rows of
			// it fall inside.
			out := planes{pix: make([]uint16, 7*4*tc.bands), width: 7, height: 4, bands: tc.bands, first: tc.first, grey: tc.grey}
			for i := range out.pix {
				out.pix[i] = 7
			}
			scatter(y, w, h, cut, out, 3, 2)
			for row := range out.height {
				for col := range out.width {
					for band := range tc.bands {
						got := out.pix[(row*out.width+col)*tc.bands+band]
						want := uint16(7)
						if inside, c := row >= 2 && col >= 3, band-tc.first; inside && (tc.grey && c == 0 || !tc.grey && c >= 0 && c < 3) {
							at := (row-2+cut)*w + col - 3 + cut
							v := y[c*w*h+at]
							if tc.grey {
								v = (y[at] + y[w*h+at] + y[2*w*h+at]) / 3
							}
							want = uint16(math.Round(float64(min(max(v, 0), 1)) * math.MaxUint16))
						}
						if got != want {
							t.Errorf("(%d, %d) band %d: %d, want %d", col, row, band, got, want)
						}
					}
				}
			}
		})
	}
}
