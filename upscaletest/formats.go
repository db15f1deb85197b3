package upscaletest

import (
	"bytes"
	"context"
	"embed"
	"encoding/binary"
	"errors"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"slices"
	"strings"
	"testing"

	"github.com/upscalekit/upscale"
)

// TestUpscalerFormats checks what an Upscaler that writes each result in
// its source's pixel format must keep: grey stays grey and 16-bit stays
// 16-bit, alpha stays alpha without transparent pixels darkening the
// visible edge, and a JPEG's EXIF orientation is applied; the files
// phones and the web send (WebP, HEIC, AVIF, TIFF, GIF) come back as a
// browser shows them, and animated GIFs and WebPs as animations of as many
// frames, with their delays and loop count; and that each still is written
// in each format asked, transparency never as JPEG. Engines that convert
// everything to 8-bit RGB, as PixelUpscaler does, do not pass it.
func TestUpscalerFormats(t *testing.T, newUpscaler func(t *testing.T) upscale.Upscaler) {
	upscalePNG := func(t *testing.T, src image.Image, scale int) image.Image {
		t.Helper()
		return UpscalePNG(t, newUpscaler(t), src, upscale.Params{Scale: scale, ImageType: upscale.Photo, Denoise: upscale.DenoiseMax})
	}

	grey16 := image.NewGray16(image.Rect(0, 0, 10, 6))
	rgb16 := image.NewNRGBA64(image.Rect(0, 0, 10, 6))
	grey := image.NewGray(image.Rect(0, 0, 10, 6))
	for y := range 6 {
		for x := range 10 {
			v := uint16(x*6000 + y*1000 + 7) // low bits that 8 bits would lose
			grey16.SetGray16(x, y, color.Gray16{v})
			rgb16.SetNRGBA64(x, y, color.NRGBA64{v, 65535 - v, v / 2, 65535})
			grey.SetGray(x, y, color.Gray{uint8(x * 20)})
		}
	}
	for _, tc := range []struct {
		name  string
		src   image.Image
		model color.Model
	}{
		{"Gray16", grey16, color.Gray16Model},
		{"RGB16", rgb16, color.RGBA64Model},
		{"Gray", grey, color.GrayModel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := upscalePNG(t, tc.src, 2)
			if out.ColorModel() != tc.model || out.Bounds().Size() != image.Pt(20, 12) {
				t.Errorf("result: %T, %v; want the source's pixel format at 20×12", out, out.Bounds().Size())
			}
			if tc.model != color.GrayModel {
				odd := 0
				for x := range 20 {
					if r, _, _, _ := out.At(x, 6).RGBA(); r&0xFF != r>>8 {
						odd++ // a value 8 bits could not hold
					}
				}
				if odd == 0 {
					t.Error("every value is an 8-bit one: the result lost the source's depth")
				}
			}
		})
	}

	// White opaque pixels next to transparent black ones, and a ramp of
	// alpha below them. Resampling without premultiplying mixes the hidden
	// black into the edge and greys it towards mid-grey; every visible
	// result pixel must stay within 10 levels of white (a learned engine
	// in float32 leaves the edge at 253, in INT8 after two ×2 passes at
	// 249-251), and the ramp must stay a ramp.
	t.Run("Alpha", func(t *testing.T) {
		src := image.NewNRGBA(image.Rect(0, 0, 16, 32))
		for y := range 16 {
			for x := range 8 {
				src.SetNRGBA(x, y, color.NRGBA{255, 255, 255, 255})
			}
		}
		for y := 16; y < 32; y++ {
			for x := range 16 {
				src.SetNRGBA(x, y, color.NRGBA{uint8(x * 16), 128, 64, uint8((y - 16) * 17)})
			}
		}
		out := upscalePNG(t, src, 4)
		edge := 0
		for y := range 64 {
			for x := range 64 {
				c := color.NRGBAModel.Convert(out.At(x, y)).(color.NRGBA)
				if c.A > 0 && c.A < 255 {
					edge++
				}
				if c.A >= 8 && (c.R < 245 || c.G < 245 || c.B < 245) {
					t.Fatalf("pixel (%d, %d) = %v: a visible pixel darkened by the transparent ones", x, y, c)
				}
			}
		}
		if edge == 0 {
			t.Error("no partly transparent pixel at the edge: the alpha was not resampled")
		}
		_, _, _, top := out.At(32, 66).RGBA()
		_, _, _, bottom := out.At(32, 125).RGBA()
		if top > 0x1000 || bottom < 0xE000 {
			t.Errorf("alpha ramp: %#x at its top, %#x at its bottom; want about transparent and opaque", top, bottom)
		}
	})

	// A 40×20 picture, left half black and right half white, stored with
	// EXIF orientation 6 ("rotate 90° clockwise to view"). Upright it is
	// 20×40 with black on top.
	t.Run("EXIFOrientation", func(t *testing.T) {
		src := image.NewGray(image.Rect(0, 0, 40, 20))
		for y := range 20 {
			for x := 20; x < 40; x++ {
				src.SetGray(x, y, color.Gray{255})
			}
		}
		data := WithEXIFOrientation(encode(t, "jpeg", src), 6)
		img, err := newUpscaler(t).Upscale(context.Background(), data, upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone})
		if err != nil {
			t.Fatal(err)
		}
		out, err := jpeg.Decode(bytes.NewReader(img.Data))
		if err != nil {
			t.Fatal(err)
		}
		if got := out.Bounds().Size(); got != image.Pt(40, 80) {
			t.Fatalf("size %v, want 40x80 (upright, doubled)", got)
		}
		topY, _, _, _ := color.GrayModel.Convert(out.At(20, 5)).RGBA()
		bottomY, _, _, _ := color.GrayModel.Convert(out.At(20, 75)).RGBA()
		if topY > 0x4000 || bottomY < 0xC000 {
			t.Errorf("top luma %#x, bottom luma %#x: want black on top, white below", topY, bottomY)
		}
	})

	t.Run("PhoneAndWeb", func(t *testing.T) { testPhoneAndWebFormats(t, newUpscaler(t)) })
	t.Run("Animations", func(t *testing.T) { testAnimations(t, newUpscaler(t)) })
	t.Run("AskedFormat", func(t *testing.T) { testAskedFormats(t, newUpscaler(t)) })
}

