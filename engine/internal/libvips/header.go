package libvips

import (
	"fmt"
	"image"
	"math"

	"strings"

	"github.com/h2non/bimg"

	"github.com/upscalekit/upscale"
)

// Header is what a source's header says, once its EXIF orientation is
// applied, and the result it makes for a scale.
type Header struct {
	// Width and Height are a frame's; Frames counts an animation's
	// frames, 1 for a still image.
	Width, Height int
	Frames        int
	// DecodedPixels is what decoding the source makes: its frames'
	// pixels, or, for a HEIC or AVIF, the pixels libheif makes when they
	// are more (a grid's tiles whole, and its alpha image).
	DecodedPixels int64
	// Scale is the enlargement the result is made by, a power of two:
	// the scale asked for, or, for a Fitted result, the largest power of
	// two within the fit. Result is the size of the result's frames.
	Scale  int
	Result image.Point
	// Fitted reports whether the result is the largest the engine makes
	// with the source's aspect ratio, smaller than the scale asked for
	// would make it.
	Fitted bool
	// Bands counts the samples of a pixel, alpha included.
	Bands int
	// SampleBytes is 2 for 16-bit sources, else 1.
	SampleBytes int
	// PNG reports whether the result is saved losslessly, and so is about
	// as large as its raw pixels.
	PNG bool
	// WholeSource reports whether the source is decoded whole rather than
	// streamed: turned for its EXIF orientation, an animation, or a HEIC,
	// AVIF or GIF, whose decoders make the whole image. WholeResult,
	// whether the whole raw result is held: by libheif, to encode an AVIF;
	// by webp.c, which makes a WebP frame in memory to import it; or as
	// an animation's frames, made one by one into memory.
	WholeSource, WholeResult bool
	// WebP reports whether the result is WebP, which libwebp encodes
	// from YUV planes of a whole frame (webp.c's import_bands), held
	// beside the raw frame while they are made.
	WebP bool
}

// Header reads src's header with the checks and errors of Upscale for
// the result p asks (its scale, its format); no pixel is decoded.
func (e *Engine) Header(src []byte, p upscale.Params) (Header, error) {
	f, meta, g, err := e.inspect(src, p)
	if err != nil {
		return Header{}, err
	}
	size := uprightSize(meta)
	kind, _ := sniff(src)
	h := Header{
		Width: size.X, Height: size.Y, Frames: g.frames, DecodedPixels: g.decodedPixels, Scale: g.scale, Result: g.size, Fitted: g.fitted,
		Bands: meta.Channels, SampleBytes: 1, PNG: f.is(pngFormat),
		WholeSource: sequential(meta) == 0 || g.frames > 1 || kind == sourceHEIC || kind == sourceAVIF || kind == sourceGIF,
		WholeResult: f.is(avifFormat) || f.is(webpFormat) || g.frames > 1,
		WebP:        f.is(webpFormat),
	}
	if strings.HasSuffix(meta.Space, "16") { // rgb16, grey16
		h.SampleBytes = 2
	}
	return h, nil
}

// SourcePixels implements upscale.SizeReader: the pixels decoding src
// makes (Header.DecodedPixels), read from its header as Upscale reads it
// for the smallest scale.
func (e *Engine) SourcePixels(src []byte) (int64, error) {
	h, err := e.Header(src, upscale.Params{Scale: upscale.Scales()[0]})
	return h.DecodedPixels, err
}

// EncodedBytes bounds the size of h's result once encoded: for PNG the
// raw size, a filter byte a row and a 256th for deflate's and PNG's
// framing, the size of the stored rows libvips writes for Encode's
// packPNG (photographs compress little losslessly anyway); half the raw
// size for JPEG, WebP and AVIF.
func (h Header) EncodedBytes() int64 {
	raw := h.resultBytes()
	if !h.PNG {
		return raw / 2
	}
	return raw + int64(h.Result.Y)*int64(h.Frames) + raw/256
}

// OutputBytes bounds what encoding h's result holds at its peak: the
// encoded result twice (libvips' output buffer and its copy in Go
// memory; for Encode's PNG, libvips's stored rows and packPNG's parts,
// the rows freed before the parts are copied into the file, and deflate
// makes rows at most a little larger), the whole raw result where it is
// held (WholeResult), and a WebP frame's YUV planes: 100 MP of RGBA were
// estimated at 400 MB as if streamed, and held 650.
func (h Header) OutputBytes() int64 {
	need := 2 * h.EncodedBytes()
	if h.WholeResult {
		need += h.resultBytes()
	}
	if h.WebP {
		need += h.webpPlanes()
	}
	return need
}

