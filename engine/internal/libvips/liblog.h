#ifndef UPSCALE_LIBLOG_H
#define UPSCALE_LIBLOG_H

// route_libvips_log sends every message libvips logs to logFromLibvips
// (liblog.go) instead of stderr.
void route_libvips_log(void);

#endif
