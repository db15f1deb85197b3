// The WebP encoder: libwebp, called here rather than through libvips's
// saver, which cannot be stopped once libwebp has the pixels, and encoding
// is most of the time a WebP result takes. libwebp's progress hook can stop
// it; libvips's saver sets none. The image is what vips_webpsave writes,
// byte for byte; the EXIF block it adds (resolution and size) is left out,
// like every other metadata field.
#include <vips/vips.h>
#include <webp/encode.h>
#include <webp/mux.h>

#include "cancel.h"
#include "webp.h"

// keep_encoding runs as libwebp's progress moves by a percent; 0 aborts.
static int keep_encoding(int percent, const WebPPicture *picture) {
	return !g_atomic_int_get((const gint *) picture->user_data);
}

// with_profile puts the ICC profile of in, if it has one, into a copy of
// the encoded image, as the ICCP chunk of WebP's extended format.
static int with_profile(VipsImage *in, const WebPData *image, WebPData *file) {
	const void *profile;
	size_t profile_len;
	if (!vips_image_get_typeof(in, VIPS_META_ICC_NAME) ||
		vips_image_get_blob(in, VIPS_META_ICC_NAME, &profile, &profile_len))
		return WebPDataCopy(image, file);
	WebPData icc = {profile, profile_len};
	WebPMux *mux = WebPMuxCreate(image, 0);
	int ok = mux && WebPMuxSetChunk(mux, "ICCP", &icc, 0) == WEBP_MUX_OK && WebPMuxAssemble(mux, file) == WEBP_MUX_OK;
	WebPMuxDelete(mux);
	return ok;
}

int webp_save(VipsImage *in, int quality, int effort, gint *cancelled, void **out, size_t *outlen) {
	WebPConfig config;
	if (in->BandFmt != VIPS_FORMAT_UCHAR || (in->Bands != 3 && in->Bands != 4) ||
		!WebPConfigPreset(&config, WEBP_PRESET_DEFAULT, quality)) {
		vips_error("upscale", "webp_save: unsupported input");
		return -1;
	}
	config.method = effort;
	// Computing the pixels runs in a libvips sink, which pipeline.c's watch
	// stops.
	VipsImage *memory = vips_image_copy_memory(in);
	if (!memory)
		return -1;
	WebPPicture picture;
	WebPMemoryWriter writer;
	WebPPictureInit(&picture);
	WebPMemoryWriterInit(&writer);
	picture.width = memory->Xsize;
	picture.height = memory->Ysize;
	picture.writer = WebPMemoryWrite;
	picture.custom_ptr = &writer;
	picture.progress_hook = keep_encoding;
	picture.user_data = cancelled;
	int ok = (memory->Bands == 4 ? WebPPictureImportRGBA : WebPPictureImportRGB)(
		&picture, VIPS_IMAGE_ADDR(memory, 0, 0), VIPS_IMAGE_SIZEOF_LINE(memory));
	g_object_unref(memory);
	ok = ok && WebPEncode(&config, &picture);
	WebPEncodingError error = picture.error_code;
	WebPPictureFree(&picture);
	WebPData image = {writer.mem, writer.size}, file = {NULL, 0};
	ok = ok && with_profile(in, &image, &file);
	WebPMemoryWriterClear(&writer);
	if (!ok) {
		if (!is_cancelled(cancelled))
			vips_error("upscale", "libwebp: error %d", error);
		return -1;
	}
	*out = g_memdup2(file.bytes, file.size);
	*outlen = file.size;
	WebPDataClear(&file);
	return 0;
}