// webpPlanes is the size of the YUV planes libwebp encodes a frame of
// h's result from: luma and, for an alpha, alpha at full resolution, and
// two chroma planes at half in each direction (4:2:0).
func (h Header) webpPlanes() int64 {
	w, ht := int64(h.Result.X), int64(h.Result.Y)
	planes := w*ht + 2*((w+1)/2)*((ht+1)/2)
	if h.Bands%2 == 0 { // grey or colour with alpha
		planes += w * ht
	}
	return planes
}

// resultBytes is the size of h's result's raw pixels, every frame's.
func (h Header) resultBytes() int64 {
	return int64(h.Result.X) * int64(h.Result.Y) * int64(h.Frames) * int64(h.Bands*h.SampleBytes)
}

// sourceBytes is the size of h's source's raw pixels as decoding makes
// them, every frame's, every tile's.
func (h Header) sourceBytes() int64 {
	return h.DecodedPixels * int64(h.Bands*h.SampleBytes)
}

// EstimateMemory implements upscale.MemoryEstimator. The pipeline streams
// from decoder to encoder, so what it holds whole is what encoding holds
// (OutputBytes), and the decoded source when it is read twice to denoise
// or decoded whole (WholeSource). Each worker's strips, a few MiB, belong to the process's
// constant (docs/operating.md, "Memory").
func (e *Engine) EstimateMemory(src []byte, opts upscale.Params) (int64, error) {
	h, err := e.Header(src, opts)
	return h.workingMemory(opts), err
}

// workingMemory is EstimateMemory's answer for h.
func (h Header) workingMemory(opts upscale.Params) int64 {
	need := h.OutputBytes()
	if h.WholeSource || recipeFor(opts).denoise.step > 0 {
		need += h.sourceBytes()
	}
	return need
}

// InspectSource implements upscale.SourceInspector: SourcePixels and
// EstimateMemory from one reading of src's header.
func (e *Engine) InspectSource(src []byte, opts upscale.Params) (upscale.SourceReport, error) {
	h, err := e.Header(src, opts)
	if err != nil {
		return upscale.SourceReport{}, err
	}
	return upscale.SourceReport{Pixels: h.DecodedPixels, Memory: h.workingMemory(opts)}, nil
}

// inspect decides src's format from its signature and reads its header,
// and checks e's limits for a result scale times its upright size: no pixel
// is decoded before the limits are checked.
func (e *Engine) inspect(src []byte, p upscale.Params) (format, bimg.ImageMetadata, geometry, error) {
	kind, ok := sniff(src)
	if !ok {
		return format{}, bimg.ImageMetadata{}, geometry{}, upscale.Explain(upscale.ErrUnsupportedImage, "The file is not a JPEG, PNG, WebP, GIF, HEIC, AVIF or TIFF image.")
	}
	var decoded heifDecode
	if kind == sourceHEIC || kind == sourceAVIF || kind == sourceAVIFSequence {
		err := checkHEIFReferences(src)
		if err == nil {
			decoded, err = checkHEIFSizes(src)
		}
		if err != nil {
			return format{}, bimg.ImageMetadata{}, geometry{}, err
		}
	}
	meta, err := bimg.NewImage(src).Metadata()
	if err != nil {
		return format{}, bimg.ImageMetadata{}, geometry{}, fmt.Errorf("%w: read header: %v", upscale.Explain(upscale.ErrUnsupportedImage, msgUnreadable), err)
	}
	l, err := readLayout(src)
	if err != nil {
		return format{}, bimg.ImageMetadata{}, geometry{}, fmt.Errorf("%w: read header: %v", upscale.Explain(upscale.ErrUnsupportedImage, msgUnreadable), err)
	}
	// The orientation libvips turns the image by, not another parser's
	// reading of it: they differ on a malformed EXIF block, and the
	// result's size must be what libvips makes.
	meta.Orientation = l.orientation
	f, err := output(kind, l, meta, p)
	if err != nil {
		return format{}, bimg.ImageMetadata{}, geometry{}, err
	}
	if kind == sourceGIF {
		if err := checkGIF(src); err != nil {
			return format{}, bimg.ImageMetadata{}, geometry{}, err
		}
	}
	n := frames(kind, l)
	if n > 1 {
		meta.Orientation = 1 // an animation's frames are not turned, as browsers do not turn them
	}
	g, err := e.plan(f, uprightSize(meta), n, p.Scale, decoded)
	if err != nil {
		return format{}, bimg.ImageMetadata{}, geometry{}, err
	}
	return f, meta, g, nil
}

// uprightSize is the size of the source once its EXIF orientation is
// applied: orientations 5-8 turn it a quarter.
func uprightSize(meta bimg.ImageMetadata) image.Point {
	if meta.Orientation >= 5 {
		return image.Pt(meta.Size.Height, meta.Size.Width)
	}
	return image.Pt(meta.Size.Width, meta.Size.Height)
}