// formatFiles are small images as phones, cameras and the web make them
// (written by libvips's savers), each beside its rendering by libvips as
// a PNG ("photo.heic.png"), which the results are compared with.
//
//go:embed testdata/formats
var formatFiles embed.FS

// testPhoneAndWebFormats: WebP, HEIC, AVIF, TIFF (each with and without
// alpha where the format has it) and a still GIF are enlarged ×2 and
// written as a browser shows them (WebP and AVIF as themselves; HEIC and
// TIFF as JPEG, or PNG with alpha; GIF as PNG), within 12 levels of
// libvips's rendering of the source (worstLevels). An AVIF result's size
// is read from its header (Go has no AVIF decoder); its pixels are not
// compared. JPEG and PNG both ways are the rest of TestUpscalerFormats.
func testPhoneAndWebFormats(t *testing.T, u upscale.Upscaler) {
	for _, tc := range []struct{ file, want string }{
		{"photo.webp", "image/webp"}, {"cutout.webp", "image/webp"},
		{"photo.heic", "image/jpeg"}, {"cutout.heic", "image/png"}, {"photo.avif", "image/avif"},
		{"photo.tiff", "image/jpeg"}, {"cutout.tiff", "image/png"}, {"drawing.gif", "image/png"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			src, source := formatFile(t, tc.file)
			img, err := u.Upscale(context.Background(), src, upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone})
			if err != nil {
				t.Fatal(err)
			}
			want := source.Bounds().Size().Mul(2)
			if img.ContentType != tc.want || img.Width != want.X || img.Height != want.Y {
				t.Fatalf("%s %dx%d, want %s %v", img.ContentType, img.Width, img.Height, tc.want, want)
			}
			if tc.want == "image/avif" {
				if got, ok := avifSize(img.Data); !ok || got != want {
					t.Errorf("the AVIF's header says %v (%v), want %v", got, ok, want)
				}
				return
			}
			result, err := decodeStill(img.Data)
			if err != nil || result.Bounds().Size() != want {
				t.Fatalf("the result: %v, %v; want a %s of %v", result, err, tc.want, want)
			}
			if worst := worstLevels(source, result, 2); worst > 12 {
				t.Errorf("a pixel %d levels from the source's, want at most 12", worst)
			}
		})
	}
}

