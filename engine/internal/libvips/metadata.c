// What a result keeps of its source's metadata (metadata.h). libexif reads
// the source's EXIF block and writes the one kept; libvips's savers then
// rebuild EXIF from the block and the exif-* fields left, so both must say
// the same.
#include <string.h>

#include <libexif/exif-data.h>
#include <vips/vips.h>

#include "metadata.h"

// The EXIF tags of IFD0 a result keeps, and libvips's fields for them.
static const ExifTag kept_tags[] = {EXIF_TAG_ARTIST, EXIF_TAG_COPYRIGHT};
static const char *kept_fields[] = {"exif-ifd0-Artist", "exif-ifd0-Copyright", NULL};
G_STATIC_ASSERT(G_N_ELEMENTS(kept_fields) - 1 == G_N_ELEMENTS(((kept_exif *) 0)->fields));

// rights_exif makes an EXIF block of blob's kept tags into *out (free it
// with free), returning its length, or 0 when blob has none of them.
static unsigned int rights_exif(const void *blob, size_t len, unsigned char **out) {
	*out = NULL;
	// libexif reads a block that starts with EXIF_HEADER.
	unsigned char *prefixed = NULL;
	if (len < EXIF_HEADER_LEN || memcmp(blob, EXIF_HEADER, EXIF_HEADER_LEN) != 0) {
		if (!(prefixed = g_try_malloc(EXIF_HEADER_LEN + len)))
			return 0;
		memcpy(prefixed, EXIF_HEADER, EXIF_HEADER_LEN);
		memcpy(prefixed + EXIF_HEADER_LEN, blob, len);
		blob = prefixed, len += EXIF_HEADER_LEN;
	}
	ExifData *source = exif_data_new_from_data(blob, len);
	g_free(prefixed);
	if (!source)
		return 0;
	ExifData *kept = exif_data_new();
	ExifMem *mem = exif_mem_new_default();
	unsigned int out_len = 0;
	if (kept && mem) {
		exif_data_set_byte_order(kept, exif_data_get_byte_order(source));
		int found = 0;
		for (size_t i = 0; i < G_N_ELEMENTS(kept_tags); i++) {
			ExifEntry *from = exif_content_get_entry(source->ifd[EXIF_IFD_0], kept_tags[i]);
			ExifEntry *to = from ? exif_entry_new_mem(mem) : NULL;
			if (!to || !(to->data = exif_mem_alloc(mem, from->size))) {
				if (to)
					exif_entry_unref(to);
				continue;
			}
			to->tag = from->tag;
			to->format = from->format;
			to->components = from->components;
			to->size = from->size;
			memcpy(to->data, from->data, from->size);
			exif_content_add_entry(kept->ifd[EXIF_IFD_0], to);
			exif_entry_unref(to);
			found = 1;
		}
		if (found)
			exif_data_save_data(kept, out, &out_len);
	}
	if (mem)
		exif_mem_unref(mem);
	if (kept)
		exif_data_unref(kept);
	exif_data_unref(source);
	return out_len;
}

// keep_exif replaces image's EXIF block by one of its kept tags, or
// removes it when there are none.
static void keep_exif(VipsImage *image) {
	const void *blob;
	size_t len;
	if (!vips_image_get_typeof(image, VIPS_META_EXIF_NAME) ||
		vips_image_get_blob(image, VIPS_META_EXIF_NAME, &blob, &len))
		return;
	unsigned char *kept;
	unsigned int kept_len = rights_exif(blob, len, &kept);
	if (kept_len > 0)
		vips_image_set_blob_copy(image, VIPS_META_EXIF_NAME, kept, kept_len);
	else
		vips_image_remove(image, VIPS_META_EXIF_NAME);
	free(kept);
}

static int listed(const char *name, const char **names) {
	for (; *names; names++)
		if (strcmp(name, *names) == 0)
			return 1;
	return 0;
}

// The fields keep_metadata keeps of every image, and of an animation.
static const char *always[] = {VIPS_META_ICC_NAME, VIPS_META_EXIF_NAME, NULL};
static const char *animation[] = {VIPS_META_PAGE_HEIGHT, "delay", "loop", NULL};

void keep_metadata(VipsImage *image, int pages) {
	keep_exif(image);
	gchar **fields = vips_image_get_fields(image);
	for (gchar **f = fields; *f; f++)
		if (!listed(*f, always) && !listed(*f, kept_fields) && !(pages > 1 && listed(*f, animation)))
			vips_image_remove(image, *f); // header fields, such as width, stay
	g_strfreev(fields);
}

void copy_kept_metadata(VipsImage *from, VipsImage *to) {
	const char **lists[] = {always, kept_fields, animation};
	for (size_t l = 0; l < G_N_ELEMENTS(lists); l++)
		for (const char **name = lists[l]; *name; name++) {
			GValue value = G_VALUE_INIT;
			if (!vips_image_get_typeof(from, *name) || vips_image_get(from, *name, &value))
				continue;
			vips_image_set(to, *name, &value);
			g_value_unset(&value);
		}
}

void dup_blob(VipsImage *image, const char *name, void **out, size_t *len) {
	const void *blob;
	*out = NULL;
	*len = 0;
	if (vips_image_get_typeof(image, name) && !vips_image_get_blob(image, name, &blob, len))
		*out = g_memdup2(blob, *len);
}

void get_kept_exif(VipsImage *image, kept_exif *out) {
	memset(out, 0, sizeof(*out));
	dup_blob(image, VIPS_META_EXIF_NAME, &out->block, &out->len);
	for (int i = 0; kept_fields[i]; i++) {
		const char *value;
		if (vips_image_get_typeof(image, kept_fields[i]) && !vips_image_get_string(image, kept_fields[i], &value))
			out->fields[i] = g_strdup(value);
	}
}

void set_kept_exif(VipsImage *image, const kept_exif *in) {
	if (in->block)
		vips_image_set_blob_copy(image, VIPS_META_EXIF_NAME, in->block, in->len);
	for (int i = 0; kept_fields[i]; i++)
		if (in->fields[i])
			vips_image_set_string(image, kept_fields[i], in->fields[i]);
}

void free_kept_exif(kept_exif *exif) {
	g_free(exif->block);
	for (size_t i = 0; i < G_N_ELEMENTS(exif->fields); i++)
		g_free(exif->fields[i]);
	memset(exif, 0, sizeof(*exif));
}
