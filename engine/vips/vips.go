// Package vips is the default upscale.Upscaler, on libvips: a pipeline that
// streams from the decoder to the encoder, with a centred enlargement,
// a denoiser for noisy photos and a sharper pass for drawn images. It
// needs cgo, libvips and libexif (Debian: libvips-dev, libexif-dev). The
// implementation, and the codec engine/onnx shares with it, are in
// engine/internal/libvips.
package vips

import (
	"context"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/engine/internal/libvips"
)

// Options configures an Engine. Every zero field means the default beside
// it.
type Options = libvips.Options

// Defaults for the zero fields of Options.
const (
	DefaultMaxSourcePixels = libvips.DefaultMaxSourcePixels
	DefaultMaxOutputPixels = libvips.DefaultMaxOutputPixels
	DefaultMaxSide         = libvips.DefaultMaxSide
	DefaultMaxFrames       = libvips.DefaultMaxFrames
)

// Engine enlarges JPEG, PNG, WebP, GIF, HEIC, AVIF and TIFF images with
// libvips, animated GIFs and WebPs frame by frame. It is safe for
// concurrent use. When an image's context is done, the work on it stops
// within milliseconds (libwebp, encoding a WebP result, at its next
// percent of progress; libheif, encoding an AVIF result, only once it is
// done: BENCHMARKS.md) and Upscale returns ctx.Err(), so a caller who has
// gone or a deadline that has passed frees the slot at once.
type Engine struct{ impl *libvips.Engine }

var (
	_ upscale.ConcurrentUpscaler = (*Engine)(nil)
	_ upscale.MemoryEstimator    = (*Engine)(nil)
	_ upscale.MemoryReleaser     = (*Engine)(nil)
	_ upscale.SizeReader         = (*Engine)(nil)
	_ upscale.SourceInspector    = (*Engine)(nil)
)

// New returns an Engine. The first call restricts libvips, for the whole
// process, to its JPEG, PNG, WebP, GIF, HEIF and TIFF loaders, turns its
// operation cache off and sends what it logs to slog.Default() at debug
// level instead of stderr; a program that also uses libvips for other
// formats should not share the process with an Engine.
func New(opts Options) *Engine { return &Engine{libvips.New(opts)} }

// Upscale implements upscale.Upscaler.
func (e *Engine) Upscale(ctx context.Context, src []byte, params upscale.Params) (upscale.Image, error) {
	return e.impl.Upscale(ctx, src, params)
}

// Concurrency is how many images the Engine enlarges at once
// (Options.Concurrency); it implements upscale.ConcurrentUpscaler.
func (e *Engine) Concurrency() int { return e.impl.Concurrency() }

// EstimateMemory implements upscale.MemoryEstimator.
func (e *Engine) EstimateMemory(src []byte, params upscale.Params) (int64, error) {
	return e.impl.EstimateMemory(src, params)
}

// SourcePixels implements upscale.SizeReader.
func (e *Engine) SourcePixels(src []byte) (int64, error) {
	return e.impl.SourcePixels(src)
}

// InspectSource implements upscale.SourceInspector: SourcePixels and
// EstimateMemory from one reading of src's header.
func (e *Engine) InspectSource(src []byte, params upscale.Params) (upscale.SourceReport, error) {
	return e.impl.InspectSource(src, params)
}

// ReleaseMemory implements upscale.MemoryReleaser: it gives the C
// allocator's free arenas back to the system.
func (e *Engine) ReleaseMemory() { e.impl.ReleaseMemory() }
