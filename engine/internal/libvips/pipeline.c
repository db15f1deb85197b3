// The libvips side of the engine: a strict load, the classical
// enlargement and the encoder, as steps that the whole pipeline (upscale)
// and the in-memory one for other engines (decode_pixels, encode_pixels)
// share.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <vips/vips.h>

#include "cancel.h"
#include "denoise.h"
#include "liblog.h"
#include "noise.h"
#include "pipeline.h"
#include "steps.h"
#include "upsample.h"
#include "webp.h"

void configure_libvips(void) {
	route_libvips_log();
	vips_cache_set_max(0);
	vips_block_untrusted_set(TRUE);
	vips_operation_block_set("VipsForeignLoad", TRUE);
	vips_operation_block_set("VipsForeignLoadJpeg", FALSE);
	vips_operation_block_set("VipsForeignLoadPng", FALSE);
	vips_operation_block_set("VipsForeignLoadWebp", FALSE);
	vips_operation_block_set("VipsForeignLoadNsgif", FALSE);
	vips_operation_block_set("VipsForeignLoadHeif", FALSE);
	vips_operation_block_set("VipsForeignLoadTiff", FALSE);
}

int read_layout(const void *buf, size_t len, int *pages, VipsBandFormat *format, VipsInterpretation *interpretation,
	int *orientation) {
	VipsImage *in = vips_image_new_from_buffer(buf, len, "", NULL);
	if (!in)
		return -1;
	*pages = vips_image_get_n_pages(in);
	*format = in->BandFmt;
	*interpretation = in->Type;
	*orientation = vips_image_get_orientation(in);
	g_object_unref(in);
	return 0;
}

// load opens buf as the pipeline reads it, its loader failing on any
// decoder error or truncation: an animation (pages above 1) every frame,
// one above the other, with sequential access, since random access would
// make its loader decode it whole into an image of its own (on disk past
// 100 MB); a still with sequential access, or random where it is to be
// turned. Only the loaders of files with pages take n: JPEG's and PNG's
// refuse it.
static VipsImage *load(const void *buf, size_t len, int pages, int sequential) {
	if (pages > 1)
		return vips_image_new_from_buffer(buf, len, "", "n", -1, "access", VIPS_ACCESS_SEQUENTIAL,
			"fail_on", VIPS_FAIL_ON_ERROR, NULL);
	return vips_image_new_from_buffer(buf, len, "", "access", sequential ? VIPS_ACCESS_SEQUENTIAL : VIPS_ACCESS_RANDOM,
		"fail_on", VIPS_FAIL_ON_ERROR, NULL);
}


// Each step's result goes into the next slot of t, which a pipeline's
// context object owns: unreffing the context frees every image at once.
#define STEP(call) do { if (call) return -1; x = t[i++]; } while (0)

// stop_if_cancelled runs after each strip or tile that a computation
// reports; once *cancelled is set it kills the image being computed, which
// libvips checks next, so the work stops within a strip instead of running
// to the end for a caller who has gone. Work that takes long within one
// strip or tile, or that no libvips sink drives, checks the flag itself:
// denoise_tile, block_noise (noise.c), the encoders' output (save) and
// libwebp's progress (webp.c).
static void stop_if_cancelled(VipsImage *root, VipsProgress *progress, gint *cancelled) {
	if (g_atomic_int_get(cancelled))
		vips_image_set_kill(progress->im, TRUE);
}

// watch makes every image computed from root report its progress to
// stop_if_cancelled.
void watch(VipsImage *root, gint *cancelled) {
	vips_image_set_progress(root, TRUE);
	g_signal_connect(root, "eval", G_CALLBACK(stop_if_cancelled), cancelled);
}

int decode_strictly(const void *buf, size_t len, int pages, int sequential, gint *cancelled) {
	VipsImage *in = load(buf, len, pages, sequential);
	if (!in)
		return -1;
	watch(in, cancelled);
	double ignored;
	int status = vips_min(in, &ignored, NULL);
	g_object_unref(in);
	return status;
}

