package vips

/*
#cgo pkg-config: vips
#cgo CFLAGS: -O3
#cgo LDFLAGS: -lm
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <vips/vips.h>

#include "denoise.h"
#include "liblog.h"

static void configure_libvips(void) {
	route_libvips_log();
	vips_cache_set_max(0);
	vips_block_untrusted_set(TRUE);
	vips_operation_block_set("VipsForeignLoad", TRUE);
	vips_operation_block_set("VipsForeignLoadJpeg", FALSE);
	vips_operation_block_set("VipsForeignLoadPng", FALSE);
	vips_operation_block_set("VipsForeignLoadWebp", FALSE);
}

// decode_strictly decodes every pixel of buf, top to bottom, failing on the
// first decoder error or truncation instead of inventing pixels. It returns
// 0 on success; on failure the message is in vips_error_buffer().
static int decode_strictly(const void *buf, size_t len) {
	VipsImage *in = vips_image_new_from_buffer(buf, len, "",
		"access", VIPS_ACCESS_SEQUENTIAL,
		"fail_on", VIPS_FAIL_ON_ERROR,
		NULL);
	if (!in)
		return -1;
	double ignored;
	int status = vips_min(in, &ignored, NULL);
	g_object_unref(in);
	return status;
}

enum { SAVE_JPEG, SAVE_PNG, SAVE_WEBP };

// up_params is one enlargement, as recipe() in Go chooses it.
typedef struct {
	int scale;
	int sequential;           // load with sequential access (not when rotating)
	const char *interpolator; // a VipsInterpolate nickname: "nohalo", "bicubic", ...
	denoise_params denoise;
	int block_x, block_y;     // where a JPEG source's 8x8 blocks start once turned upright
	double sharpen;           // unsharp-mask amount, applied to the source; 0 is off
	double sharpen_sigma;
	int clamp;                // 0, or clamp each result pixel to the range of its 2x2 or 3x3 source pixels
	int saver;
	int quality;              // JPEG and WebP
	int subsample;            // a VipsForeignSubsample, JPEG
	int compression;          // PNG
	int effort;               // WebP
} up_params;

// Each step's result goes into the next slot of t, which the pipeline's
// context object owns: unreffing the context frees every image at once.
#define STEP(call) do { if (call) goto done; x = t[i++]; } while (0)

// noise_sigmas estimates the standard deviation of white noise in each of
// the colour planes of in from the median absolute response of Immerkaer's
// mask, which cancels smooth ramps and is 6 sigma wide for white noise;
// the median keeps edges and texture, which are few pixels, from counting
// as noise. unit is one grey level of the source's format (1, or 257 for
// 16-bit).
static int noise_sigmas(VipsObject *ctx, VipsImage *in, int colour, double unit, double sigma[3]) {
	VipsImage **t = (VipsImage **) vips_object_local_array(ctx, 9);
	// The response is kept in 1/8 grey levels in a 16-bit histogram.
	double scale = 8.0 / unit;
	t[0] = vips_image_new_matrixv(3, 3, 1.0, -2.0, 1.0, -2.0, 4.0, -2.0, 1.0, -2.0, 1.0);
	t[1] = vips_image_new_matrix_from_array(3, 3, ycbcr_from_rgb, 9);
	if (vips_extract_band(in, &t[2], 0, "n", colour, NULL) ||
		(colour == 3 ? vips_recomb(t[2], &t[3], t[1], NULL) : vips_copy(t[2], &t[3], NULL)) ||
		vips_conv(t[3], &t[4], t[0], "precision", VIPS_PRECISION_FLOAT, NULL) ||
		vips_abs(t[4], &t[5], NULL) ||
		vips_linear1(t[5], &t[6], scale, 0.0, NULL) ||
		vips_cast(t[6], &t[7], VIPS_FORMAT_USHORT, NULL) ||
		vips_hist_find(t[7], &t[8], NULL) ||
		vips_image_wio_input(t[8]))
		return -1;
	// The histogram is one row of 65536 counts per band.
	const guint *counts = (const guint *) VIPS_IMAGE_ADDR(t[8], 0, 0);
	for (int c = 0; c < colour; c++) {
		guint64 total = 0, seen = 0;
		int v = 0;
		for (int i = 0; i < t[8]->Xsize; i++)
			total += counts[i * colour + c];
		while (v < t[8]->Xsize - 1 && (seen += counts[v * colour + c]) * 2 < total)
			v++;
		sigma[c] = v / scale / (6.0 * 0.6745);
	}
	return 0;
}

// denoise_job is one image's denoising, shared by its tiles.
typedef struct {
	denoise_params params;
	double sigma[3];
	int colour;
	int block_x, block_y; // as in up_params
} denoise_job;

// denoise_tile makes one tile of the denoised image from the tile and the
// 8 pixels around it, which the blocks covering its edge pixels reach.
static int denoise_tile(VipsRegion *out, void *seq, void *a, void *b, gboolean *stop) {
	VipsRegion *in = (VipsRegion *) seq;
	const denoise_job *job = (const denoise_job *) b;
	const VipsRect *r = &out->valid;
	VipsRect image = {0, 0, in->im->Xsize, in->im->Ysize};
	VipsRect need = {r->left - 8, r->top - 8, r->width + 16, r->height + 16};
	vips_rect_intersectrect(&need, &image, &need);
	if (vips_region_prepare(in, &need))
		return -1;
	size_t row = (size_t) need.width * in->im->Bands;
	float *buf = g_try_malloc(row * need.height * sizeof(float));
	if (!buf) {
		vips_error("upscale", "out of memory for denoising");
		return -1;
	}
	for (int y = 0; y < need.height; y++)
		memcpy(buf + y * row, VIPS_REGION_ADDR(in, need.left, need.top + y), row * sizeof(float));
	int status = denoise_image(buf, need.width, need.height, in->im->Bands, job->colour, job->sigma,
		((job->block_x - need.left) % 8 + 8) % 8, ((job->block_y - need.top) % 8 + 8) % 8, &job->params);
	if (status == 0)
		for (int y = 0; y < r->height; y++)
			memcpy(VIPS_REGION_ADDR(out, r->left, r->top + y),
				buf + (size_t) (r->top + y - need.top) * row + (size_t) (r->left - need.left) * in->im->Bands,
				(size_t) r->width * in->im->Bands * sizeof(float));
	else
		vips_error("upscale", "out of memory for denoising");
	g_free(buf);
	return status;
}

// denoise filters in (float) tile by tile as job says. Tiles are cached,
// since the steps after it read overlapping areas.
static int denoise(VipsObject *ctx, VipsImage *in, VipsImage **out, denoise_job *job) {
	VipsImage **t = (VipsImage **) vips_object_local_array(ctx, 1);
	const int tile = 128;
	t[0] = vips_image_new();
	if (vips_image_pipelinev(t[0], VIPS_DEMAND_STYLE_SMALLTILE, in, NULL) ||
		vips_image_generate(t[0], vips_start_one, denoise_tile, vips_stop_one, in, job))
		return -1;
	return vips_tilecache(t[0], out, "tile_width", tile, "tile_height", tile,
		"max_tiles", 3 * (in->Xsize / tile + 1), NULL);
}

// clamp_to limits in, band by band, to [lo, hi].
static int clamp_to(VipsObject *ctx, VipsImage *in, VipsImage *lo, VipsImage *hi, VipsImage **out) {
	VipsImage **t = (VipsImage **) vips_object_local_array(ctx, 3);
	return vips_relational(in, hi, &t[0], VIPS_OPERATION_RELATIONAL_MORE, NULL) ||
		vips_ifthenelse(t[0], hi, in, &t[1], NULL) ||
		vips_relational(t[1], lo, &t[2], VIPS_OPERATION_RELATIONAL_LESS, NULL) ||
		vips_ifthenelse(t[2], lo, t[1], out, NULL);
}

// stop_if_cancelled runs after each strip or tile that a computation
// reports; once *cancelled is set it kills the image being computed, which
// libvips checks next, so the work stops within a strip instead of running
// to the end for a caller who has gone.
static void stop_if_cancelled(VipsImage *root, VipsProgress *progress, gint *cancelled) {
	if (g_atomic_int_get(cancelled))
		vips_image_set_kill(progress->im, TRUE);
}

// watch makes every image computed from root report its progress to
// stop_if_cancelled.
static void watch(VipsImage *root, gint *cancelled) {
	vips_image_set_progress(root, TRUE);
	g_signal_connect(root, "eval", G_CALLBACK(stop_if_cancelled), cancelled);
}

// keep_only_profile removes every metadata field of image but its colour
// profile. EXIF, XMP, IPTC and PNG text can say who took a photo, where and
// with which camera, and the orientation has been applied. Removing the EXIF
// block is not enough: the savers rebuild EXIF from the exif-* fields
// libvips parsed out of it, GPS position included.
static void keep_only_profile(VipsImage *image) {
	gchar **fields = vips_image_get_fields(image);
	for (gchar **f = fields; *f; f++)
		if (strcmp(*f, VIPS_META_ICC_NAME) != 0)
			vips_image_remove(image, *f); // header fields, such as width, stay
	g_strfreev(fields);
}

// upscale decodes buf strictly, enlarges it as p says and encodes the
// result into *out (g_free it). It returns 0, or -1 with the reason in
// vips_error_buffer(); setting *cancelled makes it stop early and fail.
static int upscale(const void *buf, size_t len, const up_params *p, gint *cancelled, void **out, size_t *outlen) {
	VipsObject *ctx = VIPS_OBJECT(vips_image_new());
	VipsImage **t = (VipsImage **) vips_object_local_array(ctx, 32);
	VipsInterpolate *interpolate = NULL;
	VipsArrayInt *area = NULL;
	VipsImage *x, *source;
	denoise_job job;
	int i = 0, status = -1;

	STEP(!(t[i] = vips_image_new_from_buffer(buf, len, "",
		"access", p->sequential ? VIPS_ACCESS_SEQUENTIAL : VIPS_ACCESS_RANDOM,
		"fail_on", VIPS_FAIL_ON_ERROR, NULL)));
	watch(x, cancelled);
	STEP(vips_autorot(x, &t[i], NULL));
	if (x->Type == VIPS_INTERPRETATION_CMYK)
		STEP(vips_icc_transform(x, &t[i], "srgb", "input_profile", "cmyk", "embedded", TRUE, NULL));
	VipsBandFormat format = x->BandFmt;
	int alpha = vips_image_hasalpha(x);

	// Work in float, with colour premultiplied by alpha so that transparent
	// pixels, whatever colour they hide, do not bleed into their neighbours.
	if (p->denoise.step > 0) { // read twice: to measure the noise, then to filter
		STEP(!(t[i] = vips_image_copy_memory(x)));
		watch(x, cancelled); // a copy is a new root
	}
	if (alpha)
		STEP(vips_premultiply(x, &t[i], NULL));
	else
		STEP(vips_cast(x, &t[i], VIPS_FORMAT_FLOAT, NULL));

	if (p->denoise.step > 0) {
		job.params = p->denoise;
		job.colour = x->Bands - alpha >= 3 ? 3 : 1;
		job.block_x = p->block_x;
		job.block_y = p->block_y;
		if (noise_sigmas(ctx, x, job.colour, format == VIPS_FORMAT_USHORT ? 257.0 : 1.0, job.sigma))
			goto done;
		STEP(denoise(ctx, x, &t[i], &job));
	}
	source = x;
	if (p->sharpen > 0) {
		// Unsharp mask at the source's resolution, before enlarging: the
		// same correction as on the result for 1/s^2 of the work.
		VipsImage **s = (VipsImage **) vips_object_local_array(ctx, 3);
		if (vips_gaussblur(x, &s[0], p->sharpen_sigma, "precision", VIPS_PRECISION_FLOAT, NULL) ||
			vips_subtract(x, s[0], &s[1], NULL) ||
			vips_linear1(s[1], &s[2], p->sharpen, 0.0, NULL))
			goto done;
		STEP(vips_add(x, s[2], &t[i], NULL));
	}

	interpolate = vips_interpolate_new(p->interpolator);
	if (!interpolate)
		goto done;
	// Centred sampling: output pixel X takes the source at (X + 0.5) / s - 0.5,
	// so the result is not shifted by a fraction of a pixel, and edges
	// continue outward instead of fading.
	double offset = (p->scale - 1) / 2.0;
	area = vips_array_int_newv(4, 0, 0, source->Xsize * p->scale, source->Ysize * p->scale);
	STEP(vips_affine(x, &t[i], p->scale, 0.0, 0.0, p->scale,
		"interpolate", interpolate, "odx", offset, "ody", offset,
		"oarea", area, "extend", VIPS_EXTEND_COPY, NULL));

	if (p->clamp == 3) {
		// The range of the 3x3 source pixels around each one, zoomed: every
		// output pixel in a source pixel's s x s block gets that range.
		VipsImage **r = (VipsImage **) vips_object_local_array(ctx, 4);
		if (vips_rank(source, &r[0], 3, 3, 0, NULL) ||
			vips_rank(source, &r[1], 3, 3, 8, NULL) ||
			vips_zoom(r[0], &r[2], p->scale, p->scale, NULL) ||
			vips_zoom(r[1], &r[3], p->scale, p->scale, NULL))
			goto done;
		STEP(clamp_to(ctx, x, r[2], r[3], &t[i]));
	} else if (p->clamp == 2) {
		// The range of the 2x2 source pixels around each output pixel's
		// sample point, which for u = (X + 0.5) / s - 0.5 are floor(u) and
		// floor(u) + 1. vips_rank's 2x2 window at x covers x-1 and x; one
		// more edge column and row give the last pair, and cropping s/2 off
		// the zoomed ranges lines pair floor(u) up with X.
		VipsImage **r = (VipsImage **) vips_object_local_array(ctx, 7);
		int s = p->scale;
		if (vips_embed(source, &r[0], 0, 0, source->Xsize + 1, source->Ysize + 1, "extend", VIPS_EXTEND_COPY, NULL) ||
			vips_rank(r[0], &r[1], 2, 2, 0, NULL) ||
			vips_rank(r[0], &r[2], 2, 2, 3, NULL) ||
			vips_zoom(r[1], &r[3], s, s, NULL) ||
			vips_zoom(r[2], &r[4], s, s, NULL) ||
			vips_crop(r[3], &r[5], s / 2, s / 2, x->Xsize, x->Ysize, NULL) ||
			vips_crop(r[4], &r[6], s / 2, s / 2, x->Xsize, x->Ysize, NULL))
			goto done;
		STEP(clamp_to(ctx, x, r[5], r[6], &t[i]));
	}

	if (alpha)
		STEP(vips_unpremultiply(x, &t[i], NULL));
	STEP(vips_round(x, &t[i], VIPS_OPERATION_ROUND_RINT, NULL));
	STEP(vips_cast(x, &t[i], format, NULL)); // clips to the format's range
	STEP(vips_copy(x, &t[i], NULL));
	keep_only_profile(x);

	switch (p->saver) {
	case SAVE_JPEG:
		status = vips_jpegsave_buffer(x, out, outlen, "Q", p->quality, "subsample_mode", p->subsample, NULL);
		break;
	case SAVE_PNG:
		status = vips_pngsave_buffer(x, out, outlen, "compression", p->compression, NULL);
		break;
	case SAVE_WEBP:
		status = vips_webpsave_buffer(x, out, outlen, "Q", p->quality, "effort", p->effort, NULL);
		break;
	}
done:
	if (area)
		vips_area_unref(VIPS_AREA(area));
	if (interpolate)
		g_object_unref(interpolate);
	g_object_unref(ctx);
	return status;
}
*/
import "C"

