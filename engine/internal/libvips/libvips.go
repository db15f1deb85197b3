package libvips

/*
#cgo pkg-config: vips libwebp libwebpmux libexif
#cgo CFLAGS: -O3
#cgo LDFLAGS: -lm
#include <stdlib.h>
#ifdef __GLIBC__
#include <malloc.h>
static void trim(void) { malloc_trim(0); }
#else
static void trim(void) {}
#endif

#include "pipeline.h"
*/
import "C"

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/h2non/bimg"
)

// configureLibvips sets libvips up for the whole process, which is why New
// says so. libvips is already started by then: bimg starts it when it is
// imported, with one worker thread per image, which is kept (the Engine
// runs Concurrency images at once instead).
//
//   - It loads JPEG, PNG, WebP, GIF, HEIF (HEIC and AVIF) and TIFF and
//     nothing else: every other loader (SVG, PDF, JXL, FITS, Matlab,
//     ImageMagick's, ...) is blocked, the untrusted ones first of all.
//     sniff already refuses those formats before libvips sees them; this
//     is the second line, should a file ever get past it.
//   - What libvips logs goes to slog.Default() (logFromLibvips), not to
//     stderr.
//   - The operation cache is off. Every request brings new pixels, so it
//     never hits; bimg's 100 MB / 500 operations only kept finished
//     requests' images alive, and its bookkeeping cost throughput: two
//     images at once went from 4.7 to 6.8 per second without it
//     (BENCHMARKS.md).
var configureLibvips = sync.OnceFunc(func() { C.configure_libvips() })

// decodeStrictly decodes all of src, every frame of an animation of
// frames frames, as the pipeline reads it (the same loader, options and
// access; meta is what its header says), and fails on any decoder error
// or truncation. It runs only after the pipeline failed, to tell a corrupt
// source (the caller's fault) from a failure of the engine, and stops as
// the pipeline does once ctx is done, returning ctx's error: a request
// past its deadline does not hold its engine slot for a whole decode.
func decodeStrictly(ctx context.Context, src []byte, meta bimg.ImageMetadata, frames int) error {
	cancelled, stop := cancelOn(ctx)
	defer stop()
	status := C.decode_strictly(unsafe.Pointer(unsafe.SliceData(src)), C.size_t(len(src)), C.int(frames), sequential(meta), cancelled)
	if err := ctx.Err(); err != nil {
		C.vips_error_clear()
		return err
	}
	if status == 0 {
		return nil
	}
	return vipsError()
}

// vipsError takes the message out of libvips's one error buffer. A failure
// on another goroutine at the same moment may show in it too; it is only
// logged.
func vipsError() error {
	msg := C.GoString(C.vips_error_buffer())
	C.vips_error_clear()
	return errors.New(msg)
}

// The savers of save_params, by format.
const (
	saveJPEG = C.SAVE_JPEG
	savePNG  = C.SAVE_PNG
	saveWebP = C.SAVE_WEBP
	saveAVIF = C.SAVE_AVIF
	saveGIF  = C.SAVE_GIF
)

// layout is what src's header says of its pages (an animation's frames, a
// TIFF's pages) and samples, for the formats that vary in them.
type layout struct {
	pages int
	// orientation is the EXIF orientation libvips reads and vips_autorot
	// applies, which a malformed EXIF block can make differ from what
	// other parsers read.
	orientation int
	// samples reports whether the samples are ones the pipeline reads:
	// 8- or 16-bit unsigned, sRGB, grey or CMYK, as JPEG, PNG and WebP
	// always are. A TIFF or HEIF may hold floats, signed or 32-bit
	// integers, or CIELAB.
	samples bool
}

func readLayout(src []byte) (layout, error) {
	var pages C.int
	var format C.VipsBandFormat
	var interpretation C.VipsInterpretation
	var orientation C.int
	if C.read_layout(unsafe.Pointer(unsafe.SliceData(src)), C.size_t(len(src)), &pages, &format, &interpretation, &orientation) != 0 {
		return layout{}, vipsError()
	}
	l := layout{pages: int(pages), orientation: int(orientation)}
	switch interpretation {
	case C.VIPS_INTERPRETATION_sRGB, C.VIPS_INTERPRETATION_RGB16, C.VIPS_INTERPRETATION_B_W, C.VIPS_INTERPRETATION_GREY16,
		C.VIPS_INTERPRETATION_CMYK, C.VIPS_INTERPRETATION_RGB, C.VIPS_INTERPRETATION_MULTIBAND:
		l.samples = format == C.VIPS_FORMAT_UCHAR || format == C.VIPS_FORMAT_USHORT
	}
	return l, nil
}

