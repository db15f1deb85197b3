package libvips_test

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/h2non/bimg"

	"github.com/upscalekit/upscale"
	vips "github.com/upscalekit/upscale/engine/internal/libvips"
	"github.com/upscalekit/upscale/internal/enginebench"
	"github.com/upscalekit/upscale/internal/quality"
)

// corruptCorpus is a set of broken and malicious files, made here so that
// every one is explained where it is made. Each must be refused as
// unsupported_image or image_too_large (both 400), never crash, never be
// blamed on the engine (502). A PNG lacking only its IEND chunk is not
// here: every pixel is present, and sloppy encoders write such files, so it
// is accepted on purpose.
func corruptCorpus(t testing.TB) map[string][]byte {
	t.Helper()
	butterfly := quality.SetFile(t, "Set5/butterfly.png")
	jpg, err := bimg.NewImage(butterfly).Convert(bimg.JPEG)
	if err != nil {
		t.Fatal(err)
	}
	webp, err := bimg.NewImage(butterfly).Convert(bimg.WEBP)
	if err != nil {
		t.Fatal(err)
	}
	motionGIF, err := os.ReadFile("../../../upscaletest/testdata/formats/motion.gif")
	if err != nil {
		t.Fatal(err)
	}
	motionWebP, err := os.ReadFile("../../../upscaletest/testdata/formats/motion.webp")
	if err != nil {
		t.Fatal(err)
	}
	idat := pngChunk{typ: "IDAT", data: zlibOf(make([]byte, 64*(1+3*64)))} // 64×64 RGB of black
	validPNG := pngFile(ihdr(64, 64), idat, pngChunk{typ: "IEND"})
	return map[string][]byte{
		"Empty":                  {},
		"OneByte":                {0x89},
		"PNGSignatureOnly":       butterfly[:8],
		"PNGHeaderOnly":          butterfly[:33],
		"PNGTruncatedInIDAT":     butterfly[:len(butterfly)/2],
		"PNGBadIHDRChecksum":     pngFile(pngChunk{typ: "IHDR", data: ihdr(64, 64).data, badCRC: true}, idat, pngChunk{typ: "IEND"}),
		"PNGBadIDATChecksum":     pngFile(ihdr(64, 64), pngChunk{typ: "IDAT", data: idat.data, badCRC: true}, pngChunk{typ: "IEND"}),
		"PNGZeroWidth":           pngFile(ihdr(0, 64), idat, pngChunk{typ: "IEND"}),
		"PNGPixelFlood":          pngHeader(100000, 100000),
		"PNGTallFlood":           pngHeader(1, 1<<30),
		"PNGOutputFlood":         pngHeader(7000, 7000), // 49 MP passes the source limit, ×2 is 196 MP
		"PNGChunkClaims2GiB":     pngFile(ihdr(64, 64), pngChunk{typ: "tEXt", data: []byte("Comment\x00hi"), length: 1 << 31}, idat, pngChunk{typ: "IEND"}),
		"PNGGarbageIDAT":         pngFile(ihdr(64, 64), pngChunk{typ: "IDAT", data: bytes.Repeat([]byte{0xA5}, 4096)}, pngChunk{typ: "IEND"}),
		"PNGThenZip":             append(bytes.Clone(validPNG[:len(validPNG)-30]), "PK\x03\x04polyglot"...),
		"PNGSignatureThenSVG":    append([]byte("\x89PNG\r\n\x1a\n"), `<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>`...),
		"JPEGSOIOnly":            {0xFF, 0xD8, 0xFF},
		"JPEGTruncatedInHeader":  jpg[:100],
		"JPEGTruncatedInScan":    jpg[:len(jpg)/2],
		"JPEGSOFClaims65500":     jpegWithSize(t, jpg, 65500, 65500),
		"JPEGZeroHeight":         jpegWithSize(t, jpg, 0, 256),
		"JPEGThenHTML":           append([]byte{0xFF, 0xD8, 0xFF, 0xE0}, "<html><script>alert(1)</script></html>"...),
		"WebPRIFFOnly":           []byte("RIFF\x00\x00\x00\x00WEBP"),
		"WebPTruncated":          webp[:len(webp)/3],
		"WebPCanvasFlood":        webpCanvas(16384, 16384),
		"WebPRIFFClaims4GiB":     append([]byte("RIFF\xff\xff\xff\xffWEBP"), webp[12:]...),
		"GIFARPolyglot":          []byte("GIF89a\x01\x00\x01\x00\x00\x00\x00;/*PK\x03\x04*/alert(1)"),
		"GIFFrameFlood":          vips.SolidAnimation(t, 1, 1, make([]uint8, 5000)...), // more frames than MaxFrames
		"GIFTruncatedInFrames":   motionGIF[:len(motionGIF)*2/3],
		"WebPAnimationTruncated": motionWebP[:len(motionWebP)*2/3],
		"SVG":                    []byte(`<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" width="99999" height="99999"/>`),
		"PDF":                    []byte("%PDF-1.7\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF"),
		"TIFFLittleEndian":       []byte("II*\x00\x08\x00\x00\x00\x00\x00"),
		"HEIF":                   append([]byte("\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic"), make([]byte, 64)...),
		"JPEGXL":                 []byte{0xFF, 0x0A, 0xFA, 0x7F, 0x00},
		"VipsNativeFormat":       append([]byte{0x08, 0xf2, 0xa6, 0xb6}, make([]byte, 64)...),
		"HTMLErrorPage":          []byte("<!doctype html><title>404 Not Found</title>"),
		"ShellScriptNamedPNG":    []byte("#!/bin/sh\nrm -rf /\n"),
		"PNGSignatureThenJPEG":   append([]byte("\x89PNG\r\n\x1a\n"), jpg...),
		"JPEGHeaderThenPNGBytes": append([]byte{0xFF, 0xD8, 0xFF}, butterfly...),
	}
}

