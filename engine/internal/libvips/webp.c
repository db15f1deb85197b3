// The WebP encoder: libwebp, called here rather than through libvips's
// saver, which cannot be stopped once libwebp has the pixels, and encoding
// is most of the time a WebP result takes. libwebp's progress hook can stop
// it; libvips's saver sets none. The image is what vips_webpsave writes,
// byte for byte, with the colour profile and the EXIF block keep_metadata
// leaves (metadata.c) as they are, where libvips's saver would add
// resolution and size to the EXIF block.
//
// The hook runs as libwebp's progress moves by a percent; at effort 2 its
// longest silence was 3-12% of an encoding's time (0.10-0.16 s of a noisy
// 64-megapixel result). From effort 3 libwebp writes its tokens out at the
// end without reporting progress, 13-29% of the time (0.26 s of a noisy
// 4-megapixel result), which is why vips.go keeps effort 4 to small
// results (BENCHMARKS.md).
#include <string.h>

#include <vips/vips.h>
#include <webp/encode.h>
#include <webp/mux.h>

#include "cancel.h"
#include "metadata.h"
#include "webp.h"

// keep_encoding runs as libwebp's progress moves by a percent; 0 aborts.
static int keep_encoding(int percent, const WebPPicture *picture) {
	return !g_atomic_int_get((const gint *) picture->user_data);
}

// set_metadata puts the ICC profile and EXIF block of in, those it has,
// into mux, as the ICCP and EXIF chunks of WebP's extended format. WebP's
// EXIF chunk holds the TIFF structure alone, without EXIF_HEADER.
static int set_metadata(VipsImage *in, WebPMux *mux) {
	const char *fields[] = {VIPS_META_ICC_NAME, VIPS_META_EXIF_NAME}, *chunks[] = {"ICCP", "EXIF"};
	for (int i = 0; i < 2; i++) {
		const void *blob;
		size_t len;
		if (!vips_image_get_typeof(in, fields[i]) || vips_image_get_blob(in, fields[i], &blob, &len))
			continue;
		if (i == 1 && len >= EXIF_HEADER_LEN && memcmp(blob, EXIF_HEADER, EXIF_HEADER_LEN) == 0)
			blob = (const char *) blob + EXIF_HEADER_LEN, len -= EXIF_HEADER_LEN;
		WebPData chunk = {blob, len};
		if (WebPMuxSetChunk(mux, chunks[i], &chunk, 0) != WEBP_MUX_OK)
			return 0;
	}
	return 1;
}

// with_metadata writes the encoded still image, with in's metadata
// (set_metadata), as a file.
static int with_metadata(VipsImage *in, const WebPData *image, WebPData *file) {
	WebPMux *mux = WebPMuxCreate(image, 0);
	int ok = mux && set_metadata(in, mux) && WebPMuxAssemble(mux, file) == WEBP_MUX_OK;
	WebPMuxDelete(mux);
	return ok;
}

// band_rows is how many rows import_bands converts between two looks at
// the cancel flag: about 10 ms of a 16000-pixel-wide image. Even, so that
// each band's chroma rows are those of the whole image.
enum { band_rows = 64 };

// copy_plane copies rows of width bytes between planes of the given
// strides.
static void copy_plane(uint8_t *dst, int dst_stride, const uint8_t *src, int src_stride, int width, int rows) {
	for (int i = 0; i < rows; i++)
		memcpy(dst + (size_t) i * dst_stride, src + (size_t) i * src_stride, width);
}

// import_bands converts memory's pixels (RGB or RGBA) into picture's YUV
// planes band by band, stopping once *cancelled is set: in one call
// libwebp takes up to a second for 64 megapixels and cannot be stopped.
// The planes are what one WebPPictureImport call makes: each pixel's luma,
// and each two rows' chroma (weighted by alpha where those rows are not
// opaque), depend on no other rows. An RGBA image gets an alpha plane even
// where it is opaque, which libwebp then encodes as it would an image
// without one.
static int import_bands(VipsImage *memory, WebPPicture *picture, gint *cancelled) {
	const int alpha = memory->Bands == 4;
	picture->width = memory->Xsize;
	picture->height = memory->Ysize;
	picture->use_argb = 0;
	picture->colorspace = alpha ? WEBP_YUV420A : WEBP_YUV420;
	if (!WebPPictureAlloc(picture))
		return 0;
	const int chroma_width = (picture->width + 1) / 2;
	for (int top = 0; top < picture->height; top += band_rows) {
		if (g_atomic_int_get(cancelled))
			return 0; // webp_save says so
		WebPPicture band;
		WebPPictureInit(&band);
		band.width = picture->width;
		band.height = MIN(band_rows, picture->height - top);
		if (!(alpha ? WebPPictureImportRGBA : WebPPictureImportRGB)(
				&band, VIPS_IMAGE_ADDR(memory, 0, top), VIPS_IMAGE_SIZEOF_LINE(memory))) {
			WebPPictureFree(&band);
			return 0;
		}
		const int chroma_top = top / 2, chroma_rows = (band.height + 1) / 2;
		copy_plane(picture->y + (size_t) top * picture->y_stride, picture->y_stride,
			band.y, band.y_stride, band.width, band.height);
		copy_plane(picture->u + (size_t) chroma_top * picture->uv_stride, picture->uv_stride,
			band.u, band.uv_stride, chroma_width, chroma_rows);
		copy_plane(picture->v + (size_t) chroma_top * picture->uv_stride, picture->uv_stride,
			band.v, band.uv_stride, chroma_width, chroma_rows);
		if (alpha) {
			uint8_t *a = picture->a + (size_t) top * picture->a_stride;
			if (band.a)
				copy_plane(a, picture->a_stride, band.a, band.a_stride, band.width, band.height);
			else
				for (int i = 0; i < band.height; i++)
					memset(a + (size_t) i * picture->a_stride, 0xff, band.width);
		}
		WebPPictureFree(&band);
	}
	return 1;
}