// PNG row filters: none, or each row's bytes less the pixel's above (up)
// or its Paeth predictor.
const (
	pngFilterNone  = C.VIPS_FOREIGN_PNG_FILTER_NONE
	pngFilterUp    = C.VIPS_FOREIGN_PNG_FILTER_UP
	pngFilterPaeth = C.VIPS_FOREIGN_PNG_FILTER_PAETH
)

// JPEG chroma subsampling modes: libvips's automatic choice (none from
// quality 90 up), always 4:2:0, or never.
const (
	subsampleAuto = C.VIPS_FOREIGN_SUBSAMPLE_AUTO
	subsampleOn   = C.VIPS_FOREIGN_SUBSAMPLE_ON
	subsampleOff  = C.VIPS_FOREIGN_SUBSAMPLE_OFF
)

// saveParams is f in C, for a result of pixels.
func (f format) saveParams(pixels int64) C.save_params {
	return C.save_params{
		saver:       C.int(f.saver),
		quality:     C.int(f.quality),
		subsample:   C.int(f.subsample),
		compression: C.int(f.compression),
		filter:      C.int(f.filter),
		effort:      C.int(f.effortFor(pixels)),
	}
}

// enlargeParams is r at scale in C. src, the encoded source, gives a JPEG's
// quantisation tables to the denoiser, and meta its orientation. Call free
// once the C call is over.
func (r recipe) enlargeParams(g geometry, src []byte, meta bimg.ImageMetadata) (p C.enlarge_params, free func()) {
	interpolator := C.CString(r.interpolator)
	p = C.enlarge_params{
		scale:         C.int(g.scale),
		interpolator:  interpolator,
		sharpen:       C.double(r.sharpen),
		sharpen_sigma: C.double(r.sharpenSigma),
		clamp:         cBool(r.clamp),
	}
	if g.fitted {
		p.width, p.height = C.int(g.size.X), C.int(g.size.Y)
	}
	if d := r.denoise; d.step > 0 {
		p.denoise = C.denoise_params{noise_threshold: C.double(d.noise), quant_threshold: C.double(d.quant), step: C.int(d.step)}
		p.clean_below = C.double(cleanNoise)
		if luma, chroma, ok := quantTables(src); ok {
			if ijgQuality(luma) < cleanJPEGQuality {
				p.clean_below = 0 // compressed enough to need filtering, however quiet it reads
			}
			blocks := uprightBlocks(meta.Orientation, meta.Size.Width, meta.Size.Height)
			if blocks.transposed {
				luma, chroma = transpose(luma), transpose(chroma)
			}
			p.block_x, p.block_y = C.int(blocks.x), C.int(blocks.y)
			p.denoise.has_tables = 1
			for i := range 64 {
				p.denoise.luma_table[i], p.denoise.chroma_table[i] = C.float(luma[i]), C.float(chroma[i])
			}
		}
	}
	return p, func() { C.free(unsafe.Pointer(interpolator)) }
}

// cancelOn returns the flag libvips polls while it works, set once ctx is
// done, and a function that stops watching ctx. Go memory is fine for the
// flag, since libvips only reads it during the call.
func cancelOn(ctx context.Context) (flag *C.gint, stop func() bool) {
	cancelled := new(int32)
	stop = context.AfterFunc(ctx, func() { atomic.StoreInt32(cancelled, 1) })
	return (*C.gint)(unsafe.Pointer(cancelled)), stop
}

// sequential reports whether a source can be read with sequential access,
// which keeps only a few of its rows in memory: not when it must be turned.
func sequential(meta bimg.ImageMetadata) C.int {
	if meta.Orientation <= 1 {
		return 1
	}
	return 0
}

