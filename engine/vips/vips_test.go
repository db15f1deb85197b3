package vips_test

import (
	"testing"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/engine/vips"
	"github.com/upscalekit/upscale/upscaletest"
)

// TestConformance: the public Engine keeps the Upscaler contract; its
// implementation's own tests are in engine/internal/libvips.
func TestConformance(t *testing.T) {
	e := vips.New(vips.Options{})
	newUpscaler := func(t *testing.T) upscale.Upscaler { return e }
	upscaletest.TestUpscaler(t, newUpscaler)
	upscaletest.TestUpscalerFormats(t, newUpscaler)
}
