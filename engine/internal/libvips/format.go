package libvips

import (
	"bytes"
	"strings"

	"encoding/binary"

	"github.com/h2non/bimg"

	"github.com/upscalekit/upscale"
)

// format is an image format the engine reads, and how it writes it.
type format struct {
	contentType string
	maxSide     int
	saver       int
	// Encoder settings.
	quality     int // JPEG and WebP
	subsample   int // JPEG chroma subsampling, a VipsForeignSubsample
	compression int // PNG zlib level
	filter      int // PNG row filter, a VipsForeignPngFilter
	// packed: libvips's PNG is rows stored unfiltered (compression 0,
	// filter none), which packPNG filters and deflates on every core.
	packed      bool
	effort      int // WebP, AVIF and GIF, for results of up to effortPixels
	largeEffort int // WebP, AVIF and GIF, for larger results
}

// effortPixels is the largest WebP result encoded at format.effort. From
// effort 3 up, libwebp writes its tokens out at the end of an encoding
// without reporting progress, so it cannot be stopped for 13-29% of its
// time: 60 ms of a 3-megapixel photo, 0.26 s of a noisy
// 4-megapixel result, seconds at 64 megapixels, where it also took 24-43 s
// against 3-5 s at effort 2 (the gaps grow faster than the image).
const effortPixels = 1 << 20

// effortFor is the effort for a result (an animation: a frame) of pixels.
func (f format) effortFor(pixels int64) int {
	if pixels > effortPixels {
		return f.largeEffort
	}
	return f.effort
}

// Encoder settings, chosen by BenchmarkEncoders (BENCHMARKS.md) on a 1024²
// photo and a 1024² cel image enlarged ×2 (4 MP results).
var (
	// JPEG at quality 90 without chroma subsampling (libvips's automatic
	// choice from quality 90 up). 4:2:0 would be a third smaller with the
	// same luma, but its chroma scored 6 dB lower on the photo (40.1
	// against 46.2 dB): an enlarged colour edge is what customers pay for.
	// It costs 0-100 ms more on the photo (two runs of six).
	jpegFormat = format{contentType: "image/jpeg", maxSide: 65535, saver: saveJPEG, quality: 90, subsample: subsampleAuto}
	// PNG at zlib level 2, each row Paeth-filtered: an enlarged photo is
	// smooth at the pixel scale, so its rows' differences from their
	// predictions compress where its bytes do not. On the photo, 6.69 MiB
	// in 246 ms against 10.70 MiB in 345 ms unfiltered at level 6 (the
	// earlier choice; at 15 megapixels 17.7 MiB in 0.89 s against 37.4
	// MiB in 1.42 s); Set14's comic and ppt3 enlarged to 2048² came out
	// half and a third smaller too. Only the synthetic cel image, long
	// runs of one colour, grew (0.238 MiB against 0.168). Higher levels
	// bought 12% for 2.2 times the time (level 4); level 1 was as fast and
	// 1% larger.
	pngFormat = format{contentType: "image/png", maxSide: 1 << 31, saver: savePNG, compression: 2, filter: pngFilterPaeth}
	// packedPNG is how Encode writes pngFormat: libvips writes the rows
	// stored (level 0, unfiltered) and packPNG Paeth-filters and deflates
	// them on every core, where libvips's encoder takes one. A photo
	// enlarged ×4 to 4000×3840 took 0.47-0.67 s against 0.90-0.96 s and
	// came out 14% smaller (15.99 against 18.61 MiB); a flat cel image ×4
	// took 0.37-0.39 s against 0.20-0.22 s, the stored rows' 46 MB costing
	// more than zlib spends on runs of one colour (BenchmarkPackPNG). Encode's pixels, a
	// learned engine's results, are mostly photos, and its request costs
	// seconds anyway; the classical pipeline, which streams and is quick,
	// keeps libvips's encoder.
	packedPNG = func() format {
		f := pngFormat
		f.compression, f.filter, f.packed = 0, pngFilterNone, true
		return f
	}()
	// WebP at quality 90, effort 4 (libvips's default): 1 dB of luma more
	// than effort 2 on the photo for about a quarter of a second more;
	// effort 6 bought nothing and took a third longer again. Above a
	// megapixel, effort 2 (effortPixels): against a result 30 dB from the
	// truth, its 0.4-0.6 dB less (at 42-51 dB from the lossless result)
	// costs about 0.02 dB, and it can be stopped within tens of
	// milliseconds.
	webpFormat = format{contentType: "image/webp", maxSide: webpMaxSide, saver: saveWebP, quality: 90, effort: 4, largeEffort: 2}
	// AVIF (AV1 in HEIF) at quality 80 of AVIF's 100 and effort 2 (aom's
	// speed 7): on the photo 46.2 dB of luma (39.8 of chroma) from the
	// lossless result, WebP's 45.8 at 78% of its size, in 2.2 s against
	// libvips's default quality 50 (40.2 dB, 1.5 s). Effort 4 bought
	// 1.4-1.6 dB for 2.6-2.7 times the time, and libheif cannot be
	// stopped while it encodes (a cancel waits for it, about 0.5 s per
	// result megapixel on two cores), so effort 2 at every size. 16384 a
	// side keeps within what decoders take.
	avifFormat = format{contentType: "image/avif", maxSide: 16384, saver: saveAVIF, quality: 80, effort: 2, largeEffort: 2}
	// GIF, for an animated GIF: each frame's palette chosen by
	// libimagequant at effort 4 and dithered, as libvips does by default
	// at effort 7, which took 1.8 times as long (391 against 214 ms a
	// 640×480 frame) for 0.36 dB of luma (BenchmarkAnimations). GIF
	// stores sides up to 65535.
	gifFormat = format{contentType: "image/gif", maxSide: 65535, saver: saveGIF, effort: 4, largeEffort: 4}
)

