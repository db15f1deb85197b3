package libvips

import (
	"image"
	"image/color"
	"image/gif"
	"testing"
)

// SolidAnimation is an animated GIF of w×h frames, each of one grey
// level of levels, 100 ms each, played for ever. It is exported for the
// package's external tests.
func SolidAnimation(tb testing.TB, w, h int, levels ...uint8) []byte {
	tb.Helper()
	anim := &gif.GIF{}
	for _, level := range levels {
		anim.Image = append(anim.Image, image.NewPaletted(image.Rect(0, 0, w, h), color.Palette{color.Gray{level}}))
		anim.Delay = append(anim.Delay, 10)
	}
	return encodeGIF(tb, anim)
}

// HEIFGrid is heifGrid, exported for the package's external tests.
var HEIFGrid = heifGrid

// HEIFHonestGrid is heifHonestGrid, exported for the package's external
// tests.
var HEIFHonestGrid = heifHonestGrid
