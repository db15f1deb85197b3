package libvips_test

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/binary"
	"io"
	"os"
	"testing"

	"github.com/h2non/bimg"

	"github.com/upscalekit/upscale"
	vips "github.com/upscalekit/upscale/engine/internal/libvips"
	"github.com/upscalekit/upscale/upscaletest"
)

// TestMetadataOnPurpose: the colour profile survives enlargement byte for
// byte in every format, so colours look the same enlarged, and so do the
// EXIF tags that say who made the image and on what terms (Artist,
// Copyright). Nothing else does: not the camera (Make, maker notes), not
// where it was taken (GPS), not XMP or PNG text, since a result is served
// to whoever holds its link. Upscale and Encode of Decode's pixels (other
// engines' path) keep the same.
func TestMetadataOnPurpose(t *testing.T) {
	e := vips.New(vips.Options{})
	paths := map[string]func(src []byte) (upscale.Image, error){
		"Upscale": func(src []byte) (upscale.Image, error) {
			return e.Upscale(context.Background(), src, upscale.Params{Scale: 2})
		},
		"DecodeEncode": func(src []byte) (upscale.Image, error) {
			px, err := e.Decode(context.Background(), src, upscale.Params{Scale: 2})
			if err != nil {
				return upscale.Image{}, err
			}
			return e.Encode(context.Background(), px, 2, upscale.Photo)
		},
	}
	profile := iccProfile(t)
	const artist, copyright, place = "Jane Doe", "(c) 2026 Jane Doe", "48.8584 N 2.2945 E"
	exif := exifBlock(artist, copyright, place, 0)
	xmp := []byte(`<x:xmpmeta xmlns:x="adobe:ns:meta/">` + place + `</x:xmpmeta>`)
	src := gradient(40, 30, 255)
	webp, err := bimg.NewImage(encodePNG(t, src)).Convert(bimg.WEBP)
	if err != nil {
		t.Fatal(err)
	}
	jpg := upscaletest.WithSegment(upscaletest.WithSegment(upscaletest.WithSegment(encodeJPEG(t, src),
		0xE1, append([]byte("http://ns.adobe.com/xap/1.0/\x00"), xmp...)),
		0xE2, append([]byte("ICC_PROFILE\x00\x01\x01"), profile...)),
		0xE1, append([]byte("Exif\x00\x00"), exif...)) // EXIF first, as cameras write it
	for _, tc := range []struct {
		name    string
		src     []byte
		profile func(t *testing.T, file []byte) []byte // the profile the file carries; nil: not checked
		frames  int                                    // of an animation; 0 for a still
	}{
		{"JPEG", jpg, jpegProfile, 0},
		{
			"PNG",
			pngWith(encodePNG(t, src),
				pngChunk{typ: "iCCP", data: append([]byte("test\x00\x00"), deflate(t, profile)...)},
				pngChunk{typ: "eXIf", data: exif},
				pngChunk{typ: "tEXt", data: []byte("Comment\x00" + place)},
				pngChunk{typ: "iTXt", data: append([]byte("XML:com.adobe.xmp\x00\x00\x00\x00\x00"), xmp...)}),
			pngProfile,
			0,
		},
		{
			"WebP",
			webpWith(t, webp, 40, 30, profile, exif, xmp),
			webpProfile,
			0,
		},
		{
			"AnimatedWebP",
			webpWith(t, motionWebP(t), 16, 12, profile, exif, xmp),
			webpProfile,
			3,
		},
		// libvips's HEIF saver keeps the JPEG's EXIF and profile.
		{"HEIC", convert(t, jpg, bimg.HEIF), nil, 0},
		{"AVIF", convert(t, jpg, bimg.AVIF), nil, 0},
	} {
		if tc.profile != nil {
			if got := tc.profile(t, tc.src); !bytes.Equal(got, profile) {
				t.Fatalf("%s: the test's source carries profile %q", tc.name, got)
			}
		}
		if meta, err := bimg.NewImage(tc.src).Metadata(); err != nil || !meta.Profile || meta.EXIF.Make != "SecretCam" || meta.EXIF.GPSLatitudeRef != "N" {
			t.Fatalf("%s: libvips does not read the test's source's profile or EXIF: %+v, %v", tc.name, meta.EXIF, err)
		}
		for path, enlarge := range paths {
			t.Run(tc.name+"/"+path, func(t *testing.T) {
				img, err := enlarge(tc.src)
				if err != nil {
					t.Fatal(err)
				}
				if h, err := e.Header(img.Data, upscale.Params{Scale: 1}); tc.frames > 0 && (err != nil || h.Frames != tc.frames) {
					t.Errorf("the result has %d frames (%v), want %d", h.Frames, err, tc.frames)
				}
				if tc.profile != nil {
					if got := tc.profile(t, img.Data); !bytes.Equal(got, profile) {
						t.Errorf("result's profile is %d bytes, not the source's %d", len(got), len(profile))
					}
				}
				for _, kept := range []string{artist, copyright} {
					if !bytes.Contains(img.Data, []byte(kept)) {
						t.Errorf("the result lost %q", kept)
					}
				}
				for _, dropped := range []string{place, "xmpmeta", "SecretCam", "SECRET MAKER NOTE"} {
					if bytes.Contains(img.Data, []byte(dropped)) {
						t.Errorf("%q is in the result", dropped)
					}
				}
				meta, err := bimg.NewImage(img.Data).Metadata()
				if err != nil || meta.EXIF.Make != "" || meta.EXIF.GPSLatitudeRef != "" || meta.EXIF.GPSLatitude != "" {
					t.Errorf("the result's EXIF: %+v, %v; want no camera and no place", meta.EXIF, err)
				}
			})
		}
	}
}