// open_upright loads buf strictly, turns it upright as its EXIF
// orientation says and converts CMYK to sRGB. An animation (pages above 1)
// is loaded whole into memory, its frames one above the other, each of
// which enlarge_frames reads on its own: frames are not turned, as browsers
// do not turn them.
int open_upright(VipsObject *ctx, const void *buf, size_t len, int pages, int sequential, gint *cancelled,
	VipsImage **out) {
	VipsImage **t = (VipsImage **) vips_object_local_array(ctx, 3);
	VipsImage *x;
	int i = 0;
	STEP(!(t[i] = load(buf, len, pages, sequential)));
	watch(x, cancelled);
	if (pages > 1) {
		if (vips_image_get_n_pages(x) != pages || vips_image_get_page_height(x) * pages != x->Ysize) {
			vips_error("upscale", "the animation's frames differ from its header");
			return -1;
		}
		STEP(!(t[i] = vips_image_copy_memory(x)));
		watch(x, cancelled); // a copy is a new root
	} else {
		STEP(vips_autorot(x, &t[i], NULL));
	}
	if (x->Type == VIPS_INTERPRETATION_CMYK)
		STEP(vips_icc_transform(x, &t[i], "srgb", "input_profile", "cmyk", "embedded", TRUE, NULL));
	*out = x;
	return 0;
}

double unit_of(VipsBandFormat format) {
	return format == VIPS_FORMAT_USHORT ? 257.0 : 1.0;
}

// to_working turns an image into float, with colour premultiplied by alpha
// so that transparent pixels, whatever colour they hide, do not bleed into
// their neighbours.
int to_working(VipsImage *in, VipsImage **out) {
	if (vips_image_hasalpha(in))
		return vips_premultiply(in, out, NULL);
	return vips_cast(in, out, VIPS_FORMAT_FLOAT, NULL);
}