// run decodes src strictly and enlarges it by scale following r, in one
// libvips pipeline that streams from the decoder to the encoder, and
// returns the encoded result. meta is what src's header says. Once ctx is
// done, the pipeline stops within milliseconds (pipeline.c's watch) and run
// fails.
func run(ctx context.Context, src []byte, f format, g geometry, r recipe, meta bimg.ImageMetadata) ([]byte, error) {
	params, free := r.enlargeParams(g, src, meta)
	defer free()
	save := f.saveParams(int64(g.size.X) * int64(g.size.Y))
	cancelled, stop := cancelOn(ctx)
	defer stop()
	var out unsafe.Pointer
	var n C.size_t
	if C.upscale(unsafe.Pointer(unsafe.SliceData(src)), C.size_t(len(src)), C.int(g.frames), sequential(meta), &params, &save, cancelled, &out, &n) != 0 {
		return nil, vipsError()
	}
	return f.takeResult(ctx, out, n)
}

// takeResult makes the result of what the encoder wrote into out, in C
// memory, which it frees: packed by packPNG where f says, else copied.
func (f format) takeResult(ctx context.Context, out unsafe.Pointer, n C.size_t) ([]byte, error) {
	if !f.packed {
		return takeBuffer(ctx, out, n)
	}
	packed, err := packPNG(ctx, unsafe.Slice((*byte)(out), n))
	C.g_free(C.gpointer(out)) // before the result is made: packed holds no reference into it
	if err != nil {
		return nil, err
	}
	return packed.layout(ctx)
}

// takeBuffer copies a buffer libvips allocated into Go memory, unless ctx
// is done first (copyUnlessDone), and frees it.
func takeBuffer(ctx context.Context, p unsafe.Pointer, n C.size_t) ([]byte, error) {
	defer C.g_free(C.gpointer(p))
	out := make([]byte, n)
	if err := copyUnlessDone(ctx, out, unsafe.Slice((*byte)(p), n)); err != nil {
		return nil, err
	}
	return out, nil
}

// copyUnlessDone copies src into dst a few MiB at a time and gives up once
// ctx is done. Copying into new memory is bound by the first touch of each
// page: a 100-megapixel PNG result (220 MB) took 1 to 3 s on a small VM,
// during which a cancel would otherwise wait.
func copyUnlessDone[T any](ctx context.Context, dst, src []T) error {
	var sample T
	chunk := max(1, 4<<20/int(unsafe.Sizeof(sample)))
	for len(src) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := copy(dst, src[:min(chunk, len(src))])
		dst, src = dst[n:], src[n:]
	}
	return nil
}

// decodePixels decodes src, of frames frames, strictly into memory:
// upright, sRGB or grey, premultiplied, 16-bit.
func decodePixels(ctx context.Context, src []byte, meta bimg.ImageMetadata, frames int) (*Pixels, error) {
	cancelled, stop := cancelOn(ctx)
	defer stop()
	var px C.pixels
	if C.decode_pixels(unsafe.Pointer(unsafe.SliceData(src)), C.size_t(len(src)), C.int(frames), sequential(meta), cancelled, &px) != 0 {
		return nil, vipsError()
	}
	defer C.g_free(C.gpointer(px.data))
	defer C.g_free(C.gpointer(px.profile))
	defer C.g_free(C.gpointer(px.delays))
	defer C.free_kept_exif(&px.exif)
	n := int(px.width) * int(px.height) * int(px.bands)
	out := &Pixels{
		Width:          int(px.width),
		Height:         int(px.height),
		Bands:          int(px.bands),
		Alpha:          px.alpha != 0,
		Pix:            make([]uint16, n),
		Frames:         int(px.pages),
		loop:           px.loop,
		sampleFormat:   px.format,
		interpretation: px.interpretation,
		resolution:     [2]C.double{px.xres, px.yres},
	}
	if err := copyUnlessDone(ctx, out.Pix, unsafe.Slice((*uint16)(unsafe.Pointer(px.data)), n)); err != nil {
		return nil, err
	}
	if px.profile != nil {
		out.profile = C.GoBytes(px.profile, C.int(px.profile_len))
	}
	if px.delays != nil {
		out.delays = slices.Clone(unsafe.Slice(px.delays, px.pages))
	}
	out.exif = goEXIF(&px.exif)
	return out, nil
}

