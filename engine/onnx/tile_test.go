package onnx

import "testing"

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
