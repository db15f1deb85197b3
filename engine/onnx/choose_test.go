package onnx

import (
	"bytes"
	"context"
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
		for _, requested := range levels {
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
