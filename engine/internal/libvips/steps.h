// The steps of pipeline.c that pixels.c and denoisetiles.c share:
// opening a source, the working format, denoising, making and saving a
// result.
#ifndef UPSCALE_STEPS_H
#define UPSCALE_STEPS_H

#include <vips/vips.h>

#include "denoise.h"
#include "pipeline.h"

// watch makes every image computed from root report its progress to
// stop_if_cancelled, which kills it once *cancelled is set.
void watch(VipsImage *root, gint *cancelled);

// open_upright loads buf strictly, turns it upright as its EXIF
// orientation says and converts CMYK to sRGB; an animation (pages above 1)
// is loaded whole, its frames one above the other, not turned.
int open_upright(VipsObject *ctx, const void *buf, size_t len, int pages, int sequential, gint *cancelled,
	VipsImage **out);

// unit_of is the value of one 8-bit step in format's range.
double unit_of(VipsBandFormat format);

// to_working turns an image into float, with colour premultiplied by
// alpha.
int to_working(VipsImage *in, VipsImage **out);

// denoise_job is one image's denoising, shared by its tiles.
typedef struct {
	denoise_params params;
	double sigma[3];
	int colour;
	int block_x, block_y; // as in enlarge_params
	const gint *cancelled;
} denoise_job;

// noise_sigmas estimates the standard deviation of white noise in each of
// the colour planes of in (Immerkaer's mask, its median response); unit is
// one grey level of the source's format.
int noise_sigmas(VipsObject *ctx, VipsImage *in, int colour, double unit, double sigma[3]);

// denoise filters in (float) tile by tile as job says.
int denoise(VipsObject *ctx, VipsImage *in, VipsImage **out, denoise_job *job);

// make_result enlarges a working image of pages frames as p says and turns
// it back into format.
int make_result(VipsObject *ctx, VipsImage *in, int pages, VipsBandFormat format, const enlarge_params *p,
	gint *cancelled, VipsImage **out);

// save keeps only the metadata keep_metadata keeps of a result of pages
// frames and encodes it as s says, into *out.
int save(VipsObject *ctx, VipsImage *in, int pages, const save_params *s, gint *cancelled, void **out,
	size_t *outlen);

#endif
