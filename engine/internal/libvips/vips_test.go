package libvips_test

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/h2non/bimg"

	"github.com/upscalekit/upscale"
	vips "github.com/upscalekit/upscale/engine/internal/libvips"
	"github.com/upscalekit/upscale/internal/enginebench"
	"github.com/upscalekit/upscale/upscaletest"
)

func TestConformance(t *testing.T) {
	newEngine := func(t *testing.T) upscale.Upscaler { return vips.New(vips.Options{}) }
	upscaletest.TestUpscaler(t, newEngine)
	upscaletest.TestUpscalerFormats(t, newEngine)
}

// TestUpscaleBenchmarkImages enlarges every Set5 and Set14 image at 2 and 4,
// and a 64×64 crop of each at 8 and 16 (whole images at those scales take
// seconds each to encode and prove nothing more about geometry).
func TestUpscaleBenchmarkImages(t *testing.T) {
	e := vips.New(vips.Options{})
	files, _ := filepath.Glob("../../../testdata/sr/Set*/*.png")
	if len(files) != 18 {
		t.Fatalf("found %d Set5/Set14 images, want 18", len(files))
	}
	for _, file := range files {
		whole, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		crop := encodePNG(t, centreCrop(t, whole, 64))
		for _, scale := range upscale.Scales() {
			src := whole
			if scale > 4 {
				src = crop
			}
			t.Run(filepath.Base(file)+"/x"+strconv.Itoa(scale), func(t *testing.T) {
				t.Parallel()
				w, h := decodeSize(t, src)
				img, err := e.Upscale(context.Background(), src, upscale.Params{Scale: scale, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone})
				if err != nil {
					t.Fatal(err)
				}
				if got, want := img.ContentType, "image/png"; got != want {
					t.Errorf("content type %q, want %q", got, want)
				}
				if got := bimg.NewImage(img.Data).Type(); got != "png" {
					t.Errorf("output is %s, want png", got)
				}
				gotW, gotH := decodeSize(t, img.Data)
				if gotW != w*scale || gotH != h*scale || img.Width != gotW || img.Height != gotH {
					t.Errorf("got %dx%d (reported %dx%d), want %dx%d", gotW, gotH, img.Width, img.Height, w*scale, h*scale)
				}
				if want := "classical;scale=" + strconv.Itoa(scale); img.Engine != want {
					t.Errorf("engine %q, want %q", img.Engine, want)
				}
			})
		}
	}
}

func centreCrop(t *testing.T, pngData []byte, side int) image.Image {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(pngData))
	if err != nil {
		t.Fatal(err)
	}
	c := img.Bounds().Size().Div(2)
	r := image.Rect(c.X-side/2, c.Y-side/2, c.X+side/2, c.Y+side/2)
	return img.(interface {
		SubImage(image.Rectangle) image.Image
	}).SubImage(r)
}

func TestFormats(t *testing.T) {
	e := vips.New(vips.Options{})
	src := gradient(40, 30, 255)
	pngData := encodePNG(t, src)
	jpegData := encodeJPEG(t, src)
	webpData, err := bimg.NewImage(pngData).Convert(bimg.WEBP)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, contentType string
		src               []byte
	}{
		{"JPEG", "image/jpeg", jpegData},
		{"PNG", "image/png", pngData},
		{"WebP", "image/webp", webpData},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img, err := e.Upscale(context.Background(), tc.src, upscale.Params{Scale: 4})
			if err != nil {
				t.Fatal(err)
			}
			if got := bimg.NewImage(img.Data).Type(); got != bimg.ImageTypeName(mustType(tc.contentType)) {
				t.Errorf("output is %s, want %s", got, tc.contentType)
			}
			if img.ContentType != tc.contentType {
				t.Errorf("content type %q, want %q", img.ContentType, tc.contentType)
			}
			if img.Width != 160 || img.Height != 120 {
				t.Errorf("got %dx%d, want 160x120", img.Width, img.Height)
			}
		})
	}
}