// testAskedFormats checks that each still source of the phone and web
// files is written in each format asked (Params.Format), at twice its
// size, but a source with transparency as JPEG, which is refused with
// ErrUnsupportedImage.
func testAskedFormats(t *testing.T, u upscale.Upscaler) {
	for _, file := range []string{"photo.webp", "cutout.webp", "photo.heic", "cutout.heic", "photo.avif", "photo.tiff", "cutout.tiff", "drawing.gif"} {
		for _, format := range upscale.Formats() {
			t.Run(file+"/"+string(format), func(t *testing.T) {
				src, source := formatFile(t, file)
				img, err := u.Upscale(context.Background(), src, upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone, Format: format})
				if transparent := strings.HasPrefix(file, "cutout"); transparent && format == upscale.FormatJPEG {
					if !errors.Is(err, upscale.ErrUnsupportedImage) {
						t.Errorf("a source with transparency as JPEG: %v, want ErrUnsupportedImage", err)
					}
					return
				}
				want := source.Bounds().Size().Mul(2)
				if err != nil || img.ContentType != "image/"+string(format) || img.Width != want.X || img.Height != want.Y {
					t.Fatalf("%s %dx%d, %v; want image/%s of %v", img.ContentType, img.Width, img.Height, err, format, want)
				}
				if format == upscale.FormatAVIF {
					if got, ok := avifSize(img.Data); !ok || got != want {
						t.Errorf("the AVIF's header says %v (%v), want %v", got, ok, want)
					}
					return
				}
				if result, err := decodeStill(img.Data); err != nil || result.Bounds().Size() != want {
					t.Errorf("the result: %v; want a %s of %v", err, format, want)
				}
			})
		}
	}
}

// FormatSources returns every source file TestUpscalerFormats enlarges
// as a file, by name: a JPEG and a PNG of TestImage, and the phone and web
// files (WebP, HEIC, AVIF, TIFF, GIF, stills and animations). A test of a
// handler sends each one way and another (an upload, a download) and
// compares what comes back.
func FormatSources(t *testing.T) map[string][]byte {
	t.Helper()
	sources := map[string][]byte{"photo.jpg": encode(t, "jpeg", TestImage(40, 30)), "photo.png": encode(t, "png", TestImage(40, 30))}
	entries, err := formatFiles.ReadDir("testdata/formats")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if name := e.Name(); !strings.HasSuffix(name, ".png") {
			sources[name], _ = formatFiles.ReadFile("testdata/formats/" + name)
		}
	}
	return sources
}

// formatFile returns one of formatFiles and its rendering by libvips.
func formatFile(t *testing.T, name string) (src []byte, rendering image.Image) {
	t.Helper()
	src, err := formatFiles.ReadFile("testdata/formats/" + name)
	if err != nil {
		t.Fatal(err)
	}
	data, err := formatFiles.ReadFile("testdata/formats/" + name + ".png")
	if err != nil {
		t.Fatal(err)
	}
	rendering, err = png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	return src, rendering
}