// geometry is how a result is made from an upright source: enlarged by
// scale, a power of two, and, when the source enlarged by the scale asked
// for would exceed the engine's largest result (Options.MaxOutputPixels,
// MaxSide, the format's side), fitted: resized to the largest size within
// them with the source's aspect ratio, scale being the largest power of
// two the fit still enlarges by. An animation's frames are each made so.
type geometry struct {
	scale  int
	size   image.Point // a frame's of the result
	frames int
	fitted bool
	// decodedPixels is what decoding the source makes: its frames'
	// pixels, or a HEIC's or AVIF's tiles and alpha when they are more.
	decodedPixels int64
}

// plan refuses a source of frames frames over the engine's source limits
// and returns how its result is made for scale. decoded is what decoding
// a HEIC or AVIF source makes (checkHEIFSizes), zero for other formats.
func (e *Engine) plan(f format, source image.Point, frames, scale int, decoded heifDecode) (geometry, error) {
	w, h := source.X, source.Y
	pixels := int64(w) * int64(h) * int64(frames)
	what := fmt.Sprintf("The image is %d×%d pixels", w, h)
	if frames > 1 {
		what = fmt.Sprintf("The animation is %d frames of %d×%d pixels, %d in all", frames, w, h, pixels)
	}
	switch {
	case w <= 0 || h <= 0:
		return geometry{}, upscale.Explain(upscale.ErrUnsupportedImage, "The image has no pixels.")
	case frames > e.opts.MaxFrames:
		return geometry{}, upscale.Explain(upscale.ErrImageTooLarge, "The animation has %d frames; at most %d are accepted.", frames, e.opts.MaxFrames)
	case max(w, h) > e.opts.MaxSide || pixels > e.opts.MaxSourcePixels:
		return geometry{}, upscale.Explain(upscale.ErrImageTooLarge, "%s; at most %d pixels and %d per side are accepted.", what, e.opts.MaxSourcePixels, e.opts.MaxSide)
	case decoded.side > e.opts.MaxSide || decoded.pixels > maxDecodedPixels(e.opts.MaxSourcePixels):
		return geometry{}, upscale.Explain(upscale.ErrImageTooLarge, "%s, but decoding it makes %d pixels, %d on its longest side (its tiles whole, and its alpha image); at most %d and %d are accepted.",
			what, decoded.pixels, decoded.side, maxDecodedPixels(e.opts.MaxSourcePixels), e.opts.MaxSide)
	}
	g, ok := e.fit(f, source, pixels, scale)
	if !ok {
		return geometry{}, upscale.Explain(upscale.ErrImageTooLarge, "%s; a result at least as large is over the %d pixels and %d per side produced.", what, e.opts.MaxOutputPixels, min(e.opts.MaxSide, f.maxSide))
	}
	if int64(frames)*int64(g.size.Y) > maxStripHeight {
		return geometry{}, upscale.Explain(upscale.ErrImageTooLarge, "%s; its enlarged frames, one above the other, would be over the %d rows the engine makes.", what, maxStripHeight)
	}
	g.frames, g.decodedPixels = frames, max(pixels, decoded.pixels)
	return g, nil
}

// maxDecodedPixels caps the pixels libheif may make to decode a HEIC or
// AVIF source of at most maxSource pixels: a grid's tiles are decoded
// whole, up to an eighth more than the image where they overhang its
// right and bottom edges (a 48 MP phone photo's 512-pixel tiles make
// 50.3 MP), and its alpha image as much again.
func maxDecodedPixels(maxSource int64) int64 {
	return 2 * (maxSource + maxSource/8)
}

// fit is plan's geometry for a source whose frames hold pixels in all,
// or false when even a result of the source's own size would not fit.
func (e *Engine) fit(f format, source image.Point, pixels int64, scale int) (geometry, bool) {
	w, h := source.X, source.Y
	side := min(e.opts.MaxSide, f.maxSide)
	if max(w, h)*scale <= side && pixels*int64(scale*scale) <= e.opts.MaxOutputPixels {
		return geometry{scale: scale, size: source.Mul(scale)}, true
	}
	bySide, byPixels := float64(side)/float64(max(w, h)), math.Sqrt(float64(e.opts.MaxOutputPixels)/float64(pixels))
	factor := min(bySide, byPixels)
	fit := image.Pt(int(float64(w)*factor), int(float64(h)*factor))
	if bySide <= byPixels { // the long side is exactly the limit, whatever floats round to
		if w >= h {
			fit = image.Pt(side, int(int64(h)*int64(side)/int64(w)))
		} else {
			fit = image.Pt(int(int64(w)*int64(side)/int64(h)), side)
		}
	}
	if factor < 1 || fit.X < w || fit.Y < h {
		return geometry{}, false
	}
	g := geometry{scale: 1, size: fit, fitted: true}
	for 2*g.scale <= int(factor) {
		g.scale *= 2
	}
	return g, true
}