// enlarge runs p's classical enlargement on a working (float,
// premultiplied) image whose source was in format. Denoising and
// sharpening run at the source's size; the enlargement, the clamp and, for
// an 8-bit source without alpha, the rounding to 8 bits run in one pass
// at the result's size (upsample.c), with the bicubic interpolator; other
// interpolators (the benchmarks' references) go through vips_affine.
static int enlarge(VipsObject *ctx, VipsImage *in, VipsBandFormat format, const enlarge_params *p, const gint *cancelled,
	VipsImage **out) {
	VipsImage **t = (VipsImage **) vips_object_local_array(ctx, 8);
	VipsImage *x = in, *source;
	int i = 0;
	denoise_job *job = VIPS_NEW(ctx, denoise_job);
	if (!job)
		return -1;
	if (p->denoise.step > 0) {
		job->params = p->denoise;
		job->colour = x->Bands - vips_image_hasalpha(x) >= 3 ? 3 : 1;
		job->block_x = p->block_x;
		job->block_y = p->block_y;
		job->cancelled = cancelled;
		if (noise_sigmas(ctx, x, job->colour, unit_of(format), job->sigma))
			return -1;
		STEP(denoise(ctx, x, &t[i], job));
	}
	source = x;
	if (p->sharpen > 0) {
		// Unsharp mask at the source's resolution, before enlarging: the
		// same correction as on the result for 1/s^2 of the work.
		VipsImage **s = (VipsImage **) vips_object_local_array(ctx, 3);
		if (vips_gaussblur(x, &s[0], p->sharpen_sigma, "precision", VIPS_PRECISION_FLOAT, NULL) ||
			vips_subtract(x, s[0], &s[1], NULL) ||
			vips_linear1(s[1], &s[2], p->sharpen, 0.0, NULL))
			return -1;
		STEP(vips_add(x, s[2], &t[i], NULL));
	}
	if (p->scale > 1 && strcmp(p->interpolator, "bicubic") != 0) {
		if (p->clamp) {
			vips_error("upscale", "the clamp needs the bicubic interpolator");
			return -1;
		}
		VipsInterpolate *interpolate = vips_interpolate_new(p->interpolator);
		if (!interpolate)
			return -1;
		// Centred sampling, as upsample.c's.
		double offset = (p->scale - 1) / 2.0;
		VipsArrayInt *area = vips_array_int_newv(4, 0, 0, source->Xsize * p->scale, source->Ysize * p->scale);
		int status = vips_affine(x, &t[i], p->scale, 0.0, 0.0, p->scale,
			"interpolate", interpolate, "odx", offset, "ody", offset,
			"oarea", area, "extend", VIPS_EXTEND_COPY, NULL);
		vips_area_unref(VIPS_AREA(area));
		g_object_unref(interpolate);
		STEP(status);
	} else if (p->scale > 1 || p->clamp) {
		// Clamped, each result pixel in a source pixel's s x s block is
		// limited to the range of the 3x3 unsharpened source pixels around
		// it, so the sharpening cannot overshoot into halos.
		VipsBandFormat result = format == VIPS_FORMAT_UCHAR && !vips_image_hasalpha(x) ? VIPS_FORMAT_UCHAR : VIPS_FORMAT_FLOAT;
		STEP(upsample_bicubic(ctx, x, p->scale, p->clamp ? source : NULL, result, &t[i]));
	}
	if (p->width > 0 && (x->Xsize != p->width || x->Ysize != p->height)) {
		// Fitted: resized by less than two, bicubic, with centred
		// sampling, to exactly the size asked for.
		VipsInterpolate *interpolate = vips_interpolate_new("bicubic");
		if (!interpolate)
			return -1;
		double a = (double) p->width / x->Xsize, d = (double) p->height / x->Ysize;
		VipsArrayInt *area = vips_array_int_newv(4, 0, 0, p->width, p->height);
		int status = vips_affine(x, &t[i], a, 0.0, 0.0, d,
			"interpolate", interpolate, "odx", (a - 1) / 2.0, "ody", (d - 1) / 2.0,
			"oarea", area, "extend", VIPS_EXTEND_COPY, NULL);
		vips_area_unref(VIPS_AREA(area));
		g_object_unref(interpolate);
		STEP(status);
	}
	*out = x;
	return 0;
}

// to_format turns a working image back into format: the premultiplication
// undone, rounded and clipped to the format's range.
static int to_format(VipsObject *ctx, VipsImage *in, VipsBandFormat format, VipsImage **out) {
	VipsImage **t = (VipsImage **) vips_object_local_array(ctx, 3);
	VipsImage *x = in;
	int i = 0;
	if (vips_image_hasalpha(x))
		STEP(vips_unpremultiply(x, &t[i], NULL));
	STEP(vips_round(x, &t[i], VIPS_OPERATION_ROUND_RINT, NULL));
	STEP(vips_cast(x, &t[i], format, NULL)); // clips to the format's range
	*out = x;
	return 0;
}

// frame_place is where vips_sink_disc's rows of one frame go: the strip
// of frames, from the frame's first row.
typedef struct {
	unsigned char *rows;
	size_t row_bytes;
} frame_place;

// copy_rows is vips_sink_disc's writer: it puts each band of rows it is
// handed in its place in the strip.
static int copy_rows(VipsRegion *region, VipsRect *area, void *a) {
	const frame_place *place = a;
	const size_t pel = VIPS_IMAGE_SIZEOF_PEL(region->im);
	for (int y = area->top; y < VIPS_RECT_BOTTOM(area); y++)
		memcpy(place->rows + (size_t) y * place->row_bytes + (size_t) area->left * pel,
			VIPS_REGION_ADDR(region, area->left, y), (size_t) area->width * pel);
	return 0;
}