// testAnimations: an animated GIF and an animated WebP (three frames, one
// with a transparent or fading corner, 100 to 300 ms each, played three
// times) are enlarged ×2 into animations of their own format with the
// source's frames, delays and loop count, each frame within 12 levels of
// libvips's rendering of the source's, whose frames are one above the
// other. A SizeReader counts every frame's pixels.
func testAnimations(t *testing.T, u upscale.Upscaler) {
	for _, tc := range []struct{ file, want string }{{"motion.gif", "image/gif"}, {"motion.webp", "image/webp"}} {
		t.Run(tc.file, func(t *testing.T) {
			src, rendering := formatFile(t, tc.file)
			source, err := decodeAnimation(src)
			if err != nil {
				t.Fatal(err)
			}
			size := source.frames[0].Bounds().Size()
			want := size.Mul(2)
			if sizer, ok := u.(upscale.SizeReader); ok {
				if pixels, err := sizer.SourcePixels(src); err != nil || pixels != int64(size.X*size.Y*len(source.frames)) {
					t.Errorf("SourcePixels: %d, %v; want %d frames of %v", pixels, err, len(source.frames), size)
				}
			}
			img, err := u.Upscale(context.Background(), src, upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone})
			if err != nil {
				t.Fatal(err)
			}
			if img.ContentType != tc.want || img.Width != want.X || img.Height != want.Y {
				t.Fatalf("%s %dx%d, want %s %v", img.ContentType, img.Width, img.Height, tc.want, want)
			}
			result, err := decodeAnimation(img.Data)
			if err != nil {
				t.Fatalf("the result is no animation: %v", err)
			}
			if len(result.frames) != len(source.frames) || !slices.Equal(result.delays, source.delays) || result.loop != source.loop {
				t.Fatalf("%d frames of %v ms, loop %d; want %d of %v ms, loop %d",
					len(result.frames), result.delays, result.loop, len(source.frames), source.delays, source.loop)
			}
			for k, frame := range result.frames {
				if frame.Bounds().Size() != want {
					t.Fatalf("frame %d is %v, want %v", k, frame.Bounds().Size(), want)
				}
				rendered := rendering.(interface {
					SubImage(image.Rectangle) image.Image
				}).SubImage(image.Rect(0, k*size.Y, size.X, (k+1)*size.Y))
				if worst := worstLevels(rendered, frame, 2); worst > 12 {
					t.Errorf("frame %d: a pixel %d levels from the source's, want at most 12", k, worst)
				}
			}
		})
	}
}

// avifSize reads an AVIF's size from its first image spatial extents
// (ispe) property: after the box's version and flags, width and height.
func avifSize(data []byte) (image.Point, bool) {
	at := bytes.Index(data, []byte("ispe"))
	if at < 0 || at+16 > len(data) {
		return image.Point{}, false
	}
	return image.Pt(int(binary.BigEndian.Uint32(data[at+8:])), int(binary.BigEndian.Uint32(data[at+12:]))), true
}

// UpscalePNG has u enlarge src, given as a PNG, and decodes the result,
// failing t on any error.
func UpscalePNG(t *testing.T, u upscale.Upscaler, src image.Image, opts upscale.Params) image.Image {
	t.Helper()
	img, err := u.Upscale(context.Background(), encode(t, "png", src), opts)
	if err != nil {
		t.Fatal(err)
	}
	out, err := png.Decode(bytes.NewReader(img.Data))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// WithEXIFOrientation inserts an APP1 segment with one EXIF tag, the
// orientation, right after the JPEG's SOI marker.
func WithEXIFOrientation(jpg []byte, orientation uint16) []byte {
	var tiff bytes.Buffer
	tiff.WriteString("MM\x00\x2a")                                  // big-endian TIFF header
	binary.Write(&tiff, binary.BigEndian, uint32(8))                // offset of IFD0
	binary.Write(&tiff, binary.BigEndian, uint16(1))                // one entry
	binary.Write(&tiff, binary.BigEndian, []uint16{0x0112, 3})      // Orientation, SHORT
	binary.Write(&tiff, binary.BigEndian, uint32(1))                // count
	binary.Write(&tiff, binary.BigEndian, []uint16{orientation, 0}) // value, padded
	binary.Write(&tiff, binary.BigEndian, uint32(0))                // no next IFD
	return WithSegment(jpg, 0xE1, append([]byte("Exif\x00\x00"), tiff.Bytes()...))
}

// WithSegment inserts a segment (marker 0xFF, then code) carrying payload
// right after the JPEG's SOI marker.
func WithSegment(jpg []byte, code byte, payload []byte) []byte {
	out := append([]byte{}, jpg[:2]...)
	out = append(out, 0xFF, code)
	out = binary.BigEndian.AppendUint16(out, uint16(len(payload)+2))
	out = append(out, payload...)
	return append(out, jpg[2:]...)
}
