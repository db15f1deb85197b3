#ifndef UPSCALE_CANCEL_H
#define UPSCALE_CANCEL_H

#include <vips/vips.h>

// is_cancelled reports whether *flag is set (cancelOn in libvips.go sets it
// once the caller's context is done) and, if so, says so in
// vips_error_buffer() for the step that fails because of it. A NULL flag is
// never set.
static inline int is_cancelled(const gint *flag) {
	if (!flag || !g_atomic_int_get(flag))
		return 0;
	vips_error("upscale", "cancelled");
	return 1;
}

#endif