// sniff decides the source's kind from the file's signature alone, never
// from a Content-Type or a URL, so no other libvips loader ever sees the
// bytes: JPEG, PNG, WebP, GIF, TIFF, and HEIF files that are HEIC or AVIF
// (ISO BMFF, an ftyp box whose brands name one of them).
func sniff(src []byte) (source, bool) {
	switch {
	case bytes.HasPrefix(src, []byte{0xFF, 0xD8, 0xFF}):
		return sourceJPEG, true
	case bytes.HasPrefix(src, []byte("\x89PNG\r\n\x1a\n")):
		return sourcePNG, true
	case len(src) >= 12 && string(src[:4]) == "RIFF" && string(src[8:12]) == "WEBP":
		return sourceWebP, true
	case bytes.HasPrefix(src, []byte("GIF87a")) || bytes.HasPrefix(src, []byte("GIF89a")):
		return sourceGIF, true
	case bytes.HasPrefix(src, []byte("II*\x00")) || bytes.HasPrefix(src, []byte("MM\x00*")):
		return sourceTIFF, true
	}
	return sniffHEIF(src)
}

// sniffHEIF reads an ISO BMFF file's ftyp box: its major brand, then its
// compatible ones, the first that is AVIF's or HEIC's deciding.
func sniffHEIF(src []byte) (source, bool) {
	if len(src) < 16 || string(src[4:8]) != "ftyp" {
		return 0, false
	}
	size := int(binary.BigEndian.Uint32(src[:4]))
	if size < 16 || size > len(src) || size%4 != 0 {
		return 0, false
	}
	brands := []string{string(src[8:12])}
	for at := 16; at+4 <= size; at += 4 {
		brands = append(brands, string(src[at:at+4]))
	}
	for _, brand := range brands {
		switch brand {
		case "avis": // a sequence: an animation
			return sourceAVIFSequence, true
		case "avif":
			return sourceAVIF, true
		case "heic", "heix", "heim", "heis", "hevc", "hevx":
			return sourceHEIC, true
		}
	}
	return 0, false
}

// source is a kind of file the engine reads.
type source int

// frames is how many frames of a source the engine enlarges: every frame
// of an animated GIF or WebP, one of anything else (a TIFF's first page, a
// HEIF's primary image).
func frames(kind source, l layout) int {
	if kind == sourceGIF || kind == sourceWebP {
		return max(l.pages, 1)
	}
	return 1
}

// output is the format a result of a src source is written in, with
// the quality p asks: p's Format, or else a browser's, the source's own
// (ownOutput). An AVIF animation (a sequence) is refused, never flattened
// to one frame; so is a Format that cannot keep the source: an animation
// in another format than its own, an image with alpha as JPEG.
func output(kind source, l layout, meta bimg.ImageMetadata, p upscale.Params) (format, error) {
	switch {
	case kind == sourceAVIFSequence:
		return format{}, upscale.Explain(upscale.ErrUnsupportedImage, msgAVIFSequence)
	case !l.samples:
		return format{}, upscale.Explain(upscale.ErrUnsupportedImage, "The image's samples are floating-point, signed, 32-bit or CIELAB; only 8- and 16-bit RGB, grey or CMYK images are read.")
	}
	f := ownOutput(kind, l, meta)
	if p.Format != "" {
		asked := askedFormats[p.Format]
		switch {
		case frames(kind, l) > 1 && !asked.is(f):
			return format{}, upscale.Explain(upscale.ErrUnsupportedImage, "The image is an animation, which keeps its own format (%s); leave format out.", strings.TrimPrefix(f.contentType, "image/"))
		case meta.Alpha && asked.is(jpegFormat):
			return format{}, upscale.Explain(upscale.ErrUnsupportedImage, "The image has transparency, which JPEG cannot keep; ask for png, webp or avif, or leave format out.")
		}
		f = asked
	}
	if p.Quality > 0 && f.quality > 0 { // a lossy encoder's
		f.quality = p.Quality
	}
	return f, nil
}

// askedFormats are the formats a request may ask for (Params.Format).
var askedFormats = map[upscale.Format]format{
	upscale.FormatJPEG: jpegFormat, upscale.FormatPNG: pngFormat, upscale.FormatWebP: webpFormat, upscale.FormatAVIF: avifFormat,
}

// is reports whether f writes other's format, whatever its settings.
func (f format) is(other format) bool { return f.contentType == other.contentType }

// ownOutput is the format a result is written in when none is asked: a
// browser's, the source's own where browsers show it; HEIC and TIFF as
// JPEG, or PNG when they have alpha; a still GIF as PNG, an animated one
// as GIF.
func ownOutput(kind source, l layout, meta bimg.ImageMetadata) format {
	switch kind {
	case sourceJPEG:
		return jpegFormat
	case sourceWebP:
		return webpFormat
	case sourceAVIF:
		return avifFormat
	case sourceGIF:
		if frames(kind, l) > 1 {
			return gifFormat
		}
	case sourceHEIC, sourceTIFF:
		if !meta.Alpha {
			return jpegFormat
		}
	}
	return pngFormat
}

// msgAVIFSequence refuses an animated AVIF.
const msgAVIFSequence = "The image is an AVIF animation; AVIF animations are not enlarged. Send it as an animated GIF or WebP, or one frame as a still image."

// msgUnreadable is the refusal of a header that cannot be read.
const msgUnreadable = "The image header could not be read; the file may be truncated or corrupt."