// exifBlock returns an EXIF block (a TIFF structure) as a camera writes
// one: IFD0 with the camera's make, the orientation (none when 0), artist
// and copyright, an EXIF IFD with a maker note, and a GPS IFD whose
// latitude reference is N and whose map datum (an ASCII tag) is place.
func exifBlock(artist, copyright, place string, orientation uint16) []byte {
	type entry struct {
		tag, typ uint16
		value    []byte // ASCII or UNDEFINED bytes, SHORTs, or a LONG
	}
	ascii := func(s string) []byte { return append([]byte(s), 0) }
	// ifd lays out an IFD at off, with its values longer than 4 bytes
	// after it.
	ifd := func(off uint32, entries []entry) []byte {
		var b, values []byte
		b = binary.BigEndian.AppendUint16(b, uint16(len(entries)))
		valuesAt := off + 2 + 12*uint32(len(entries)) + 4
		for _, e := range entries {
			b = binary.BigEndian.AppendUint16(b, e.tag)
			b = binary.BigEndian.AppendUint16(b, e.typ)
			count := uint32(len(e.value))
			switch e.typ {
			case 3: // SHORTs
				count /= 2
			case 4: // a LONG
				count = 1
			}
			b = binary.BigEndian.AppendUint32(b, count)
			if len(e.value) <= 4 {
				b = append(b, append(e.value, make([]byte, 4-len(e.value))...)...)
				continue
			}
			b = binary.BigEndian.AppendUint32(b, valuesAt+uint32(len(values)))
			values = append(values, e.value...)
			if len(values)%2 == 1 {
				values = append(values, 0)
			}
		}
		b = binary.BigEndian.AppendUint32(b, 0) // no next IFD
		return append(b, values...)
	}
	ifd0 := func(exifAt, gpsAt uint32) []byte {
		entries := []entry{{0x010F, 2, ascii("SecretCam")}}
		if orientation != 0 {
			entries = append(entries, entry{0x0112, 3, binary.BigEndian.AppendUint16(nil, orientation)})
		}
		return ifd(8, append(entries, []entry{
			{0x013B, 2, ascii(artist)},
			{0x8298, 2, ascii(copyright)},
			{0x8769, 4, binary.BigEndian.AppendUint32(nil, exifAt)},
			{0x8825, 4, binary.BigEndian.AppendUint32(nil, gpsAt)},
		}...))
	}
	exifAt := 8 + uint32(len(ifd0(0, 0)))
	exifIFD := ifd(exifAt, []entry{{0x927C, 7, []byte("SECRET MAKER NOTE")}})
	gpsAt := exifAt + uint32(len(exifIFD))
	gps := ifd(gpsAt, []entry{{0x0001, 2, ascii("N")}, {0x0012, 2, ascii(place)}})
	tiff := append([]byte("MM\x00\x2a\x00\x00\x00\x08"), ifd0(exifAt, gpsAt)...)
	return append(append(tiff, exifIFD...), gps...)
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

// webpWith rebuilds a WebP of w×h, a still or an animation, as the
// extended format with an ICC profile before the image and EXIF and XMP
// after it, those that are not nil, in place of any it had.
func webpWith(t *testing.T, webp []byte, w, h int, profile, exif, xmp []byte) []byte {
	vp8x := make([]byte, 10)
	for flag, data := range map[byte][]byte{0x20: profile, 0x08: exif, 0x04: xmp} {
		if data != nil {
			vp8x[0] |= flag
		}
	}
	vp8x[4], vp8x[5], vp8x[6] = byte(w-1), byte((w-1)>>8), byte((w-1)>>16)
	vp8x[7], vp8x[8], vp8x[9] = byte(h-1), byte((h-1)>>8), byte((h-1)>>16)
	var pictures []byte
	for _, c := range webpChunks(webp) {
		switch c.fourCC {
		case "VP8X":
			vp8x[0] |= c.data[0] & (0x10 | 0x02) // alpha, animation
		case "ICCP", "EXIF", "XMP ":
		default: // the image: a bitstream, or ANIM and its frames
			pictures = append(pictures, c.bytes()...)
		}
	}
	if pictures == nil {
		t.Fatal("a WebP without an image")
	}
	body := append([]byte("WEBP"), webpChunk{"VP8X", vp8x}.bytes()...)
	if profile != nil {
		body = append(body, webpChunk{"ICCP", profile}.bytes()...)
	}
	body = append(body, pictures...)
	if exif != nil {
		body = append(body, webpChunk{"EXIF", exif}.bytes()...)
	}
	if xmp != nil {
		body = append(body, webpChunk{"XMP ", xmp}.bytes()...)
	}
	return append(binary.LittleEndian.AppendUint32([]byte("RIFF"), uint32(len(body))), body...)
}

// webpChunk is one chunk of a WebP file.
type webpChunk struct {
	fourCC string
	data   []byte
}

// bytes is the chunk as a file holds it: its header, its data, and a
// byte of padding after odd-sized data.
func (c webpChunk) bytes() []byte {
	out := binary.LittleEndian.AppendUint32([]byte(c.fourCC), uint32(len(c.data)))
	out = append(out, c.data...)
	if len(c.data)%2 == 1 {
		out = append(out, 0)
	}
	return out
}

// webpChunks returns the chunks of a WebP file, in order, up to the first
// that the file does not hold whole.
func webpChunks(webp []byte) []webpChunk {
	var chunks []webpChunk
	for i := 12; i+8 <= len(webp); {
		n := int(binary.LittleEndian.Uint32(webp[i+4:]))
		if n > len(webp)-i-8 {
			break
		}
		chunks = append(chunks, webpChunk{string(webp[i : i+4]), webp[i+8 : i+8+n]})
		i += 8 + n + n%2
	}
	return chunks
}

// webpChunkNamed returns the data of the WebP's first chunk called fourCC,
// or nil.
func webpChunkNamed(webp []byte, fourCC string) []byte {
	for _, c := range webpChunks(webp) {
		if c.fourCC == fourCC {
			return c.data
		}
	}
	return nil
}

func webpProfile(t *testing.T, webp []byte) []byte { return webpChunkNamed(webp, "ICCP") }

// motionWebP is upscaletest's animated WebP: three frames of 16×12.
func motionWebP(t *testing.T) []byte {
	t.Helper()
	webp, err := os.ReadFile("../../../upscaletest/testdata/formats/motion.webp")
	if err != nil {
		t.Fatal(err)
	}
	return webp
}
