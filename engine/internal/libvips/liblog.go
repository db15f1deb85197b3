package libvips

/*
#include <glib.h>
*/
import "C"

import (
	"context"
	"log/slog"
)

// logFromLibvips receives what libvips logs (liblog.c). Its warnings, such
// as "Invalid IHDR data" or "error in tile 0 x 16", explain decoding
// failures that Upscale already returns as errors, and a hostile caller can
// cause them at will, so they go to slog.Default() at debug level rather
// than to the process's stderr. Messages of libvips's own critical errors
// are logged as errors.
//
//export logFromLibvips
func logFromLibvips(domain *C.char, level C.int, message *C.char) {
	slogLevel := slog.LevelDebug
	if level&(C.G_LOG_LEVEL_ERROR|C.G_LOG_LEVEL_CRITICAL) != 0 {
		slogLevel = slog.LevelError
	}
	slog.Default().Log(context.Background(), slogLevel, "upscale: libvips", "domain", C.GoString(domain), "message", C.GoString(message))
}