func TestLimits(t *testing.T) {
	small := encodePNG(t, gradient(100, 100, 255))
	for _, tc := range []struct {
		name  string
		opts  vips.Options
		scale int
	}{
		{"SourcePixels", vips.Options{MaxSourcePixels: 9_999}, 2},
		{"NoResultAsLargeAsTheSource", vips.Options{MaxOutputPixels: 9_999}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := vips.New(tc.opts).Upscale(context.Background(), small, upscale.Params{Scale: tc.scale})
			if !errors.Is(err, upscale.ErrImageTooLarge) {
				t.Errorf("err = %v, want ErrImageTooLarge", err)
			}
		})
	}
	// A result past the largest is fitted: the largest within the limits
	// with the source's aspect ratio, enlarged by the largest power of two
	// within the fit, then resized.
	wide := encodePNG(t, gradient(100, 60, 255))
	for _, tc := range []struct {
		name   string
		opts   vips.Options
		scale  int
		w, h   int
		engine string
	}{
		{"OutputPixels", vips.Options{MaxOutputPixels: 100 * 60 * 16}, 8, 400, 240, "classical;scale=4, fit;width=400;height=240"},
		{"Side", vips.Options{MaxSide: 399}, 4, 399, 239, "classical;scale=2, fit;width=399;height=239"},
		{"LessThanTwice", vips.Options{MaxOutputPixels: 100 * 60 * 3}, 2, 173, 103, "fit;width=173;height=103"},
	} {
		t.Run("Fitted"+tc.name, func(t *testing.T) {
			img, err := vips.New(tc.opts).Upscale(context.Background(), wide, upscale.Params{Scale: tc.scale})
			if err != nil {
				t.Fatal(err)
			}
			size, err := bimg.Size(img.Data)
			if err != nil || !img.Fitted || img.Width != tc.w || img.Height != tc.h || size.Width != tc.w || size.Height != tc.h || img.Engine != tc.engine {
				t.Errorf("%dx%d (encoded %dx%d, %v), fitted %v, engine %q; want %dx%d, fitted, %q",
					img.Width, img.Height, size.Width, size.Height, err, img.Fitted, img.Engine, tc.w, tc.h, tc.engine)
			}
		})
	}
	// A fit by a side is exactly that side, however the factor rounds:
	// 16383/1110 × 1110 is 16382.99… in floats.
	t.Run("FittedToTheSideExactly", func(t *testing.T) {
		long, err := bimg.NewImage(encodePNG(t, gradient(1110, 10, 255))).Convert(bimg.WEBP)
		if err != nil {
			t.Fatal(err)
		}
		img, err := vips.New(vips.Options{}).Upscale(context.Background(), long, upscale.Params{Scale: 16})
		if err != nil || img.Width != 16383 || img.Height != 147 {
			t.Errorf("%dx%d, %v; want 16383x147, WebP's largest side", img.Width, img.Height, err)
		}
	})
	t.Run("HeaderOnly", func(t *testing.T) {
		// A PNG header claiming 100000×100000 pixels and no pixel data: it
		// must be refused from the header, quickly.
		flood := pngHeader(100000, 100000)
		start := time.Now()
		_, err := vips.New(vips.Options{}).Upscale(context.Background(), flood, upscale.Params{Scale: 2})
		if !errors.Is(err, upscale.ErrImageTooLarge) {
			t.Errorf("err = %v, want ErrImageTooLarge", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("took %v: the header alone should decide", d)
		}
	})
}

func TestUnsupported(t *testing.T) {
	e := vips.New(vips.Options{})
	gif := []byte("GIF89a\x01\x00\x01\x00\x00\x00\x00;")
	svg := []byte(`<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>`)
	truncated := encodePNG(t, gradient(10, 10, 255))[:20]
	for name, src := range map[string][]byte{"GIF": gif, "SVG": svg, "Empty": nil, "TruncatedPNG": truncated, "Text": []byte("hello, world")} {
		t.Run(name, func(t *testing.T) {
			_, err := e.Upscale(context.Background(), src, upscale.Params{Scale: 2})
			if !errors.Is(err, upscale.ErrUnsupportedImage) {
				t.Errorf("err = %v, want ErrUnsupportedImage", err)
			}
		})
	}
}

// TestOnlyOurLoadersRun: past New, libvips itself refuses every format
// but JPEG, PNG, WebP, GIF, HEIF (HEIC, AVIF) and TIFF, even when handed
// the bytes directly (bypassing sniff): SVG, which can reference other
// files, and BMP, which only ImageMagick reads, are blocked.
func TestOnlyOurLoadersRun(t *testing.T) {
	vips.New(vips.Options{})
	bmp := []byte("BM\x3a\x00\x00\x00\x00\x00\x00\x00\x36\x00\x00\x00\x28\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x01\x00\x18\x00" +
		"\x00\x00\x00\x00\x04\x00\x00\x00\x13\x0b\x00\x00\x13\x0b\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xff\xff\xff\x00")
	svg := []byte(`<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>`)
	for name, src := range map[string][]byte{"BMP": bmp, "SVG": svg} {
		if size, err := bimg.NewImage(src).Size(); err == nil {
			t.Errorf("libvips loaded a %s (%dx%d)", name, size.Width, size.Height)
		}
	}
	src := encodePNG(t, gradient(8, 8, 255))
	for _, typ := range []bimg.ImageType{bimg.JPEG, bimg.PNG, bimg.WEBP, bimg.GIF, bimg.TIFF, bimg.HEIF, bimg.AVIF} {
		converted, err := bimg.NewImage(src).Convert(typ)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bimg.NewImage(converted).Size(); err != nil {
			t.Errorf("%s refused: %v", bimg.ImageTypeName(typ), err)
		}
	}
}

