// Enlargement by an integer scale with centred Catmull-Rom sampling, the
// bicubic vips_affine does with odx = ody = (scale - 1) / 2 and extended
// edges, but separable (8 multiply-adds a band instead of 16) and with
// the clamp (to each source pixel's 3x3 range) and the conversion to the
// result's format in the same pass: one pass over the result instead of an
// affine, two rank filters, two zooms and four comparisons.
#include <math.h>
#include <string.h>
#include <vips/vips.h>

#include "upsample.h"

// upsample_job is one image's enlargement, shared by its regions.
typedef struct {
	VipsImage *in[3]; // the image to enlarge and, to clamp, the one whose ranges limit it (float), or NULL
	int scale;
	int clamp;
	// For each phase k = X mod scale of a result coordinate X: the source
	// pixel its first tap reads is X / scale + first[k], and its four
	// weights are weight[k].
	int first[16];
	float weight[16][4];
} upsample_job;

// catmull_rom fills w with the four weights at fraction t past the second
// tap.
static void catmull_rom(double t, float w[4]) {
	w[0] = (float) (((-0.5 * t + 1.0) * t - 0.5) * t);
	w[1] = (float) ((1.5 * t - 2.5) * t * t + 1.0);
	w[2] = (float) (((-1.5 * t + 2.0) * t + 0.5) * t);
	w[3] = (float) ((0.5 * t - 0.5) * t * t);
}

// upsample_region computes one region of the result. It needs the source
// rows and columns under the region with one more on one side and two on
// the other, repeated at the image's edges.
static int upsample_region(VipsRegion *out, void *seq, void *a, void *b, gboolean *stop) {
	VipsRegion **ir = (VipsRegion **) seq;
	const upsample_job *job = (const upsample_job *) b;
	const VipsImage *src = job->in[0];
	const VipsRect *r = &out->valid;
	const int s = job->scale, bands = src->Bands;
	const int sw = src->Xsize, sh = src->Ysize;

	// Source rows and columns the region reads, before clamping to the
	// image: first taps of the first and last result coordinates, and the
	// three after the last.
	int x0 = r->left / s + job->first[r->left % s];
	int x1 = (r->left + r->width - 1) / s + job->first[(r->left + r->width - 1) % s] + 3;
	int y0 = r->top / s + job->first[r->top % s];
	int y1 = (r->top + r->height - 1) / s + job->first[(r->top + r->height - 1) % s] + 3;
	VipsRect need = {VIPS_MAX(x0, 0), VIPS_MAX(y0, 0), VIPS_MIN(x1, sw - 1) - VIPS_MAX(x0, 0) + 1, VIPS_MIN(y1, sh - 1) - VIPS_MAX(y0, 0) + 1};
	if (vips_region_prepare(ir[0], &need))
		return -1;
	// With the clamp: the 3x3 range of each source pixel under the region,
	// band by band, from the unsharpened source.
	VipsRect under = {r->left / s, r->top / s, (r->left + r->width - 1) / s - r->left / s + 1, (r->top + r->height - 1) / s - r->top / s + 1};
	float *range = NULL; // lo then hi, under.width x under.height x bands each
	size_t ranges = (size_t) under.width * under.height * bands;
	if (job->clamp) {
		VipsRect around = {under.left - 1, under.top - 1, under.width + 2, under.height + 2}, image = {0, 0, sw, sh};
		vips_rect_intersectrect(&around, &image, &around);
		if (vips_region_prepare(ir[1], &around))
			return -1;
		if (!(range = g_try_malloc(2 * ranges * sizeof(float)))) {
			vips_error("upscale", "out of memory for enlarging");
			return -1;
		}
		for (int y = 0; y < under.height; y++) {
			const float *rp[3];
			for (int dy = 0; dy < 3; dy++)
				rp[dy] = (const float *) VIPS_REGION_ADDR(ir[1], around.left,
					VIPS_CLIP(around.top, under.top + y + dy - 1, VIPS_RECT_BOTTOM(&around) - 1));
			float *lo = range + (size_t) y * under.width * bands, *hi = lo + ranges;
			for (int x = 0; x < under.width; x++, lo += bands, hi += bands) {
				int sx = under.left + x - around.left;
				int cols[3] = {VIPS_MAX(sx - 1, 0) * bands, sx * bands, VIPS_MIN(sx + 1, around.width - 1) * bands};
				for (int c = 0; c < bands; c++) {
					float l = rp[0][cols[0] + c], h = l;
					for (int dy = 0; dy < 3; dy++)
						for (int dx = 0; dx < 3; dx++) {
							float v = rp[dy][cols[dx] + c];
							l = VIPS_MIN(l, v);
							h = VIPS_MAX(h, v);
						}
					lo[c] = l;
					hi[c] = h;
				}
			}
		}
	}

	// Horizontal pass: each source row the region reads, enlarged across
	// the region's columns. Each column's taps (their offsets in a source
	// row) and weights are the same for every row, so they are found once.
	int rows = y1 - y0 + 1;
	size_t row = (size_t) r->width * bands;
	float *across = g_try_malloc(rows * row * sizeof(float));
	int *taps = g_try_malloc((size_t) r->width * 4 * sizeof(int));
	const float **weights = g_try_malloc((size_t) r->width * sizeof(float *));
	if (!across || !taps || !weights) {
		g_free(across);
		g_free(taps);
		g_free(weights);
		g_free(range);
		vips_error("upscale", "out of memory for enlarging");
		return -1;
	}
	for (int x = 0; x < r->width; x++) {
		int X = r->left + x, first = X / s + job->first[X % s];
		for (int tap = 0; tap < 4; tap++)
			taps[4 * x + tap] = (VIPS_CLIP(0, first + tap, sw - 1) - need.left) * bands;
		weights[x] = job->weight[X % s];
	}
	for (int k = 0; k < rows; k++) {
		const float *src = (const float *) VIPS_REGION_ADDR(ir[0], need.left, VIPS_CLIP(0, y0 + k, sh - 1));
		float *dst = across + k * row;
		for (int x = 0; x < r->width; x++) {
			const float *w = weights[x];
			const float *p0 = src + taps[4 * x], *p1 = src + taps[4 * x + 1], *p2 = src + taps[4 * x + 2], *p3 = src + taps[4 * x + 3];
			for (int c = 0; c < bands; c++)
				dst[x * bands + c] = w[0] * p0[c] + w[1] * p1[c] + w[2] * p2[c] + w[3] * p3[c];
		}
	}

	// Vertical pass, clamp and conversion. The source pixel under result
	// column x advances every s columns.
	const int to_uchar = out->im->BandFmt == VIPS_FORMAT_UCHAR;
	for (int y = 0; y < r->height; y++) {
		int Y = r->top + y, first = Y / s + job->first[Y % s] - y0;
		const float *w = job->weight[Y % s];
		const float *p0 = across + first * row, *p1 = p0 + row, *p2 = p1 + row, *p3 = p2 + row;
		const float *lo = range ? range + (size_t) (Y / s - under.top) * under.width * bands : NULL;
		VipsPel *q = VIPS_REGION_ADDR(out, r->left, Y);
		for (int x = 0, phase = r->left % s; x < r->width; x++) {
			for (int c = 0; c < bands; c++) {
				int i = x * bands + c;
				float v = w[0] * p0[i] + w[1] * p1[i] + w[2] * p2[i] + w[3] * p3[i];
				if (lo)
					v = VIPS_CLIP(lo[c], v, lo[ranges + c]);
				if (to_uchar)
					q[i] = (VipsPel) VIPS_CLIP(0, (int) rintf(v), 255);
				else
					((float *) q)[i] = v;
			}
			if (lo && ++phase == s) {
				phase = 0;
				lo += bands;
			}
		}
	}
	g_free(taps);
	g_free(weights);
	g_free(across);
	g_free(range);
	return 0;
}

