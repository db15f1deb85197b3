#ifndef UPSCALE_UPSAMPLE_H
#define UPSCALE_UPSAMPLE_H

#include <vips/vips.h>

// upsample_bicubic enlarges in (float) scale times (1 to 16) with centred
// Catmull-Rom sampling: result pixel X samples the source at
// (X + 0.5) / scale - 0.5, edges extended, as vips_affine's bicubic does.
// With ranges (in's size, bands and format), each result pixel is clamped,
// band by band, to the range of the 3x3 pixels of ranges around the source
// pixel it lies in (edges extended). The result is in format: float, or
// uchar (rounded and clipped). *out is the caller's to unref; it reads in
// and ranges until then. It returns 0, or -1 with the reason in
// vips_error_buffer().
int upsample_bicubic(VipsObject *ctx, VipsImage *in, int scale, VipsImage *ranges, VipsBandFormat format, VipsImage **out);

#endif
