package upscale

import "context"

// ImageType names the kind of content in the image, so the engine can pick a
// suitable enlargement path.
type ImageType string

// The image types of the API.
const (
	Photo ImageType = "photo"
	Anime ImageType = "anime"
)

// Denoise is the strength of noise removal, from DenoiseNone to DenoiseMax.
type Denoise string

// The denoise levels of the API, weakest first.
const (
	DenoiseNone Denoise = "none"
	DenoiseLow  Denoise = "low"
	DenoiseMid  Denoise = "mid"
	DenoiseHigh Denoise = "high"
	DenoiseMax  Denoise = "max"
)

// Scales lists the enlargement factors the API accepts, smallest first.
var Scales = []int{2, 4, 8, 16}

// Options says how to enlarge one image. The handler only passes values it
// has validated: Scale is one of Scales, ImageType and Denoise are one of the
// constants above.
type Options struct {
	Scale     int
	ImageType ImageType
	Denoise   Denoise
}

// Image is an encoded image with its pixel size.
type Image struct {
	Data        []byte
	ContentType string // "image/jpeg", "image/png" or "image/webp"
	Width       int
	Height      int
}

// Upscaler enlarges images. The default implementation is libvips, in the
// package engine/vips, and engine/onnx runs learned networks; the root
// package depends on neither.
type Upscaler interface {
	// Upscale decodes src, enlarges it by opts.Scale and encodes the result
	// in the source's format. The result is exactly Scale times the
	// upright (EXIF-oriented) source in each dimension.
	//
	// It returns an error wrapping ErrUnsupportedImage when src is not an
	// image it can decode, ErrImageTooLarge when the source or output
	// exceeds its pixel limits (checked before pixels are decoded), and
	// ErrUpstream for any other failure. When ctx is done it stops waiting
	// and returns ctx.Err(), so a deadline surfaces as
	// context.DeadlineExceeded; it should stop working on the image too,
	// since the handler has answered and nobody will fetch the result.
	Upscale(ctx context.Context, src []byte, opts Options) (Image, error)
}