import (
	"context"
	"errors"
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
//   - It loads JPEG, PNG and WebP and nothing else: every other loader (SVG,
//     PDF, TIFF, HEIF, JXL, GIF, FITS, Matlab, ...) is blocked, the
//     untrusted ones first of all. sniff already refuses those formats
//     before libvips sees them; this is the second line, should a file ever
//     get past it.
//   - What libvips logs goes to slog.Default() (logFromLibvips), not to
//     stderr.
//   - The operation cache is off. Every request brings new pixels, so it
//     never hits; bimg's 100 MB / 500 operations only kept finished
//     requests' images alive, and its bookkeeping cost throughput: two
//     images at once went from 4.7 to 6.8 per second without it
//     (BENCHMARKS.md).
var configureLibvips = sync.OnceFunc(func() { C.configure_libvips() })

// decodeStrictly decodes all of src and fails on any decoder error or
// truncation. The pipeline decodes just as strictly; this runs only after
// it failed, to tell a corrupt source (the caller's fault) from a failure
// of the engine.
func decodeStrictly(src []byte) error {
	if C.decode_strictly(unsafe.Pointer(unsafe.SliceData(src)), C.size_t(len(src))) == 0 {
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

// The savers of up_params, by format.
const (
	saveJPEG = C.SAVE_JPEG
	savePNG  = C.SAVE_PNG
	saveWebP = C.SAVE_WEBP
)

// JPEG chroma subsampling modes: libvips's automatic choice (none from
// quality 90 up), always 4:2:0, or never.
const (
	subsampleAuto = C.VIPS_FOREIGN_SUBSAMPLE_AUTO
	subsampleOn   = C.VIPS_FOREIGN_SUBSAMPLE_ON
	subsampleOff  = C.VIPS_FOREIGN_SUBSAMPLE_OFF
)

// run decodes src strictly and enlarges it by scale following r, in one
// libvips pipeline that streams from the decoder to the encoder, and
// returns the encoded result. meta is what src's header says; its EXIF
// orientation decides how the source is read: sequential access, which
// keeps only a few source rows in memory, is on unless the source must be
// turned. Once ctx is done, libvips stops within a strip and run fails.
func run(ctx context.Context, src []byte, f format, scale int, r recipe, meta bimg.ImageMetadata) ([]byte, error) {
	interpolator := C.CString(r.interpolator)
	defer C.free(unsafe.Pointer(interpolator))
	params := C.up_params{
		scale:         C.int(scale),
		sequential:    cBool(meta.Orientation <= 1),
		interpolator:  interpolator,
		sharpen:       C.double(r.sharpen),
		sharpen_sigma: C.double(r.sharpenSigma),
		clamp:         C.int(r.clamp),
		saver:         C.int(f.saver),
		quality:       C.int(f.quality),
		subsample:     C.int(f.subsample),
		compression:   C.int(f.compression),
		effort:        C.int(f.effort),
	}
	if d := r.denoise; d.step > 0 {
		params.denoise = C.denoise_params{noise_threshold: C.double(d.noise), quant_threshold: C.double(d.quant), step: C.int(d.step)}
		if luma, chroma, ok := quantTables(src); ok {
			blocks := uprightBlocks(meta.Orientation, meta.Size.Width, meta.Size.Height)
			if blocks.transposed {
				luma, chroma = transpose(luma), transpose(chroma)
			}
			params.block_x, params.block_y = C.int(blocks.x), C.int(blocks.y)
			params.denoise.has_tables = 1
			for i := range 64 {
				params.denoise.luma_table[i], params.denoise.chroma_table[i] = C.float(luma[i]), C.float(chroma[i])
			}
		}
	}
	var out unsafe.Pointer
	var n C.size_t
	// libvips polls cancelled while it works; Go memory is fine for that,
	// since it only reads it during the call.
	var cancelled int32
	defer context.AfterFunc(ctx, func() { atomic.StoreInt32(&cancelled, 1) })()
	if C.upscale(unsafe.Pointer(unsafe.SliceData(src)), C.size_t(len(src)), &params, (*C.gint)(unsafe.Pointer(&cancelled)), &out, &n) != 0 {
		return nil, vipsError()
	}
	defer C.g_free(C.gpointer(out))
	return C.GoBytes(out, C.int(n)), nil
}

func cBool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}
