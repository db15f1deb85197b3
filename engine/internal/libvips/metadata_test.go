package libvips_test

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/binary"
	"io"
	"testing"

	"github.com/h2non/bimg"

	"github.com/upscalekit/upscale"
	vips "github.com/upscalekit/upscale/engine/internal/libvips"
	"github.com/upscalekit/upscale/upscaletest"
)

// The colour profile survives enlargement byte for byte in every format, so
// colours look the same enlarged; nothing else of the source's metadata
// does. EXIF, XMP and PNG text can say who took a photo, where and with
// which camera, and a result is served to whoever holds its link.
func TestProfileKeptMetadataDropped(t *testing.T) {
	profile := iccProfile(t)
	const secret = "Jane Doe, 48.8584 N 2.2945 E"
	exif := exifWithArtist(secret)
	xmp := []byte(`<x:xmpmeta xmlns:x="adobe:ns:meta/">` + secret + `</x:xmpmeta>`)
	src := gradient(40, 30, 255)
	webp, err := bimg.NewImage(encodePNG(t, src)).Convert(bimg.WEBP)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		src     []byte
		profile func(t *testing.T, file []byte) []byte // the profile the file carries, or nil
	}{
		{
			"JPEG",
			upscaletest.WithSegment(upscaletest.WithSegment(upscaletest.WithSegment(encodeJPEG(t, src),
				0xE1, append([]byte("http://ns.adobe.com/xap/1.0/\x00"), xmp...)),
				0xE2, append([]byte("ICC_PROFILE\x00\x01\x01"), profile...)),
				0xE1, append([]byte("Exif\x00\x00"), exif...)), // EXIF first, as cameras write it
			jpegProfile,
		},
		{
			"PNG",
			pngWith(encodePNG(t, src),
				pngChunk{typ: "iCCP", data: append([]byte("test\x00\x00"), deflate(t, profile)...)},
				pngChunk{typ: "eXIf", data: exif},
				pngChunk{typ: "tEXt", data: []byte("Author\x00" + secret)},
				pngChunk{typ: "iTXt", data: append([]byte("XML:com.adobe.xmp\x00\x00\x00\x00\x00"), xmp...)}),
			pngProfile,
		},
		{
			"WebP",
			webpWith(t, webp, 40, 30, profile, exif, xmp),
			webpProfile,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.profile(t, tc.src); !bytes.Equal(got, profile) {
				t.Fatalf("the test's source carries profile %q", got)
			}
			if meta, err := bimg.NewImage(tc.src).Metadata(); err != nil || !meta.Profile {
				t.Fatalf("libvips does not read the test's source's profile (%v)", err)
			}
			img, err := vips.New(vips.Options{}).Upscale(context.Background(), tc.src, upscale.Params{Scale: 2})
			if err != nil {
				t.Fatal(err)
			}
			if got := tc.profile(t, img.Data); !bytes.Equal(got, profile) {
				t.Errorf("result's profile is %d bytes, not the source's %d", len(got), len(profile))
			}
			if bytes.Contains(img.Data, []byte("Jane Doe")) || bytes.Contains(img.Data, []byte("xmpmeta")) {
				t.Errorf("the source's EXIF, XMP or text is in the result")
			}
		})
	}
}

// exifWithArtist returns an EXIF block (a TIFF structure) whose one tag,
// Artist, is artist.
func exifWithArtist(artist string) []byte {
	value := append([]byte(artist), 0)
	tiff := []byte("MM\x00\x2a\x00\x00\x00\x08")                   // big-endian, IFD0 at 8
	tiff = binary.BigEndian.AppendUint16(tiff, 1)                  // one entry
	tiff = binary.BigEndian.AppendUint16(tiff, 0x013B)             // Artist
	tiff = binary.BigEndian.AppendUint16(tiff, 2)                  // ASCII
	tiff = binary.BigEndian.AppendUint32(tiff, uint32(len(value))) // count
	tiff = binary.BigEndian.AppendUint32(tiff, 8+2+12+4)           // the value follows the IFD
	tiff = binary.BigEndian.AppendUint32(tiff, 0)                  // no next IFD
	return append(tiff, value...)
}

