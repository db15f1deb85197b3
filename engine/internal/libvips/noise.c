// The noise estimate behind the denoise decisions of both engines.
#include <math.h>
#include <stdlib.h>
#include <vips/vips.h>

#include "cancel.h"
#include "noise.h"

enum { BLOCK = 8 };

static int by_value(const void *a, const void *b) {
	double x = *(const double *) a, y = *(const double *) b;
	return (x > y) - (x < y);
}

int block_noise(VipsImage *in, int alpha, double max, const gint *cancelled, double *sigma) {
	const int w = in->Xsize, h = in->Ysize, bands = in->Bands;
	const float to_grey = (float) (255.0 / max), opaque = (float) max;
	*sigma = 0;
	if (in->BandFmt != VIPS_FORMAT_FLOAT) {
		vips_error("upscale", "block_noise: the image is not float");
		return -1;
	}
	// Rows top - 1 to top + BLOCK of each row of blocks, as luma, with a
	// flag for pixels not fully opaque.
	VipsRegion *region = vips_region_new(in);
	float *luma = g_try_malloc((size_t) (BLOCK + 2) * w * sizeof(float));
	gboolean *clear = g_try_malloc((size_t) (BLOCK + 2) * w * sizeof(gboolean));
	GArray *sigmas = g_array_new(FALSE, FALSE, sizeof(double));
	int status = -1;
	if (!luma || !clear) {
		vips_error("upscale", "out of memory for the noise estimate");
		goto done;
	}
	// No sink drives this loop, so no eval signal stops it (pipeline.c's
	// watch): it looks at the flag itself, once a row of blocks.
	for (int top = 1; top + BLOCK < h; top += BLOCK) {
		VipsRect rows = {0, top - 1, w, BLOCK + 2};
		if (is_cancelled(cancelled) || vips_region_prepare(region, &rows))
			goto done;
		for (int y = 0; y < BLOCK + 2; y++) {
			const float *p = (const float *) VIPS_REGION_ADDR(region, 0, top - 1 + y);
			for (int x = 0; x < w; x++, p += bands) {
				luma[y * w + x] = (bands >= 3 ? 0.299f * p[0] + 0.587f * p[1] + 0.114f * p[2] : p[0]) * to_grey;
				clear[y * w + x] = alpha && p[bands - 1] != opaque;
			}
		}
		for (int left = 1; left + BLOCK < w; left += BLOCK) {
			double sum = 0;
			gboolean whole = TRUE;
			for (int y = 1; y <= BLOCK && whole; y++)
				for (int x = left; x < left + BLOCK; x++) {
					if (clear[y * w + x]) {
						whole = FALSE;
						break;
					}
					const float *up = luma + (y - 1) * w + x - 1, *here = up + w, *down = here + w;
					float r = up[0] - 2 * up[1] + up[2] - 2 * here[0] + 4 * here[1] - 2 * here[2] + down[0] - 2 * down[1] + down[2];
					sum += fabs((double) r);
				}
			if (whole) {
				double s = sum / (BLOCK * BLOCK) * sqrt(M_PI / 2) / 6;
				g_array_append_val(sigmas, s);
			}
		}
	}
	if (sigmas->len > 0) {
		qsort(sigmas->data, sigmas->len, sizeof(double), by_value);
		*sigma = g_array_index(sigmas, double, sigmas->len / 20);
	}
	status = 0;
done:
	g_array_free(sigmas, TRUE);
	g_free(luma);
	g_free(clear);
	g_object_unref(region);
	return status;
}