// encode_still encodes in as one picture, imported band by band.
static int encode_still(VipsImage *in, const WebPConfig *config, gint *cancelled, WebPData *image) {
	// Computing the pixels runs in a libvips sink, which pipeline.c's watch
	// stops.
	VipsImage *memory = vips_image_copy_memory(in);
	if (!memory)
		return 0;
	WebPPicture picture;
	WebPMemoryWriter writer;
	WebPPictureInit(&picture);
	WebPMemoryWriterInit(&writer);
	picture.writer = WebPMemoryWrite;
	picture.custom_ptr = &writer;
	picture.progress_hook = keep_encoding;
	picture.user_data = cancelled;
	int ok = import_bands(memory, &picture, cancelled);
	g_object_unref(memory);
	ok = ok && WebPEncode(config, &picture);
	if (!ok && !g_atomic_int_get(cancelled))
		vips_error("upscale", "libwebp: error %d", picture.error_code);
	WebPPictureFree(&picture);
	image->bytes = writer.mem;
	image->size = writer.size;
	return ok;
}

// encode_animation encodes in's pages (frames, one above the other) as an
// animated WebP file with in's delays, loop count and metadata
// (set_metadata): each frame encoded as a still, whole, and muxed as an
// ANMF frame that replaces the one before.
// libwebp's animation encoder is not used: it drops a frame that looks
// like the one before, and a lossy frame 2 levels from it does, which would
// change the frame count.
static int encode_animation(VipsImage *in, const WebPConfig *config, gint *cancelled, WebPData *file) {
	const int height = vips_image_get_page_height(in), pages = in->Ysize / height;
	int *delays = NULL, n_delays = 0, loop = 0;
	if (vips_image_get_typeof(in, "delay"))
		vips_image_get_array_int(in, "delay", &delays, &n_delays);
	if (vips_image_get_typeof(in, "loop"))
		vips_image_get_int(in, "loop", &loop);
	WebPMux *mux = WebPMuxNew();
	WebPMuxAnimParams params = {0, loop}; // a transparent background, as browsers show it anyway
	int ok = mux && WebPMuxSetAnimationParams(mux, &params) == WEBP_MUX_OK;
	for (int k = 0; ok && k < pages; k++) {
		VipsImage *frame = NULL;
		WebPData still = {NULL, 0};
		ok = !is_cancelled(cancelled) &&
			!vips_extract_area(in, &frame, 0, k * height, in->Xsize, height, NULL) &&
			encode_still(frame, config, cancelled, &still);
		if (ok) {
			WebPMuxFrameInfo info = {
				.bitstream = still,
				.duration = k < n_delays ? delays[k] : 0,
				.id = WEBP_CHUNK_ANMF,
				.dispose_method = WEBP_MUX_DISPOSE_NONE,
				.blend_method = WEBP_MUX_NO_BLEND,
			};
			ok = WebPMuxPushFrame(mux, &info, 1) == WEBP_MUX_OK;
		}
		WebPDataClear(&still);
		if (frame)
			g_object_unref(frame);
	}
	ok = ok && set_metadata(in, mux) && WebPMuxAssemble(mux, file) == WEBP_MUX_OK;
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
	WebPData image = {NULL, 0}, file = {NULL, 0};
	int ok;
	if (vips_image_get_page_height(in) < in->Ysize) {
		ok = encode_animation(in, &config, cancelled, &file);
	} else {
		ok = encode_still(in, &config, cancelled, &image) && with_metadata(in, &image, &file);
		WebPDataClear(&image);
	}
	if (!ok) {
		if (!is_cancelled(cancelled))
			vips_error("upscale", "libwebp: the image could not be encoded");
		return -1;
	}
	*out = g_memdup2(file.bytes, file.size);
	*outlen = file.size;
	WebPDataClear(&file);
	return 0;
}
