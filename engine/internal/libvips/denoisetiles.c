// The pipeline's denoising step: the noise of a source measured, and the
// image filtered by denoise_image (denoise.c) tile by tile.

#include <string.h>
#include <vips/vips.h>

#include "cancel.h"
#include "denoise.h"
#include "steps.h"

// noise_sigmas estimates the standard deviation of white noise in each of
// the colour planes of in from the median absolute response of Immerkaer's
// mask, which cancels smooth ramps and is 6 sigma wide for white noise;
// the median keeps edges and texture, which are few pixels, from counting
// as noise. unit is one grey level of the source's format (1, or 257 for
// 16-bit).
int noise_sigmas(VipsObject *ctx, VipsImage *in, int colour, double unit, double sigma[3]) {
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



// denoise_tile makes one tile of the denoised image from the tile and the
// 8 pixels around it, which the blocks covering its edge pixels reach. One
// strip of the result can need a row of such tiles, milliseconds each, so
// each looks at the cancel flag before it starts.
static int denoise_tile(VipsRegion *out, void *seq, void *a, void *b, gboolean *stop) {
	VipsRegion *in = (VipsRegion *) seq;
	const denoise_job *job = (const denoise_job *) b;
	if (is_cancelled(job->cancelled))
		return -1;
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
int denoise(VipsObject *ctx, VipsImage *in, VipsImage **out, denoise_job *job) {
	VipsImage **t = (VipsImage **) vips_object_local_array(ctx, 1);
	const int tile = 128;
	t[0] = vips_image_new();
	if (vips_image_pipelinev(t[0], VIPS_DEMAND_STYLE_SMALLTILE, in, NULL) ||
		vips_image_generate(t[0], vips_start_one, denoise_tile, vips_stop_one, in, job))
		return -1;
	return vips_tilecache(t[0], out, "tile_width", tile, "tile_height", tile,
		"max_tiles", 3 * (in->Xsize / tile + 1), NULL);
}