// cPixels describes px to C. The samples stay in Go memory: pinned, so
// that the struct passed to C may point to them; call unpin once C is done.
func cPixels(px *Pixels) (in *C.pixels, unpin func()) {
	var pinner runtime.Pinner
	pinner.Pin(unsafe.SliceData(px.Pix))
	delays := px.delays
	if len(delays) != px.Frames { // an engine changed Frames: C reads one delay a frame
		delays = nil
	}
	if len(delays) > 0 {
		pinner.Pin(unsafe.SliceData(delays))
	}
	in = &C.pixels{
		data:           (*C.ushort)(unsafe.Pointer(unsafe.SliceData(px.Pix))),
		width:          C.int(px.Width),
		height:         C.int(px.Height),
		bands:          C.int(px.Bands),
		alpha:          cBool(px.Alpha),
		format:         px.sampleFormat,
		interpretation: px.interpretation,
		xres:           px.resolution[0],
		yres:           px.resolution[1],
		pages:          C.int(px.Frames),
		delays:         (*C.int)(unsafe.SliceData(delays)),
		loop:           px.loop,
	}
	var profile unsafe.Pointer
	if len(px.profile) > 0 {
		profile = C.CBytes(px.profile)
		in.profile, in.profile_len = profile, C.size_t(len(px.profile))
	}
	freeEXIF := px.exif.toC(&in.exif)
	return in, func() {
		pinner.Unpin()
		C.free(profile)
		freeEXIF()
	}
}

// keptEXIF is C's kept_exif in Go memory: the EXIF a result keeps
// (metadata.h), an empty field being one the source lacks.
type keptEXIF struct {
	block  []byte
	fields [len(C.kept_exif{}.fields)]string
}

func goEXIF(c *C.kept_exif) keptEXIF {
	var k keptEXIF
	if c.block != nil {
		k.block = C.GoBytes(c.block, C.int(c.len))
	}
	for i, field := range c.fields {
		if field != nil {
			k.fields[i] = C.GoString(field)
		}
	}
	return k
}

// toC fills c with copies in C memory, which free frees.
func (k keptEXIF) toC(c *C.kept_exif) (free func()) {
	var allocated []unsafe.Pointer
	if len(k.block) > 0 {
		c.block, c.len = C.CBytes(k.block), C.size_t(len(k.block))
		allocated = append(allocated, c.block)
	}
	for i, field := range k.fields {
		if field != "" {
			c.fields[i] = C.CString(field)
			allocated = append(allocated, unsafe.Pointer(c.fields[i]))
		}
	}
	return func() {
		for _, p := range allocated {
			C.free(p)
		}
	}
}

func cBool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// encodePixels enlarges px by scale following r (1: not at all) and
// encodes it as f says, PNG as packedPNG.
func encodePixels(ctx context.Context, px *Pixels, f format, g geometry, r recipe) ([]byte, error) {
	if f.is(pngFormat) {
		f = packedPNG
	}
	params, free := r.enlargeParams(g, nil, bimg.ImageMetadata{})
	defer free()
	save := f.saveParams(int64(g.size.X) * int64(g.size.Y))
	cancelled, stop := cancelOn(ctx)
	defer stop()
	in, unpin := cPixels(px)
	defer unpin()
	var out unsafe.Pointer
	var n C.size_t
	if C.encode_pixels(in, &params, &save, cancelled, &out, &n) != 0 {
		return nil, vipsError()
	}
	return f.takeResult(ctx, out, n)
}

// measureNoise runs block_noise (noise.c) on px.
func measureNoise(px *Pixels) (float64, error) {
	in, unpin := cPixels(px)
	defer unpin()
	var sigma C.double
	if C.measure_noise(in, &sigma) != 0 {
		return 0, vipsError()
	}
	return float64(sigma), nil
}

// ReleaseMemory implements upscale.MemoryReleaser: glibc keeps the memory
// libvips frees in its arenas (and, after large frees, serves even large
// buffers from them), so after a burst of big images the process holds
// its peak; malloc_trim hands the free pages back. Elsewhere than glibc it
// does nothing.
func (e *Engine) ReleaseMemory() { C.trim() }
