#ifndef UPSCALE_PIPELINE_H
#define UPSCALE_PIPELINE_H

#include <vips/vips.h>

#include "denoise.h"
#include "metadata.h"

// configure_libvips blocks every loader but JPEG, PNG, WebP, GIF, HEIF
// (HEIC and AVIF) and TIFF, turns the
// operation cache off and routes libvips's log to Go.
void configure_libvips(void);

// decode_strictly decodes every pixel of buf, every frame of an
// animation of pages frames, as the pipeline reads them (pipeline.c's
// load, with the same access), failing on the first decoder error or
// truncation instead of inventing pixels, and stopping within a strip
// once *cancelled is set. It returns 0 on success; on failure the message
// is in vips_error_buffer().
int decode_strictly(const void *buf, size_t len, int pages, int sequential, gint *cancelled);

// read_layout reads buf's header: how many pages it holds (frames of an
// animation, pages of a TIFF), its sample format, its interpretation and
// the orientation vips_autorot will apply. It returns 0, or -1 as upscale
// does.
int read_layout(const void *buf, size_t len, int *pages, VipsBandFormat *format, VipsInterpretation *interpretation,
	int *orientation);

enum { SAVE_JPEG, SAVE_PNG, SAVE_WEBP, SAVE_AVIF, SAVE_GIF };

// save_params says how to encode a result.
typedef struct {
	int saver;
	int quality;     // JPEG and WebP
	int subsample;   // a VipsForeignSubsample, JPEG
	int compression; // PNG
	int filter;      // a VipsForeignPngFilter, PNG
	int effort;      // WebP, AVIF and GIF
} save_params;

// enlarge_params is one classical enlargement, as recipe() in Go chooses
// it. scale 1 leaves the image as it is.
typedef struct {
	int scale;
	const char *interpolator; // a VipsInterpolate nickname: "nohalo", "bicubic", ...
	denoise_params denoise;
	int block_x, block_y;     // where a JPEG source's 8x8 blocks start once turned upright
	double clean_below;       // with denoise: skip it when the source's noise (block_noise) is below this; 0: never skip
	double sharpen;           // unsharp-mask amount, applied to the source; 0 is off
	double sharpen_sigma;
	int clamp;                // clamp each result pixel to the range of its 3x3 source pixels (bicubic only)
	int width, height;        // once enlarged by scale, resize to this size (a fitted result); 0: leave it
} enlarge_params;

// upscale decodes buf strictly (with sequential access when sequential is
// set, which the caller does unless the source must be turned), enlarges it
// as p says and encodes the result as s says into *out (g_free it). With
// pages above 1, buf is an animation of that many frames: each is enlarged
// alone (p's width and height are a frame's) and the result keeps the
// frames' delays and loop count. It returns 0, or -1 with the reason in
// vips_error_buffer(); setting *cancelled makes it stop early and fail.
int upscale(const void *buf, size_t len, int pages, int sequential, const enlarge_params *p, const save_params *s,
	gint *cancelled, void **out, size_t *outlen);

// pixels is a decoded image in memory: upright, sRGB or grey, with colour
// premultiplied by alpha, as interleaved 16-bit samples, 0-65535 whatever
// the source's depth (an 8-bit source's times 257).
typedef struct {
	unsigned short *data; // width * height * bands samples
	int width, height, bands;
	int alpha;                         // the last band is alpha
	VipsBandFormat format;             // the source's sample format: results are written in it
	VipsInterpretation interpretation; // sRGB, B_W, RGB16 or GREY16
	double xres, yres;                 // pixels per millimetre, which the savers write
	void *profile;                     // the ICC profile, or NULL
	size_t profile_len;
	int pages;                         // frames, one above the other, each height / pages rows
	int *delays;                       // with pages above 1: each frame's time in milliseconds
	int loop;                          // and how many times the animation plays; 0: for ever
	kept_exif exif;                    // the EXIF tags a result keeps (metadata.h)
} pixels;

// decode_pixels decodes buf strictly into *out, as upscale does (pages
// included), and the caller frees out's data, profile and delays with
// g_free, and its exif with free_kept_exif. It returns 0, or -1 as upscale does.
int decode_pixels(const void *buf, size_t len, int pages, int sequential, gint *cancelled, pixels *out);

// encode_pixels enlarges in as p says (p->scale 1: not at all) and encodes
// it as s says, like upscale. It reads in->data only during the call.
int encode_pixels(const pixels *in, const enlarge_params *p, const save_params *s, gint *cancelled,
	void **out, size_t *outlen);

// measure_noise is block_noise on in's samples.
int measure_noise(const pixels *in, double *sigma);

#endif
