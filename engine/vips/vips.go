// Package vips is the default upscale.Upscaler: libvips through
// github.com/h2non/bimg. It needs cgo and libvips (Debian: libvips-dev).
package vips

import (
	"bytes"
	"context"
	"fmt"
	"runtime"

	"github.com/h2non/bimg"

	"github.com/upscalekit/upscale"
)

// Defaults for the zero fields of Options.
const (
	// DefaultMaxSourcePixels admits a 50-megapixel source, such as an
	// 8660×5773 photo.
	DefaultMaxSourcePixels = 50_000_000
	// DefaultMaxOutputPixels admits a 100-megapixel result, such as a
	// 512×512 source at scale 16 (67 MP) or a 2500×2500 one at scale 4.
	DefaultMaxOutputPixels = 100_000_000
	// DefaultMaxSide caps each side of source and result.
	DefaultMaxSide = 32768
)

// webpMaxSide is the largest side the WebP format can store.
const webpMaxSide = 16383

// Options configures an Engine. Every zero field means the default beside it.
type Options struct {
	// MaxSourcePixels caps width×height of a source. Zero means
	// DefaultMaxSourcePixels.
	MaxSourcePixels int64
	// MaxOutputPixels caps width×height of a result. Zero means
	// DefaultMaxOutputPixels.
	MaxOutputPixels int64
	// MaxSide caps each side of a source and of a result. Zero means
	// DefaultMaxSide.
	MaxSide int
	// Concurrency is how many images are enlarged at once; further
	// requests queue, and their wait counts against their deadline. Zero
	// means the number of CPUs.
	Concurrency int
}

// Engine enlarges JPEG, PNG and WebP images with libvips. It is safe for
// concurrent use.
type Engine struct {
	opts  Options
	slots chan struct{}
}

var _ upscale.Upscaler = (*Engine)(nil)

// New returns an Engine. The first call restricts libvips, for the whole
// process, to its JPEG, PNG and WebP loaders; a program that also uses
// libvips for other formats should not share the process with an Engine.
func New(opts Options) *Engine {
	restrictLoaders()
	if opts.MaxSourcePixels == 0 {
		opts.MaxSourcePixels = DefaultMaxSourcePixels
	}
	if opts.MaxOutputPixels == 0 {
		opts.MaxOutputPixels = DefaultMaxOutputPixels
	}
	if opts.MaxSide == 0 {
		opts.MaxSide = DefaultMaxSide
	}
	if opts.Concurrency == 0 {
		opts.Concurrency = runtime.NumCPU()
	}
	return &Engine{opts: opts, slots: make(chan struct{}, opts.Concurrency)}
}

type format struct {
	bimgType    bimg.ImageType
	contentType string
	maxSide     int
}

// sniff decides the format from the file's signature alone, never from a
// Content-Type or a URL, so no other libvips loader ever sees the bytes.
func sniff(src []byte) (format, bool) {
	switch {
	case bytes.HasPrefix(src, []byte{0xFF, 0xD8, 0xFF}):
		return format{bimg.JPEG, "image/jpeg", 65535}, true
	case bytes.HasPrefix(src, []byte("\x89PNG\r\n\x1a\n")):
		return format{bimg.PNG, "image/png", 1 << 31}, true
	case len(src) >= 12 && string(src[:4]) == "RIFF" && string(src[8:12]) == "WEBP":
		return format{bimg.WEBP, "image/webp", webpMaxSide}, true
	}
	return format{}, false
}

// Upscale implements upscale.Upscaler.
func (e *Engine) Upscale(ctx context.Context, src []byte, opts upscale.Options) (upscale.Image, error) {
	f, ok := sniff(src)
	if !ok {
		return upscale.Image{}, upscale.Explain(upscale.ErrUnsupportedImage, "The file is not a JPEG, PNG or WebP image.")
	}
	// The header alone gives the size: no pixel is decoded before the
	// limits are checked.
	meta, err := bimg.NewImage(src).Metadata()
	if err != nil {
		return upscale.Image{}, fmt.Errorf("%w: read header: %v", upscale.Explain(upscale.ErrUnsupportedImage, "The image header could not be read; the file may be truncated or corrupt."), err)
	}
	w, h := meta.Size.Width, meta.Size.Height
	if meta.Orientation >= 5 { // EXIF orientations 5-8 turn the image a quarter
		w, h = h, w
	}
	outW, outH := w*opts.Scale, h*opts.Scale
	if err := e.checkLimits(f, w, h, outW, outH); err != nil {
		return upscale.Image{}, err
	}

	select {
	case e.slots <- struct{}{}:
	case <-ctx.Done():
		return upscale.Image{}, ctx.Err()
	}
	defer func() { <-e.slots }()
	if err := ctx.Err(); err != nil { // the wait may have used up the deadline
		return upscale.Image{}, err
	}

	if err := decodeStrictly(src); err != nil {
		return upscale.Image{}, fmt.Errorf("%w: decode: %v", upscale.Explain(upscale.ErrUnsupportedImage, "The image could not be decoded; the file is truncated or corrupt."), err)
	}
	out, err := bimg.NewImage(src).Process(bimg.Options{
		Width:        outW,
		Height:       outH,
		Force:        true,
		Enlarge:      true,
		Type:         f.bimgType,
		Quality:      90,
		Compression:  6,
		Interpolator: bimg.Bicubic,
		Extend:       bimg.ExtendCopy, // edges repeat outward instead of fading into black
	})
	if err != nil {
		return upscale.Image{}, fmt.Errorf("%w: libvips: %v", upscale.ErrUpstream, err)
	}
	size, err := bimg.Size(out)
	if err != nil || size.Width != outW || size.Height != outH {
		return upscale.Image{}, fmt.Errorf("%w: libvips made %dx%d, want %dx%d (%v)", upscale.ErrUpstream, size.Width, size.Height, outW, outH, err)
	}
	return upscale.Image{Data: out, ContentType: f.contentType, Width: outW, Height: outH}, nil
}

func (e *Engine) checkLimits(f format, w, h, outW, outH int) error {
	switch {
	case w <= 0 || h <= 0:
		return upscale.Explain(upscale.ErrUnsupportedImage, "The image has no pixels.")
	case max(w, h) > e.opts.MaxSide || int64(w)*int64(h) > e.opts.MaxSourcePixels:
		return upscale.Explain(upscale.ErrImageTooLarge, "The image is %d×%d pixels; at most %d pixels and %d per side are accepted.", w, h, e.opts.MaxSourcePixels, e.opts.MaxSide)
	case max(outW, outH) > min(e.opts.MaxSide, f.maxSide) || int64(outW)*int64(outH) > e.opts.MaxOutputPixels:
		return upscale.Explain(upscale.ErrImageTooLarge, "The result would be %d×%d pixels; at most %d pixels and %d per side are produced. Use a smaller scale or image.", outW, outH, e.opts.MaxOutputPixels, min(e.opts.MaxSide, f.maxSide))
	}
	return nil
}
