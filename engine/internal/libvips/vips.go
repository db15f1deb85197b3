// Package libvips is engine/vips's implementation, on libvips, and the
// codec engine/onnx shares with it (Decode, Encode, Pixels, Header): it is
// internal so that the codec is no part of either engine's public API. bimg
// starts libvips and reads image headers; the enlargement itself is one
// libvips pipeline driven from cgo (pipeline.c, with the enlargement pass
// in upsample.c, the denoiser in denoise.c, the noise estimate in noise.c,
// the WebP encoder in webp.c and what results keep of their sources'
// metadata in metadata.c), because bimg cannot sample centred,
// stream with sequential access, premultiply alpha, decode strictly or
// stop an encoder. It needs cgo, libvips and libexif (Debian: libvips-dev,
// libexif-dev).
package libvips

import (
	"context"

	"fmt"

	"runtime"
	"strings"

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
	// DefaultMaxFrames admits an animation of 1000 frames, 40 seconds at
	// 25 frames a second.
	DefaultMaxFrames = 1000
)

// maxStripHeight is the tallest image libvips makes (VIPS_MAX_COORD): an
// animation is enlarged as one, its frames one above the other.
const maxStripHeight = 10_000_000

// webpMaxSide is the largest side the WebP format can store.
const webpMaxSide = 16383

// Options configures an Engine. Every zero field means the default beside it.
type Options struct {
	// MaxSourcePixels caps width×height of a source, times its frames
	// for an animation. Zero means DefaultMaxSourcePixels.
	MaxSourcePixels int64
	// MaxOutputPixels caps width×height of a result, times its frames
	// for an animation. Zero means DefaultMaxOutputPixels.
	MaxOutputPixels int64
	// MaxSide caps each side of a source and of a result. Zero means
	// DefaultMaxSide.
	MaxSide int
	// MaxFrames caps the frames of an animation. Zero means
	// DefaultMaxFrames.
	MaxFrames int
	// Concurrency is how many images are enlarged at once; further
	// requests queue, and their wait counts against their deadline. Zero
	// means the number of CPUs.
	Concurrency int
}

// Engine enlarges JPEG, PNG, WebP, GIF, HEIC, AVIF and TIFF images with
// libvips, animated GIFs and WebPs frame by frame. It is safe for
// concurrent use. When an image's context is done, the work on it stops
// within milliseconds (libwebp, encoding a WebP result, at its next
// percent of progress; libheif, encoding an AVIF result, only once it is
// done: BENCHMARKS.md) and Upscale returns ctx.Err(), so a caller who has
// gone or a deadline that has passed frees the slot at once.
type Engine struct {
	opts  Options
	slots chan struct{}
}

var (
	_ upscale.ConcurrentUpscaler = (*Engine)(nil)
	_ upscale.MemoryEstimator    = (*Engine)(nil)
	_ upscale.MemoryReleaser     = (*Engine)(nil)
	_ upscale.SourceInspector    = (*Engine)(nil)
)

// Concurrency is how many images the Engine enlarges at once
// (Options.Concurrency).
func (e *Engine) Concurrency() int { return e.opts.Concurrency }

// New returns an Engine. The first call restricts libvips, for the whole
// process, to its JPEG, PNG, WebP, GIF, HEIF and TIFF loaders, turns its
// operation cache off and sends what it logs to slog.Default() at debug
// level instead of stderr; a program that also uses libvips for other
// formats should not share the process with an Engine.
func New(opts Options) *Engine {
	configureLibvips()
	if opts.MaxSourcePixels == 0 {
		opts.MaxSourcePixels = DefaultMaxSourcePixels
	}
	if opts.MaxOutputPixels == 0 {
		opts.MaxOutputPixels = DefaultMaxOutputPixels
	}
	if opts.MaxSide == 0 {
		opts.MaxSide = DefaultMaxSide
	}
	if opts.MaxFrames == 0 {
		opts.MaxFrames = DefaultMaxFrames
	}
	if opts.Concurrency == 0 {
		opts.Concurrency = runtime.NumCPU()
	}
	return &Engine{opts: opts, slots: make(chan struct{}, opts.Concurrency)}
}

const (
	sourceJPEG source = iota
	sourcePNG
	sourceWebP
	sourceGIF
	sourceTIFF
	sourceHEIC
	sourceAVIF
	sourceAVIFSequence
)

// Upscale implements upscale.Upscaler: it checks src's header against
// the limits, decodes it strictly, enlarges it by the recipe of
// opts.ImageType and opts.Denoise, and encodes the result in the source's
// format (or fits it, Image.Fitted). A file refused is
// ErrUnsupportedImage or ErrImageTooLarge; ctx's end stops it within a
// strip or a frame.
func (e *Engine) Upscale(ctx context.Context, src []byte, opts upscale.Params) (upscale.Image, error) {
	f, meta, g, err := e.inspect(src, opts)
	if err != nil {
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
	out, err := run(ctx, src, f, g, recipeFor(opts), meta)
	if err != nil {
		return upscale.Image{}, failure(ctx, src, meta, g.frames, err)
	}
	return result(out, f, g)
}

// failure tells why libvips failed on src, of frames frames, whose header
// says meta: the caller went, the source is corrupt (the caller's fault),
// or the engine failed.
func failure(ctx context.Context, src []byte, meta bimg.ImageMetadata, frames int, err error) error {
	if err := ctx.Err(); err != nil { // libvips stopped because the caller went
		return err
	}
	switch decodeErr := decodeStrictly(ctx, src, meta, frames); {
	case ctx.Err() != nil: // the caller went during the decode
		return ctx.Err()
	case decodeErr != nil:
		return fmt.Errorf("%w: decode: %v", upscale.Explain(upscale.ErrUnsupportedImage, "The image could not be decoded; the file is truncated or corrupt."), decodeErr)
	}
	return fmt.Errorf("%w: libvips: %v", upscale.ErrUpstream, err)
}

// result checks that an encoded result has the size and frames it must
// have.
func result(out []byte, f format, g geometry) (upscale.Image, error) {
	size, err := bimg.Size(out)
	if err != nil || size.Width != g.size.X || size.Height != g.size.Y {
		return upscale.Image{}, fmt.Errorf("%w: libvips made %dx%d, want %v (%v)", upscale.ErrUpstream, size.Width, size.Height, g.size, err)
	}
	if g.frames > 1 {
		if l, err := readLayout(out); err != nil || l.pages != g.frames {
			return upscale.Image{}, fmt.Errorf("%w: libvips made %d frames, want %d (%v)", upscale.ErrUpstream, l.pages, g.frames, err)
		}
	}
	img := upscale.Image{Data: out, ContentType: f.contentType, Width: g.size.X, Height: g.size.Y, Fitted: g.fitted}
	var steps []string
	if g.scale > 1 {
		steps = append(steps, fmt.Sprintf("classical;scale=%d", g.scale))
	}
	if g.fitted {
		steps = append(steps, fmt.Sprintf("fit;width=%d;height=%d", g.size.X, g.size.Y))
	}
	img.Engine = strings.Join(steps, ", ")
	return img, nil
}
