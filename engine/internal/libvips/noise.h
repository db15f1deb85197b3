#ifndef UPSCALE_NOISE_H
#define UPSCALE_NOISE_H

#include <vips/vips.h>

// block_noise estimates the standard deviation of white noise in the luma
// of in (float, colour premultiplied by alpha when alpha is set, samples
// 0-max), in 8-bit grey levels, from the quietest of its 8x8 blocks: the
// 5th percentile of the blocks' estimates from Immerkaer's mask, whose mean
// absolute response to white noise is 6 sigma sqrt(2/pi) everywhere, while
// texture and edges raise only the blocks they are in. Blocks with any
// pixel not fully opaque are left out. *sigma is 0 for an image without a
// whole opaque block. It returns 0, or -1 with the reason in
// vips_error_buffer(), as it does soon after *cancelled is set (cancel.h).
int block_noise(VipsImage *in, int alpha, double max, const gint *cancelled, double *sigma);

#endif
