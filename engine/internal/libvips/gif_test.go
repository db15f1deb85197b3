package libvips

import (
	"bytes"
	"image"
	"image/color/palette"
	"image/gif"
	"math/rand/v2"
	"testing"
)

// TestLZWPixels: the pixels a GIF frame's LZW data decodes to are counted
// as Go's decoder makes them, for frames of every code size and of codes
// past a full table, and a frame whose data ends early counts short.
func TestLZWPixels(t *testing.T) {
	for _, tc := range []struct {
		w, h, colours int
	}{{9, 7, 2}, {37, 11, 4}, {300, 200, 256}, {1000, 700, 256}} {
		img := image.NewPaletted(image.Rect(0, 0, tc.w, tc.h), palette.Plan9[:tc.colours])
		rng := rand.New(rand.NewPCG(1, 2))
		for i := range img.Pix {
			img.Pix[i] = uint8(rng.IntN(tc.colours) * (i / 97 % 2)) // runs and noise
		}
		var out bytes.Buffer
		if err := gif.Encode(&out, img, nil); err != nil {
			t.Fatal(err)
		}
		enc := out.Bytes()
		at := 13 + colourTable(enc[10]) + 10
		literalBits := int(enc[at])
		var data []byte
		for at++; enc[at] != 0; at += 1 + int(enc[at]) {
			data = append(data, enc[at+1:at+1+int(enc[at])]...)
		}
		want := int64(tc.w * tc.h)
		if n := lzwPixels(data, literalBits, want); n != want {
			t.Errorf("%dx%d of %d colours: %d pixels, want %d", tc.w, tc.h, tc.colours, n, want)
		}
		if n := lzwPixels(data[:len(data)/2], literalBits, want); n >= want {
			t.Errorf("%dx%d of %d colours, half its data: %d pixels, want fewer than %d", tc.w, tc.h, tc.colours, n, want)
		}
	}
}
