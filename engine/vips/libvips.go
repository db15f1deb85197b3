package vips

/*
#cgo pkg-config: vips
#include <stdlib.h>
#include <vips/vips.h>

static void restrict_loaders(void) {
	vips_block_untrusted_set(TRUE);
	vips_operation_block_set("VipsForeignLoad", TRUE);
	vips_operation_block_set("VipsForeignLoadJpeg", FALSE);
	vips_operation_block_set("VipsForeignLoadPng", FALSE);
	vips_operation_block_set("VipsForeignLoadWebp", FALSE);
}

// decode_strictly decodes every pixel of buf, top to bottom, failing on the
// first decoder error or truncation instead of inventing pixels. It returns
// 0 on success; on failure the message is in vips_error_buffer().
static int decode_strictly(const void *buf, size_t len) {
	VipsImage *in = vips_image_new_from_buffer(buf, len, "",
		"access", VIPS_ACCESS_SEQUENTIAL,
		"fail_on", VIPS_FAIL_ON_ERROR,
		NULL);
	if (!in)
		return -1;
	double ignored;
	int status = vips_min(in, &ignored, NULL);
	g_object_unref(in);
	return status;
}
*/
import "C"

import (
	"errors"
	"sync"
	"unsafe"
)

// restrictLoaders leaves libvips able to load JPEG, PNG and WebP and nothing
// else: every other loader (SVG, PDF, TIFF, HEIF, JXL, GIF, FITS, Matlab,
// ...) is blocked, the untrusted ones first of all. sniff already refuses
// those formats before libvips sees them; this is the second line, should a
// file ever get past it. It applies to the whole process, which is why New
// says so. libvips is already started by then: bimg starts it when it is
// imported.
var restrictLoaders = sync.OnceFunc(func() { C.restrict_loaders() })

// decodeStrictly decodes all of src and fails on any decoder error or
// truncation. libvips's loaders are lenient by default (a truncated PNG, a
// bad IDAT checksum or a garbage deflate stream "decode" into made-up
// pixels), and bimg cannot ask them to be strict, so this runs before bimg.
// Sequential access keeps its memory to a few rows.
//
// The message comes from libvips's one error buffer, so a failure on another
// goroutine at the same moment may show in it too; it is only logged.
func decodeStrictly(src []byte) error {
	if C.decode_strictly(unsafe.Pointer(unsafe.SliceData(src)), C.size_t(len(src))) == 0 {
		return nil
	}
	msg := C.GoString(C.vips_error_buffer())
	C.vips_error_clear()
	return errors.New(msg)
}
