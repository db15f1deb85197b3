#ifndef UPSCALE_WEBP_H
#define UPSCALE_WEBP_H

#include <vips/vips.h>

// webp_save encodes in (8-bit RGB or RGBA) as lossy WebP at quality and
// effort, as vips_webpsave does, with its colour profile and EXIF block as
// the only metadata, into *out (g_free it). An image whose page height is below its
// height is an animation of its pages, encoded with its delay and loop
// fields. It returns 0, or -1 with the reason in
// vips_error_buffer(), as it does soon after *cancelled is set (cancel.h).
int webp_save(VipsImage *in, int quality, int effort, gint *cancelled, void **out, size_t *outlen);

#endif
