#ifndef UPSCALE_METADATA_H
#define UPSCALE_METADATA_H

#include <vips/vips.h>

// EXIF_HEADER starts an EXIF block as JPEG's APP1 segment holds it, and as
// libvips and libexif want it; PNG's eXIf and WebP's EXIF chunks hold the
// TIFF structure after it alone.
#define EXIF_HEADER "Exif\0\0"
#define EXIF_HEADER_LEN (sizeof(EXIF_HEADER) - 1)

// keep_metadata removes every metadata field of image but its colour
// profile, the two EXIF tags that say who made it and on what terms
// (Artist and Copyright, in an EXIF block of their own) and, for an
// animation (pages above 1), its frames' height, delays and loop count.
// EXIF, XMP, IPTC and PNG text can say where a photo was taken and with
// which camera, and a result is served to whoever holds its link; the
// orientation has been applied.
void keep_metadata(VipsImage *image, int pages);

// copy_kept_metadata copies onto to the fields of from that keep_metadata
// keeps of an animation, for an image made of from's pixels without its
// fields.
void copy_kept_metadata(VipsImage *from, VipsImage *to);

// kept_exif is the EXIF keep_metadata keeps, outside libvips: its block
// and libvips's fields for its tags, which libvips's savers need beside
// the block to write the tags.
typedef struct {
	void *block; // NULL when the image has none
	size_t len;
	char *fields[2]; // the values of exif-ifd0-Artist and exif-ifd0-Copyright, or NULL
} kept_exif;

// dup_blob copies image's blob field name, if it has one, into *out (free
// it with g_free) and *len; else *out is NULL.
void dup_blob(VipsImage *image, const char *name, void **out, size_t *len);

// get_kept_exif copies what keep_metadata left of image's EXIF into *out,
// which free_kept_exif frees; set_kept_exif puts it on image.
void get_kept_exif(VipsImage *image, kept_exif *out);
void set_kept_exif(VipsImage *image, const kept_exif *in);
void free_kept_exif(kept_exif *exif);

#endif
