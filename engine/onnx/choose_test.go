package onnx

import (
	"bytes"
	"context"
	"slices"
	"testing"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/internal/quality"
)

// TestDenoiseNeverAboveRequested: the level used fits the source and never
// exceeds the one asked for; none never denoises. Upscale uses that level.
func TestDenoiseNeverAboveRequested(t *testing.T) {
	e := newTestEngine(t)
	butterfly := quality.Shrink(quality.LoadSet(t, "Set5")[2], 2)
	for _, tc := range []struct {
		source    quality.Degradation
		imageType upscale.ImageType
		fits      upscale.Denoise // what max gives
	}{
		{quality.Clean, upscale.Photo, upscale.DenoiseNone},
		{quality.GaussianNoise(15), upscale.Photo, upscale.DenoiseMax},
		{quality.GaussianNoise(5), upscale.Photo, upscale.DenoiseLow},
		{quality.JPEG(30), upscale.Photo, upscale.DenoiseHigh},
		{quality.JPEG(70), upscale.Photo, upscale.DenoiseMid},
		{quality.JPEG(70), upscale.Anime, upscale.DenoiseHigh},
	} {
		src := tc.source.Source(t, butterfly)
		for _, requested := range quality.Levels {
			px, err := e.codec.Decode(context.Background(), src, 2)
			if err != nil {
				t.Fatal(err)
			}
			got := fitLevel(px, tc.imageType, requested)
			if want := weaker(tc.fits, requested); got != want {
				t.Errorf("%s, %s, %s requested: level %s, want %s", tc.source.Name, tc.imageType, requested, got, want)
			}
			if strength[got] > strength[requested] {
				t.Errorf("%s: level %s is above the %s requested", tc.source.Name, got, requested)
			}
		}
	}
	// Through Upscale: a noisy source with none requested is enlarged by
	// the plain network.
	src := quality.GaussianNoise(15).Source(t, butterfly)
	img, err := e.Upscale(context.Background(), src, upscale.Options{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone})
	if err != nil {
		t.Fatal(err)
	}
	px, err := e.codec.Decode(context.Background(), src, 2)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := e.enlargeAll(context.Background(), px, 2, upscale.Photo, upscale.DenoiseNone)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(img.Data, plain.Data) {
		t.Error("denoise none on a noisy source: the result is not the plain network's")
	}
}

// TestTiling: tiles cover the image, are balanced, and give the model an
// input it takes.
func TestTiling(t *testing.T) {
	m := &model{scale: 2, border: 18, multiple: 2, minInput: 38}
	for _, tc := range []struct {
		w, h, size   int
		tileW, tileH int
		xs, ys       []int
	}{
		{512, 512, 160, 128, 128, []int{0, 128, 256, 384}, []int{0, 128, 256, 384}},
		{500, 129, 128, 126, 66, []int{0, 126, 252, 374}, []int{0, 63}},
		{1, 1, 128, 2, 2, []int{0}, []int{0}},
		{129, 128, 128, 66, 128, []int{0, 63}, []int{0}},
	} {
		got := m.tile(tc.w, tc.h, tc.size)
		if got.tileW != tc.tileW || got.tileH != tc.tileH || !slices.Equal(got.xs, tc.xs) || !slices.Equal(got.ys, tc.ys) {
			t.Errorf("%d×%d in tiles of %d: %+v, want %dx%d at %v, %v", tc.w, tc.h, tc.size, got, tc.tileW, tc.tileH, tc.xs, tc.ys)
		}
		if (got.tileW+2*m.border)%m.multiple != 0 || got.tileW+2*m.border < m.minInput {
			t.Errorf("%d×%d: tile input %d does not fit the model", tc.w, tc.h, got.tileW+2*m.border)
		}
	}
}

// TestOpaqueAlphaStaysOpaque: an alpha band that is opaque everywhere
// needs no pass of the network and comes back opaque.
func TestOpaqueAlphaStaysOpaque(t *testing.T) {
	e := newTestEngine(t)
	img := quality.CelImage(1, 40).NRGBA()
	img.Pix[3] = 254 // one pixel not quite opaque, or Go's encoder drops the alpha band
	px, err := e.codec.Decode(context.Background(), quality.EncodePNG(t, img), 2)
	if err != nil {
		t.Fatal(err)
	}
	if !px.Alpha || opaque(px) {
		t.Fatalf("source: alpha %v, opaque %v; want an alpha band, not all opaque", px.Alpha, opaque(px))
	}
	px.Pix[3] = px.Max()
	if !opaque(px) {
		t.Fatal("all opaque, and opaque says it is not")
	}
	out, err := e.enlarge(context.Background(), px, e.models[modelFor(upscale.Photo, upscale.DenoiseNone)])
	if err != nil {
		t.Fatal(err)
	}
	if !opaque(out) {
		t.Error("the result's alpha is not opaque everywhere")
	}
}