// enlarge_frames makes the result of each of in's pages (an animation's
// frames, one above the other) alone, so that no frame's pixels reach
// into another's, into one strip in memory, each frame computed straight
// into its place. Each frame's pipeline is made, computed and freed in
// turn: libvips's bookkeeping over a thousand live pipelines joined into
// one image grew with the square of their number (25 s for 1000 frames of
// 4x4 pixels).
static int enlarge_frames(VipsObject *ctx, VipsImage *in, int pages, VipsBandFormat format, const enlarge_params *p,
	gint *cancelled, VipsImage **out) {
	const int height = in->Ysize / pages;
	unsigned char *strip = NULL;
	size_t frame_bytes = 0;
	struct { // frame 0's result's header, which every frame's shares
		int width, height, bands;
		VipsBandFormat format;
		VipsInterpretation type;
		double xres, yres;
	} shape = {0};
	for (int k = 0; k < pages; k++) {
		VipsObject *frame = VIPS_OBJECT(vips_image_new());
		VipsImage **t = (VipsImage **) vips_object_local_array(frame, 1);
		VipsImage *x;
		int ok = !is_cancelled(cancelled) &&
			!vips_extract_area(in, &t[0], 0, k * height, in->Xsize, height, NULL) &&
			!enlarge(frame, t[0], format, p, cancelled, &x) &&
			!to_format(frame, x, format, &x);
		if (ok && !strip) {
			frame_bytes = VIPS_IMAGE_SIZEOF_IMAGE(x);
			shape.width = x->Xsize, shape.height = x->Ysize, shape.bands = x->Bands;
			shape.format = x->BandFmt, shape.type = x->Type, shape.xres = x->Xres, shape.yres = x->Yres;
			if (!(strip = g_try_malloc(frame_bytes * pages))) {
				vips_error("upscale", "out of memory for the animation's frames");
				ok = 0;
			}
		}
		if (ok && (x->Xsize != shape.width || x->Ysize != shape.height || x->Bands != shape.bands ||
			x->BandFmt != shape.format)) {
			vips_error("upscale", "frame %d's result differs in size or format from the first's", k);
			ok = 0;
		}
		if (ok) {
			frame_place place = {strip + k * frame_bytes, VIPS_IMAGE_SIZEOF_LINE(x)};
			ok = !vips_sink_disc(x, copy_rows, &place);
		}
		g_object_unref(frame);
		if (!ok) {
			g_free(strip);
			return -1;
		}
	}
	VipsImage **t = (VipsImage **) vips_object_local_array(ctx, 2);
	t[0] = vips_image_new_from_memory(strip, frame_bytes * pages, shape.width, shape.height * pages, shape.bands, shape.format);
	if (t[0]) {
		g_signal_connect(t[0], "postclose", G_CALLBACK(vips_image_free_buffer), strip);
		watch(t[0], cancelled); // a new root, which the encoder reads
	} else {
		g_free(strip);
	}
	int status = !t[0] ||
		vips_copy(t[0], &t[1], "interpretation", shape.type, "xres", shape.xres, "yres", shape.yres, NULL);
	if (!status) {
		copy_kept_metadata(in, t[1]);
		vips_image_set_int(t[1], VIPS_META_PAGE_HEIGHT, shape.height);
		*out = t[1];
	}
	return status ? -1 : 0;
}

// make_result enlarges a working image of pages frames as p says and turns
// it back into format: a still through one pipeline that streams to the
// encoder, an animation frame by frame (enlarge_frames).
int make_result(VipsObject *ctx, VipsImage *in, int pages, VipsBandFormat format, const enlarge_params *p,
	gint *cancelled, VipsImage **out) {
	if (pages > 1)
		return enlarge_frames(ctx, in, pages, format, p, cancelled, out);
	VipsImage *x;
	if (enlarge(ctx, in, format, p, cancelled, &x))
		return -1;
	return to_format(ctx, x, format, out);
}

