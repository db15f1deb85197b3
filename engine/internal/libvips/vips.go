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
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"image"
	"math"
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

// format is an image format the engine reads, and how it writes it.
type format struct {
	contentType string
	maxSide     int
	saver       int
	// Encoder settings.
	quality     int // JPEG and WebP
	subsample   int // JPEG chroma subsampling, a VipsForeignSubsample
	compression int // PNG zlib level
	effort      int // WebP, AVIF and GIF, for results of up to effortPixels
	largeEffort int // WebP, AVIF and GIF, for larger results
}

// effortPixels is the largest WebP result encoded at format.effort. From
// effort 3 up, libwebp writes its tokens out at the end of an encoding
// without reporting progress, so it cannot be stopped for 13-29% of its
// time: 60 ms of a 3-megapixel photo, 0.26 s of a noisy
// 4-megapixel result, seconds at 64 megapixels, where it also took 24-43 s
// against 3-5 s at effort 2 (the gaps grow faster than the image).
const effortPixels = 1 << 20

// effortFor is the effort for a result (an animation: a frame) of pixels.
func (f format) effortFor(pixels int64) int {
	if pixels > effortPixels {
		return f.largeEffort
	}
	return f.effort
}

// Encoder settings, chosen by BenchmarkEncoders (BENCHMARKS.md) on a 1024²
// photo and a 1024² cel image enlarged ×2 (4 MP results).
var (
	// JPEG at quality 90 without chroma subsampling (libvips's automatic
	// choice from quality 90 up). 4:2:0 would be a third smaller with the
	// same luma, but its chroma scored 6 dB lower on the photo (40.1
	// against 46.2 dB): an enlarged colour edge is what customers pay for.
	// It costs 0-100 ms more on the photo (two runs of six).
	jpegFormat = format{contentType: "image/jpeg", maxSide: 65535, saver: saveJPEG, quality: 90, subsample: subsampleAuto}
	// PNG is lossless at any level; level 6 made the cel image a quarter
	// smaller than levels 1-2, as fast there, and from 20 ms faster to
	// 90 ms slower on the photo, which no level compresses, across runs.
	pngFormat = format{contentType: "image/png", maxSide: 1 << 31, saver: savePNG, compression: 6}
	// WebP at quality 90, effort 4 (libvips's default): 1 dB of luma more
	// than effort 2 on the photo for about a quarter of a second more;
	// effort 6 bought nothing and took a third longer again. Above a
	// megapixel, effort 2 (effortPixels): against a result 30 dB from the
	// truth, its 0.4-0.6 dB less (at 42-51 dB from the lossless result)
	// costs about 0.02 dB, and it can be stopped within tens of
	// milliseconds.
	webpFormat = format{contentType: "image/webp", maxSide: webpMaxSide, saver: saveWebP, quality: 90, effort: 4, largeEffort: 2}
	// AVIF (AV1 in HEIF) at quality 80 of AVIF's 100 and effort 2 (aom's
	// speed 7): on the photo 46.2 dB of luma (39.8 of chroma) from the
	// lossless result, WebP's 45.8 at 78% of its size, in 2.2 s against
	// libvips's default quality 50 (40.2 dB, 1.5 s). Effort 4 bought
	// 1.4-1.6 dB for 2.6-2.7 times the time, and libheif cannot be
	// stopped while it encodes (a cancel waits for it, about 0.5 s per
	// result megapixel on two cores), so effort 2 at every size. 16384 a
	// side keeps within what decoders take.
	avifFormat = format{contentType: "image/avif", maxSide: 16384, saver: saveAVIF, quality: 80, effort: 2, largeEffort: 2}
	// GIF, for an animated GIF: each frame's palette chosen by
	// libimagequant at effort 4 and dithered, as libvips does by default
	// at effort 7, which took 1.8 times as long (391 against 214 ms a
	// 640×480 frame) for 0.36 dB of luma (BenchmarkAnimations). GIF
	// stores sides up to 65535.
	gifFormat = format{contentType: "image/gif", maxSide: 65535, saver: saveGIF, effort: 4, largeEffort: 4}
)

// sniff decides the source's kind from the file's signature alone, never
// from a Content-Type or a URL, so no other libvips loader ever sees the
// bytes: JPEG, PNG, WebP, GIF, TIFF, and HEIF files that are HEIC or AVIF
// (ISO BMFF, an ftyp box whose brands name one of them).
func sniff(src []byte) (source, bool) {
	switch {
	case bytes.HasPrefix(src, []byte{0xFF, 0xD8, 0xFF}):
		return sourceJPEG, true
	case bytes.HasPrefix(src, []byte("\x89PNG\r\n\x1a\n")):
		return sourcePNG, true
	case len(src) >= 12 && string(src[:4]) == "RIFF" && string(src[8:12]) == "WEBP":
		return sourceWebP, true
	case bytes.HasPrefix(src, []byte("GIF87a")) || bytes.HasPrefix(src, []byte("GIF89a")):
		return sourceGIF, true
	case bytes.HasPrefix(src, []byte("II*\x00")) || bytes.HasPrefix(src, []byte("MM\x00*")):
		return sourceTIFF, true
	}
	return sniffHEIF(src)
}