int upsample_bicubic(VipsObject *ctx, VipsImage *in, int scale, VipsImage *ranges, VipsBandFormat format, VipsImage **out) {
	if (in->BandFmt != VIPS_FORMAT_FLOAT || (ranges && (ranges->BandFmt != VIPS_FORMAT_FLOAT || ranges->Bands != in->Bands ||
		ranges->Xsize != in->Xsize || ranges->Ysize != in->Ysize)) ||
		scale < 1 || scale > 16 || (format != VIPS_FORMAT_UCHAR && format != VIPS_FORMAT_FLOAT)) {
		vips_error("upscale", "upsample_bicubic: unsupported input");
		return -1;
	}
	upsample_job *job = VIPS_NEW(ctx, upsample_job);
	if (!job)
		return -1;
	memset(job, 0, sizeof(*job));
	job->in[0] = in;
	job->in[1] = ranges;
	job->clamp = ranges != NULL;
	job->scale = scale;
	for (int k = 0; k < scale; k++) {
		// Result coordinate X = scale * i + k samples the source at
		// i + d, d = (k + 0.5) / scale - 0.5, in (-0.5, 0.5).
		double d = (k + 0.5) / scale - 0.5;
		int base = d < 0 ? -1 : 0;
		job->first[k] = base - 1;
		catmull_rom(d - base, job->weight[k]);
	}
	*out = vips_image_new(); // the caller's to unref, as an operation's output
	if (vips_image_pipeline_array(*out, VIPS_DEMAND_STYLE_THINSTRIP, job->in))
		return -1;
	(*out)->Xsize = in->Xsize * scale;
	(*out)->Ysize = in->Ysize * scale;
	(*out)->BandFmt = format;
	return vips_image_generate(*out, vips_start_many, upsample_region, vips_stop_many, job->in, job);
}