// iccProfile returns libvips's own sRGB profile, marked as a different one
// (device manufacturer "UPSC") so that a result converted to sRGB would not
// pass for one that kept it. libvips and libpng drop a profile they cannot
// parse, so a hand-made one will not do.
func iccProfile(t *testing.T) []byte {
	jpg, err := bimg.NewImage(encodeJPEG(t, gradient(8, 8, 255))).Process(bimg.Options{InputICC: "srgb", OutputICC: "srgb", Type: bimg.JPEG})
	if err != nil {
		t.Fatal(err)
	}
	profile := jpegProfile(t, jpg)
	if len(profile) < 128 || string(profile[36:40]) != "acsp" {
		t.Fatalf("libvips made no ICC profile: %q", profile)
	}
	copy(profile[48:], "UPSC")
	return profile
}

func jpegProfile(t *testing.T, jpg []byte) []byte {
	for i := 2; i+4 <= len(jpg) && jpg[i] == 0xFF && jpg[i+1] != 0xDA; {
		n := int(binary.BigEndian.Uint16(jpg[i+2:]))
		if payload := jpg[i+4 : i+2+n]; jpg[i+1] == 0xE2 && bytes.HasPrefix(payload, []byte("ICC_PROFILE\x00")) {
			return payload[14:] // after the name, the chunk's number and the count
		}
		i += 2 + n
	}
	return nil
}

// pngWith inserts chunks after the PNG's IHDR.
func pngWith(png []byte, chunks ...pngChunk) []byte {
	const afterIHDR = 8 + 8 + 13 + 4
	return append(append([]byte{}, png[:afterIHDR]...), append(pngFile(chunks...)[8:], png[afterIHDR:]...)...)
}

func pngProfile(t *testing.T, png []byte) []byte {
	for i := 8; i+8 <= len(png); {
		n := int(binary.BigEndian.Uint32(png[i:]))
		if string(png[i+4:i+8]) == "iCCP" {
			data := png[i+8 : i+8+n]
			compressed := data[bytes.IndexByte(data, 0)+2:] // after the name and the method
			r, err := zlib.NewReader(bytes.NewReader(compressed))
			if err != nil {
				t.Fatal(err)
			}
			profile, err := io.ReadAll(r)
			if err != nil {
				t.Fatal(err)
			}
			return profile
		}
		i += 12 + n
	}
	return nil
}

func deflate(t *testing.T, data []byte) []byte {
	var b bytes.Buffer
	w := zlib.NewWriter(&b)
	w.Write(data)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// webpWith rebuilds a WebP of w×h as the extended format with an ICC
// profile before the image and EXIF and XMP after it.
func webpWith(t *testing.T, webp []byte, w, h int, profile, exif, xmp []byte) []byte {
	bitstream := webpChunkNamed(webp, "VP8 ")
	if bitstream == nil {
		t.Fatal("bimg made a WebP without a lossy bitstream")
	}
	vp8x := make([]byte, 10)
	vp8x[0] = 0x20 | 0x08 | 0x04 // ICC, EXIF and XMP present
	vp8x[4], vp8x[5], vp8x[6] = byte(w-1), byte((w-1)>>8), byte((w-1)>>16)
	vp8x[7], vp8x[8], vp8x[9] = byte(h-1), byte((h-1)>>8), byte((h-1)>>16)
	body := []byte("WEBP")
	body = append(body, webpChunk("VP8X", vp8x)...)
	body = append(body, webpChunk("ICCP", profile)...)
	body = append(body, webpChunk("VP8 ", bitstream)...)
	body = append(body, webpChunk("EXIF", exif)...)
	body = append(body, webpChunk("XMP ", xmp)...)
	return append(binary.LittleEndian.AppendUint32([]byte("RIFF"), uint32(len(body))), body...)
}

func webpChunk(fourCC string, data []byte) []byte {
	out := binary.LittleEndian.AppendUint32([]byte(fourCC), uint32(len(data)))
	out = append(out, data...)
	if len(data)%2 == 1 {
		out = append(out, 0)
	}
	return out
}

// webpChunkNamed returns the data of the WebP's first chunk called fourCC,
// or nil.
func webpChunkNamed(webp []byte, fourCC string) []byte {
	for i := 12; i+8 <= len(webp); {
		n := int(binary.LittleEndian.Uint32(webp[i+4:]))
		if string(webp[i:i+4]) == fourCC {
			return webp[i+8 : i+8+n]
		}
		i += 8 + n + n%2
	}
	return nil
}

func webpProfile(t *testing.T, webp []byte) []byte { return webpChunkNamed(webp, "ICCP") }
