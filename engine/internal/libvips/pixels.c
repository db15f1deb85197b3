// The decoded pixels engine/onnx works on between decoding and encoding
// (pixels.go), made and encoded by the pipeline's steps (steps.h).

#include <stdlib.h>
#include <string.h>
#include <vips/vips.h>

#include "metadata.h"
#include "noise.h"
#include "pipeline.h"
#include "steps.h"

int decode_pixels(const void *buf, size_t len, int pages, int sequential, gint *cancelled, pixels *out) {
	VipsObject *ctx = VIPS_OBJECT(vips_image_new());
	VipsImage **t = (VipsImage **) vips_object_local_array(ctx, 3);
	VipsImage *x;
	int status = -1;
	memset(out, 0, sizeof(*out));
	if (open_upright(ctx, buf, len, pages, sequential, cancelled, &x))
		goto done;
	out->pages = pages;
	keep_metadata(x, pages);
	get_kept_exif(x, &out->exif);
	if (pages > 1) {
		int *delays, n = 0;
		if (vips_image_get_typeof(x, "delay") && !vips_image_get_array_int(x, "delay", &delays, &n) && n == pages)
			out->delays = g_memdup2(delays, n * sizeof(int));
		if (vips_image_get_typeof(x, "loop"))
			vips_image_get_int(x, "loop", &out->loop);
	}
	out->format = x->BandFmt;
	out->interpretation = x->Type;
	out->alpha = vips_image_hasalpha(x);
	out->xres = x->Xres;
	out->yres = x->Yres;
	dup_blob(x, VIPS_META_ICC_NAME, &out->profile, &out->profile_len);
	// Rounded to 16 bits: exact for 16-bit and 8-bit sources, and an
	// 8-bit colour premultiplied by alpha keeps 8 bits more than its own.
	if (to_working(x, &t[0]) ||
		vips_linear1(t[0], &t[1], 257.0 / unit_of(out->format), 0.5, NULL) ||
		vips_cast(t[1], &t[2], VIPS_FORMAT_USHORT, NULL))
		goto done;
	x = t[2];
	size_t size;
	if (!(out->data = vips_image_write_to_memory(x, &size)))
		goto done;
	out->width = x->Xsize;
	out->height = x->Ysize;
	out->bands = x->Bands;
	status = 0;
done:
	if (status) {
		g_free(out->profile);
		g_free(out->delays);
		free_kept_exif(&out->exif);
		out->profile = NULL;
		out->delays = NULL;
	}
	g_object_unref(ctx);
	return status;
}

// wrap_pixels makes an image of in's samples, without copying them: the
// working image of the pipeline (float, in the range of the source's
// format), made from them strip by strip as it is read.
static int wrap_pixels(VipsObject *ctx, const pixels *in, VipsImage **out) {
	VipsImage **t = (VipsImage **) vips_object_local_array(ctx, 3);
	size_t size = (size_t) in->width * in->height * in->bands * sizeof(unsigned short);
	if (!(t[0] = vips_image_new_from_memory(in->data, size, in->width, in->height, in->bands, VIPS_FORMAT_USHORT)) ||
		vips_linear1(t[0], &t[1], unit_of(in->format) / 257.0, 0.0, NULL) ||
		vips_copy(t[1], &t[2], "interpretation", in->interpretation, "xres", in->xres, "yres", in->yres, NULL))
		return -1;
	if (in->profile)
		vips_image_set_blob_copy(t[2], VIPS_META_ICC_NAME, in->profile, in->profile_len);
	set_kept_exif(t[2], &in->exif);
	if (in->delays)
		vips_image_set_array_int(t[2], "delay", in->delays, in->pages);
	if (in->pages > 1)
		vips_image_set_int(t[2], "loop", in->loop);
	*out = t[2];
	return 0;
}

int measure_noise(const pixels *in, double *sigma) {
	VipsObject *ctx = VIPS_OBJECT(vips_image_new());
	VipsImage *x;
	int status = -1;
	if (!wrap_pixels(ctx, in, &x))
		status = block_noise(x, in->alpha, unit_of(in->format) * 255, NULL, sigma);
	g_object_unref(ctx);
	return status;
}

int encode_pixels(const pixels *in, const enlarge_params *p, const save_params *s, gint *cancelled,
	void **out, size_t *outlen) {
	VipsObject *ctx = VIPS_OBJECT(vips_image_new());
	VipsImage *x;
	int status = -1;
	if (wrap_pixels(ctx, in, &x))
		goto done;
	watch(x, cancelled);
	if (make_result(ctx, x, in->pages, in->format, p, cancelled, &x))
		goto done;
	status = save(ctx, x, in->pages, s, cancelled, out, outlen);
done:
	g_object_unref(ctx);
	return status;
}