func zlibOf(data []byte) []byte {
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	zw.Write(data)
	zw.Close()
	return z.Bytes()
}

// jpegWithSize rewrites the dimensions in a baseline JPEG's frame header.
func jpegWithSize(t testing.TB, jpg []byte, w, h uint16) []byte {
	t.Helper()
	out := bytes.Clone(jpg)
	i := bytes.Index(out, []byte{0xFF, 0xC0})
	if i < 0 {
		t.Fatal("no baseline frame header in the JPEG")
	}
	binary.BigEndian.PutUint16(out[i+5:], h)
	binary.BigEndian.PutUint16(out[i+7:], w)
	return out
}

// webpCanvas is an extended WebP header declaring a w×h canvas with no image
// data after it.
func webpCanvas(w, h uint32) []byte {
	vp8x := make([]byte, 10)
	vp8x[4], vp8x[5], vp8x[6] = byte(w-1), byte((w-1)>>8), byte((w-1)>>16)
	vp8x[7], vp8x[8], vp8x[9] = byte(h-1), byte((h-1)>>8), byte((h-1)>>16)
	var b bytes.Buffer
	b.WriteString("RIFF")
	binary.Write(&b, binary.LittleEndian, uint32(4+8+len(vp8x)))
	b.WriteString("WEBPVP8X")
	binary.Write(&b, binary.LittleEndian, uint32(len(vp8x)))
	b.Write(vp8x)
	return b.Bytes()
}

// TestCorruptCorpus: every file of the corpus is refused with a 400 sentinel
// and no more than 50 MB of peak memory growth. The time bound only catches
// a hang (a real decode of a flood takes minutes); the times themselves are
// measured by BenchmarkCorruptCorpus.
func TestCorruptCorpus(t *testing.T) {
	e := vips.New(vips.Options{})
	for name, src := range corruptCorpus(t) {
		t.Run(name, func(t *testing.T) {
			peak := enginebench.StartPeakRSS(t)
			start := time.Now()
			_, err := e.Upscale(context.Background(), src, upscale.Params{Scale: 2})
			took := time.Since(start)
			if !errors.Is(err, upscale.ErrUnsupportedImage) && !errors.Is(err, upscale.ErrImageTooLarge) {
				t.Fatalf("err = %v, want ErrUnsupportedImage or ErrImageTooLarge", err)
			}
			if took > 2*time.Second {
				t.Errorf("took %v", took)
			}
			if grew, ok := peak(); ok {
				t.Logf("peak memory grew by %d KiB in %v", grew>>10, took)
				if grew > 50<<20 {
					t.Errorf("peak memory grew by %d MiB, want under 50", grew>>20)
				}
			}
		})
	}
}

// TestLibvipsLogsToSlog: what libvips says while refusing the corpus
// reaches slog.Default() at debug level, and none of it the process's
// stderr, where a hostile caller could otherwise write at will.
func TestLibvipsLogsToSlog(t *testing.T) {
	var logged lockedBuffer
	saved := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug})))
	defer slog.SetDefault(saved)
	e := vips.New(vips.Options{})
	stderr := captureStderr(t)
	for _, src := range corruptCorpus(t) {
		e.Upscale(context.Background(), src, upscale.Params{Scale: 2})
	}
	if written := stderr(); written != "" {
		t.Errorf("libvips wrote to stderr:\n%s", written)
	}
	if got := logged.String(); !strings.Contains(got, "level=DEBUG msg=\"upscale: libvips\" domain=VIPS message=") {
		t.Errorf("no libvips message at debug level in slog; logged:\n%s", got)
	}
}

// lockedBuffer is a bytes.Buffer that libvips's threads may log to at once.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// captureStderr points file descriptor 2, which C code writes to, at a
// pipe until the returned function restores it and returns what was
// written.
func captureStderr(t *testing.T) func() string {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved, err := syscall.Dup(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Dup2(int(w.Fd()), 2); err != nil {
		t.Fatal(err)
	}
	return func() string {
		syscall.Dup2(saved, 2)
		syscall.Close(saved)
		w.Close()
		written, _ := io.ReadAll(r)
		r.Close()
		return string(written)
	}
}

func BenchmarkCorruptCorpus(b *testing.B) {
	e := vips.New(vips.Options{})
	for name, src := range corruptCorpus(b) {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				e.Upscale(context.Background(), src, upscale.Params{Scale: 2})
			}
		})
	}
}