// output collects what an encoder writes, in memory, until *cancelled is
// set; from then on every write fails, which stops the encoder within a
// few KB of output. libvips looks at its kill flag only between the strips
// it hands the encoder, and compressing one (128 rows) of a large result
// takes a tenth of a second or more.
typedef struct {
	GString *bytes;
	const gint *cancelled;
} output;

static gint64 write_output(VipsTargetCustom *target, const void *data, gint64 length, output *o) {
	if (is_cancelled(o->cancelled))
		return -1;
	g_string_append_len(o->bytes, data, length);
	return length;
}

// save keeps only the metadata keep_metadata keeps of a result of pages
// frames (make_result's) and encodes it as s says.
int save(VipsObject *ctx, VipsImage *in, int pages, const save_params *s, gint *cancelled, void **out,
	size_t *outlen) {
	VipsImage **t = (VipsImage **) vips_object_local_array(ctx, 1);
	VipsImage *x = in;
	int i = 0;
	STEP(vips_copy(x, &t[i], NULL));
	keep_metadata(x, pages);
	if (s->saver == SAVE_WEBP)
		return webp_save(x, s->quality, s->effort, cancelled, out, outlen);
	output o = {g_string_new(NULL), cancelled};
	VipsTargetCustom *target = vips_target_custom_new();
	g_signal_connect(target, "write", G_CALLBACK(write_output), &o);
	int status = -1;
	switch (s->saver) {
	case SAVE_JPEG:
		status = vips_jpegsave_target(x, VIPS_TARGET(target), "Q", s->quality, "subsample_mode", s->subsample, NULL);
		break;
	case SAVE_PNG:
		status = vips_pngsave_target(x, VIPS_TARGET(target), "compression", s->compression, "filter", s->filter, NULL);
		break;
	case SAVE_GIF:
		status = vips_gifsave_target(x, VIPS_TARGET(target), "effort", s->effort, NULL);
		break;
	case SAVE_AVIF:
		status = vips_heifsave_target(x, VIPS_TARGET(target), "Q", s->quality, "effort", s->effort,
			"compression", VIPS_FOREIGN_HEIF_COMPRESSION_AV1, NULL);
		break;
	default:
		vips_error("upscale", "unknown saver %d", s->saver);
	}
	g_object_unref(target);
	if (status) {
		g_string_free(o.bytes, TRUE);
		return -1;
	}
	*outlen = o.bytes->len;
	*out = g_string_free(o.bytes, FALSE);
	return 0;
}

int upscale(const void *buf, size_t len, int pages, int sequential, const enlarge_params *p, const save_params *s,
	gint *cancelled, void **out, size_t *outlen) {
	VipsObject *ctx = VIPS_OBJECT(vips_image_new());
	VipsImage **t = (VipsImage **) vips_object_local_array(ctx, 4);
	VipsImage *x;
	int i = 0, status = -1;
	if (open_upright(ctx, buf, len, pages, sequential, cancelled, &x))
		goto done;
	VipsBandFormat format = x->BandFmt;
	enlarge_params params = *p;
	if (p->denoise.step > 0 && pages <= 1) { // read twice: to measure the noise, then to filter (an animation is in memory)
		if (!(t[i] = vips_image_copy_memory(x)))
			goto done;
		x = t[i++];
		watch(x, cancelled); // a copy is a new root
	}
	if (to_working(x, &t[i]))
		goto done;
	x = t[i++];
	if (p->denoise.step > 0 && p->clean_below > 0) {
		double sigma;
		if (block_noise(x, vips_image_hasalpha(x), unit_of(format) * 255, cancelled, &sigma))
			goto done;
		if (sigma < p->clean_below)
			params.denoise.step = 0; // nothing to remove: the filter would only cost detail
	}
	if (make_result(ctx, x, pages, format, &params, cancelled, &x))
		goto done;
	status = save(ctx, x, pages, s, cancelled, out, outlen);
done:
	g_object_unref(ctx);
	return status;
}