// sniffHEIF reads an ISO BMFF file's ftyp box: its major brand, then its
// compatible ones, the first that is AVIF's or HEIC's deciding.
func sniffHEIF(src []byte) (source, bool) {
	if len(src) < 16 || string(src[4:8]) != "ftyp" {
		return 0, false
	}
	size := int(binary.BigEndian.Uint32(src[:4]))
	if size < 16 || size > len(src) || size%4 != 0 {
		return 0, false
	}
	brands := []string{string(src[8:12])}
	for at := 16; at+4 <= size; at += 4 {
		brands = append(brands, string(src[at:at+4]))
	}
	for _, brand := range brands {
		switch brand {
		case "avis": // a sequence: an animation
			return sourceAVIFSequence, true
		case "avif":
			return sourceAVIF, true
		case "heic", "heix", "heim", "heis", "hevc", "hevx":
			return sourceHEIC, true
		}
	}
	return 0, false
}

// source is a kind of file the engine reads.
type source int

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

// frames is how many frames of a source the engine enlarges: every frame
// of an animated GIF or WebP, one of anything else (a TIFF's first page, a
// HEIF's primary image).
func frames(kind source, l layout) int {
	if kind == sourceGIF || kind == sourceWebP {
		return max(l.pages, 1)
	}
	return 1
}

// output is the format a result of a src source is written in: a
// browser's, the source's own where browsers show it; HEIC and TIFF as
// JPEG, or PNG when they have alpha; a still GIF as PNG, an animated one
// as GIF. An AVIF animation (a sequence) is refused, never flattened to
// one frame.
func output(kind source, l layout, meta bimg.ImageMetadata) (format, error) {
	switch {
	case kind == sourceAVIFSequence:
		return format{}, upscale.Explain(upscale.ErrUnsupportedImage, msgAVIFSequence)
	case !l.samples:
		return format{}, upscale.Explain(upscale.ErrUnsupportedImage, "The image's samples are floating-point, signed, 32-bit or CIELAB; only 8- and 16-bit RGB, grey or CMYK images are read.")
	}
	switch kind {
	case sourceJPEG:
		return jpegFormat, nil
	case sourceWebP:
		return webpFormat, nil
	case sourceAVIF:
		return avifFormat, nil
	case sourceGIF:
		if frames(kind, l) > 1 {
			return gifFormat, nil
		}
	case sourceHEIC, sourceTIFF:
		if !meta.Alpha {
			return jpegFormat, nil
		}
	}
	return pngFormat, nil
}

// msgAVIFSequence refuses an animated AVIF.
const msgAVIFSequence = "The image is an AVIF animation; AVIF animations are not enlarged. Send it as an animated GIF or WebP, or one frame as a still image."

// msgUnreadable is the refusal of a header that cannot be read.
const msgUnreadable = "The image header could not be read; the file may be truncated or corrupt."

// recipe is how one imageType and denoise level enlarge an image.
type recipe struct {
	interpolator string // libvips interpolator nickname
	denoise      denoising
	sharpen      float64 // unsharp-mask amount, on the source; 0 is off
	sharpenSigma float64 // in source pixels
	clamp        bool    // clamp each result pixel to the range of its 3×3 source pixels (needs bicubic)
}

// denoising is one denoise level's filter (denoise.c); the zero value is
// off.
type denoising struct {
	noise float64 // drop DCT coefficients below noise × the measured noise sigma
	quant float64 // and, for a JPEG source, below quant × the step JPEG rounded them to
	step  int     // shift between block grids, in pixels
}

// recipeFor chooses the recipe for opts. Every value was chosen by the
// quality benchmark (BENCHMARKS.md, make bench):
//
//   - photo: an unsharp mask on the source (amount 0.5, sigma 1 source
//     pixel), centred bicubic, and a clamp of each result pixel to the range
//     of its 3×3 source neighbourhood, so the sharpening cannot overshoot
//     into halos: +0.9 dB over plain bicubic at ×2, +0.7 at ×4, and above
//     plain nohalo. Nohalo with the same mask scores 0.3 dB more, but in
//     libvips 8.14 it takes about 15 times as long (2.4 s against 0.16 s for
//     a 1024² JPEG at ×2, on one thread), so bicubic it is. Sharpening the
//     source rather than the result costs 0.1 dB and saves all but 1/s² of
//     the work.
//   - anime: a stronger, tighter mask (amount 1.5, sigma 0.75), which pays
//     on flat colours and outlines, where the clamp keeps edges free of
//     ringing, and costs on photographic texture.
//
// Denoise levels filter the source before it is sharpened and enlarged
// (denoise.c): in 8×8 DCT blocks on grids 2 pixels apart, every
// coefficient below k times the noise measured in that plane is dropped,
// and for a JPEG source also below a fraction of the step JPEG rounded it
// to; the luma blocks are then moved back to what the JPEG file allows. A
// source with nothing to remove (cleanNoise) is not filtered at all:
//
//	none  no filtering
//	low   k = 1.5, 1/4 step
//	mid   k = 2, 1/2 step
//	high  k = 2.5, 1/2 step
//	max   k = 3, 3/4 step
func recipeFor(opts upscale.Params) recipe {
	r := recipe{interpolator: "bicubic", sharpen: 0.5, sharpenSigma: 1, clamp: true}
	if opts.ImageType == upscale.Anime {
		r.sharpen, r.sharpenSigma = 1.5, 0.75
	}
	r.denoise = denoiseLevels[opts.Denoise]
	return r
}