func TestQueueWaitCountsAgainstDeadline(t *testing.T) {
	e := vips.New(vips.Options{Concurrency: 1})
	src := encodePNG(t, gradient(8, 8, 255))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := e.Upscale(ctx, src, upscale.Params{Scale: 2})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

// Cancelling stops libvips mid-image: the call fails with the context's
// error instead of finishing a result nobody will fetch (it returned the
// finished image before libvips was told), and the engine goes on working.
// Denoising reads the source into memory first and then runs a second
// pipeline from that copy; a small source at a large scale makes sure the
// cancel lands in the second.
func TestCancelStopsWork(t *testing.T) {
	src := enginebench.PhotoJPEG(t, 256)
	for _, level := range []upscale.Denoise{upscale.DenoiseNone, upscale.DenoiseMax} {
		t.Run(string(level), func(t *testing.T) {
			e := vips.New(vips.Options{Concurrency: 1})
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(50*time.Millisecond, cancel) // this image takes seconds
			_, err := e.Upscale(ctx, src, upscale.Params{Scale: 16, ImageType: upscale.Photo, Denoise: level})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled", err)
			}
			if _, err := e.Upscale(context.Background(), encodePNG(t, gradient(8, 8, 255)), upscale.Params{Scale: 2}); err != nil {
				t.Errorf("the next image after a cancelled one: %v", err)
			}
		})
	}
}

// gradient returns an RGBA image; alpha ramps top to bottom from minAlpha
// to 255.
func gradient(w, h int, minAlpha uint8) *image.NRGBA {
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		a := uint8(int(minAlpha) + (255-int(minAlpha))*y/max(h-1, 1))
		for x := 0; x < w; x++ {
			img.SetNRGBA(x, y, color.NRGBA{uint8(x * 255 / w), uint8(y * 255 / h), 128, a})
		}
	}
	return img
}

func encodePNG(t *testing.T, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func encodeJPEG(t *testing.T, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: 95}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// pngHeader returns a PNG of a w×h RGB image whose data is one tiny IDAT:
// what a pixel flood looks like, a huge header over next to no bytes.
func pngHeader(w, h uint32) []byte {
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	zw.Write(make([]byte, 1024))
	zw.Close()
	return pngFile(ihdr(w, h), pngChunk{typ: "IDAT", data: z.Bytes()}, pngChunk{typ: "IEND"})
}

// pngChunk is one chunk of a hand-made PNG; a non-zero length overrides the
// real one, and badCRC spoils the checksum.
type pngChunk struct {
	typ    string
	data   []byte
	length uint32
	badCRC bool
}

func ihdr(w, h uint32) pngChunk {
	data := make([]byte, 13)
	binary.BigEndian.PutUint32(data[0:], w)
	binary.BigEndian.PutUint32(data[4:], h)
	data[8], data[9] = 8, 2 // 8-bit RGB
	return pngChunk{typ: "IHDR", data: data}
}

func pngFile(chunks ...pngChunk) []byte {
	var b bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n")
	for _, c := range chunks {
		length := c.length
		if length == 0 {
			length = uint32(len(c.data))
		}
		binary.Write(&b, binary.BigEndian, length)
		body := append([]byte(c.typ), c.data...)
		b.Write(body)
		crc := crc32.ChecksumIEEE(body)
		if c.badCRC {
			crc ^= 0xFFFFFFFF
		}
		binary.Write(&b, binary.BigEndian, crc)
	}
	return b.Bytes()
}

func decodeSize(t *testing.T, data []byte) (int, int) {
	t.Helper()
	size, err := bimg.Size(data)
	if err != nil {
		t.Fatal(err)
	}
	return size.Width, size.Height
}

func mustType(contentType string) bimg.ImageType {
	return map[string]bimg.ImageType{"image/jpeg": bimg.JPEG, "image/png": bimg.PNG, "image/webp": bimg.WEBP}[contentType]
}
