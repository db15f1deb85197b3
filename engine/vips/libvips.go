package vips

/*
#cgo pkg-config: vips
#include <math.h>
#include <stdlib.h>
#include <vips/vips.h>

static void restrict_loaders(void) {
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
	int sequential;           // load with sequential access (no autorot, no denoise)
	const char *interpolator; // a VipsInterpolate nickname: "nohalo", "bicubic", ...
	double denoise;           // detail shrinkage threshold in noise sigmas; 0 is off
	double denoise_blur;      // sigma of the blur that splits detail from base
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

// noise_sigma estimates the standard deviation of additive noise in in
// (all bands averaged) from the median absolute response of Immerkaer's
// Laplacian-difference mask, which cancels smooth ramps and is 6 sigma
// wide for white noise. The median keeps edges and texture, which are few
// pixels, from counting as noise.
static int noise_sigma(VipsObject *ctx, VipsImage *in, double *sigma) {
	VipsImage **t = (VipsImage **) vips_object_local_array(ctx, 6);
	int median;
	// The response is scaled by 8 before it is made an integer for the
	// histogram, so the median keeps a resolution of 1/8.
	t[0] = vips_image_new_matrixv(3, 3, 1.0, -2.0, 1.0, -2.0, 4.0, -2.0, 1.0, -2.0, 1.0);
	if (vips_bandmean(in, &t[1], NULL) ||
		vips_conv(t[1], &t[2], t[0], "precision", VIPS_PRECISION_FLOAT, NULL) ||
		vips_abs(t[2], &t[3], NULL) ||
		vips_linear1(t[3], &t[4], 8.0, 0.0, NULL) ||
		vips_cast(t[4], &t[5], VIPS_FORMAT_USHORT, NULL) ||
		vips_percent(t[5], 50.0, &median, NULL))
		return -1;
	*sigma = median / 8.0 / (6.0 * 0.6745);
	return 0;
}

// shrink_detail splits in into a blurred base and the detail around it,
// and shrinks each detail value d by d^2 / (d^2 + (k sigma)^2): detail at
// the noise's own amplitude mostly goes, edges well above it stay.
static int shrink_detail(VipsObject *ctx, VipsImage *in, VipsImage **out, double blur, double threshold) {
	VipsImage **t = (VipsImage **) vips_object_local_array(ctx, 6);
	return vips_gaussblur(in, &t[0], blur, "precision", VIPS_PRECISION_FLOAT, NULL) ||
		vips_subtract(in, t[0], &t[1], NULL) ||
		vips_multiply(t[1], t[1], &t[2], NULL) ||
		vips_linear1(t[2], &t[3], 1.0, threshold * threshold, NULL) ||
		vips_divide(t[2], t[3], &t[4], NULL) ||
		vips_multiply(t[1], t[4], &t[5], NULL) ||
		vips_add(t[0], t[5], out, NULL);
}

// clamp_to limits in, band by band, to [lo, hi].
static int clamp_to(VipsObject *ctx, VipsImage *in, VipsImage *lo, VipsImage *hi, VipsImage **out) {
	VipsImage **t = (VipsImage **) vips_object_local_array(ctx, 3);
	return vips_relational(in, hi, &t[0], VIPS_OPERATION_RELATIONAL_MORE, NULL) ||
		vips_ifthenelse(t[0], hi, in, &t[1], NULL) ||
		vips_relational(t[1], lo, &t[2], VIPS_OPERATION_RELATIONAL_LESS, NULL) ||
		vips_ifthenelse(t[2], lo, t[1], out, NULL);
}

// upscale decodes buf strictly, enlarges it as p says and encodes the
// result into *out (g_free it). It returns 0, or -1 with the reason in
// vips_error_buffer().
static int upscale(const void *buf, size_t len, const up_params *p, void **out, size_t *outlen) {
	VipsObject *ctx = VIPS_OBJECT(vips_image_new());
	VipsImage **t = (VipsImage **) vips_object_local_array(ctx, 32);
	VipsInterpolate *interpolate = NULL;
	VipsArrayInt *area = NULL;
	VipsImage *x, *source;
	int i = 0, status = -1;

	STEP(!(t[i] = vips_image_new_from_buffer(buf, len, "",
		"access", p->sequential ? VIPS_ACCESS_SEQUENTIAL : VIPS_ACCESS_RANDOM,
		"fail_on", VIPS_FAIL_ON_ERROR, NULL)));
	STEP(vips_autorot(x, &t[i], NULL));
	if (x->Type == VIPS_INTERPRETATION_CMYK)
		STEP(vips_icc_transform(x, &t[i], "srgb", "input_profile", "cmyk", "embedded", TRUE, NULL));
	if (p->denoise > 0) // two passes over the source: estimate the noise, then filter
		STEP(!(t[i] = vips_image_copy_memory(x)));
	VipsBandFormat format = x->BandFmt;
	int alpha = vips_image_hasalpha(x);

	// Work in float, with colour premultiplied by alpha so that transparent
	// pixels, whatever colour they hide, do not bleed into their neighbours.
	if (alpha)
		STEP(vips_premultiply(x, &t[i], NULL));
	else
		STEP(vips_cast(x, &t[i], VIPS_FORMAT_FLOAT, NULL));

	if (p->denoise > 0) {
		double sigma;
		if (noise_sigma(ctx, x, &sigma))
			goto done;
		STEP(shrink_detail(ctx, x, &t[i], p->denoise_blur, p->denoise * sigma));
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
	// Keep the colour profile; drop camera metadata, which can say where a
	// photo was taken, and the orientation autorot has applied.
	STEP(vips_copy(x, &t[i], NULL));
	vips_image_remove(x, VIPS_META_EXIF_NAME);
	vips_image_remove(x, VIPS_META_XMP_NAME);
	vips_image_remove(x, VIPS_META_IPTC_NAME);
	vips_image_remove(x, VIPS_META_ORIENTATION);

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
	"errors"
	"sync"
	"unsafe"
)

// restrictLoaders leaves libvips able to load JPEG, PNG and WebP and nothing
// else: every other loader (SVG, PDF, TIFF, HEIF, JXL, GIF, FITS, Matlab,
// ...) is blocked, the untrusted ones first of all. sniff already refuses
// those formats before libvips sees them; this is the second line, should a
// file ever get past it. It applies to the whole process, which is why New
// says so. libvips is already started by then: bimg starts it when it is
// imported.
var restrictLoaders = sync.OnceFunc(func() { C.restrict_loaders() })

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

// run decodes src strictly and enlarges it by scale following r, in one
// libvips pipeline that streams from the decoder to the encoder, and
// returns the encoded result. Sequential access keeps only a few source
// rows in memory; it is off when the source must be turned (EXIF
// orientation) or read twice (denoising).
func run(src []byte, f format, scale int, r recipe, sequential bool) ([]byte, error) {
	interpolator := C.CString(r.interpolator)
	defer C.free(unsafe.Pointer(interpolator))
	params := C.up_params{
		scale:         C.int(scale),
		sequential:    cBool(sequential),
		interpolator:  interpolator,
		denoise:       C.double(r.denoise),
		denoise_blur:  C.double(r.denoiseBlur),
		sharpen:       C.double(r.sharpen),
		sharpen_sigma: C.double(r.sharpenSigma),
		clamp:         C.int(r.clamp),
		saver:         C.int(f.saver),
		quality:       C.int(f.quality),
		subsample:     C.int(f.subsample),
		compression:   C.int(f.compression),
		effort:        C.int(f.effort),
	}
	var out unsafe.Pointer
	var n C.size_t
	if C.upscale(unsafe.Pointer(unsafe.SliceData(src)), C.size_t(len(src)), &params, &out, &n) != 0 {
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