// A denoise level filters a source only when it has something to remove:
// its noise (Pixels.Noise) reads at least cleanNoise, or it is a JPEG
// below cleanJPEGQuality. Otherwise the filter would only cost detail (max
// cost clean Set5 ×2 0.33 dB) and time (three times the enlargement's),
// so max, the API's default, costs a clean source what none costs.
const (
	cleanNoise       = 2.3
	cleanJPEGQuality = 90
)

var denoiseLevels = map[upscale.Denoise]denoising{
	upscale.DenoiseNone: {},
	upscale.DenoiseLow:  {noise: 1.5, quant: 0.25, step: 2},
	upscale.DenoiseMid:  {noise: 2, quant: 0.5, step: 2},
	upscale.DenoiseHigh: {noise: 2.5, quant: 0.5, step: 2},
	upscale.DenoiseMax:  {noise: 3, quant: 0.75, step: 2},
}

// Upscale implements upscale.Upscaler: it checks src's header against
// the limits, decodes it strictly, enlarges it by the recipe of
// opts.ImageType and opts.Denoise, and encodes the result in the source's
// format (or fits it, Image.Fitted). A file refused is
// ErrUnsupportedImage or ErrImageTooLarge; ctx's end stops it within a
// strip or a frame.
func (e *Engine) Upscale(ctx context.Context, src []byte, opts upscale.Params) (upscale.Image, error) {
	f, meta, g, err := e.inspect(src, opts.Scale)
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

// Header reads src's header with the checks and errors of Upscale for a
// result scale times its size; no pixel is decoded.
func (e *Engine) Header(src []byte, scale int) (Header, error) {
	f, meta, g, err := e.inspect(src, scale)
	if err != nil {
		return Header{}, err
	}
	size := uprightSize(meta)
	kind, _ := sniff(src)
	h := Header{
		Width: size.X, Height: size.Y, Frames: g.frames, DecodedPixels: g.decodedPixels, Scale: g.scale, Result: g.size, Fitted: g.fitted,
		Bands: meta.Channels, SampleBytes: 1, PNG: f == pngFormat,
		WholeSource: sequential(meta) == 0 || g.frames > 1 || kind == sourceHEIC || kind == sourceAVIF || kind == sourceGIF,
		WholeResult: f == avifFormat || f == webpFormat || g.frames > 1,
		WebP:        f == webpFormat,
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
	h, err := e.Header(src, upscale.Scales()[0])
	return h.DecodedPixels, err
}

// EncodedBytes bounds the size of h's result once encoded: the raw size
// for PNG (photographs compress little losslessly), half of it for JPEG,
// WebP and AVIF.
func (h Header) EncodedBytes() int64 {
	raw := h.resultBytes()
	if !h.PNG {
		raw /= 2
	}
	return raw
}

// OutputBytes bounds what encoding h's result holds at its peak: the
// encoded result twice (libvips' output buffer and its copy in Go
// memory), the whole raw result where it is held (WholeResult), and a
// WebP frame's YUV planes: 100 MP of RGBA were estimated at 400 MB as if
// streamed, and held 650.
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
	h, err := e.Header(src, opts.Scale)
	if err != nil {
		return 0, err
	}
	need := h.OutputBytes()
	if h.WholeSource || recipeFor(opts).denoise.step > 0 {
		need += h.sourceBytes()
	}
	return need, nil
}

// inspect decides src's format from its signature and reads its header,
// and checks e's limits for a result scale times its upright size: no pixel
// is decoded before the limits are checked.
func (e *Engine) inspect(src []byte, scale int) (format, bimg.ImageMetadata, geometry, error) {
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
	f, err := output(kind, l, meta)
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
	g, err := e.plan(f, uprightSize(meta), n, scale, decoded)
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

// failure tells why libvips failed on src, of frames frames, whose header
// says meta: the caller went, the source is corrupt (the caller's fault),
// or the engine failed.
func failure(ctx context.Context, src []byte, meta bimg.ImageMetadata, frames int, err error) error {
	if err := ctx.Err(); err != nil { // libvips stopped because the caller went
		return err
	}
	switch decodeErr := decodeStrictly(ctx, src, meta, frames); {
	case ctx.Err() != nil: // the caller went during the decode
		return decodeErr
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
