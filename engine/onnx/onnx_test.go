package onnx_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/h2non/bimg"

	"github.com/upscalekit/upscale"
	vips "github.com/upscalekit/upscale/engine/internal/libvips"
	"github.com/upscalekit/upscale/engine/onnx"
	"github.com/upscalekit/upscale/engine/onnx/onnxtest"
	"github.com/upscalekit/upscale/internal/quality"
	"github.com/upscalekit/upscale/upscaletest"
)

// newEngine is onnx.NewTestEngine (export_test.go).
var newEngine = onnx.NewTestEngine

func TestConformance(t *testing.T) {
	rt, err := onnx.NewONNXRuntime("")
	if err != nil {
		t.Fatal(err)
	}
	onnxtest.TestRuntime(t, rt)
}

// TestNewRefusesBadLibrary: a missing library, a directory, a file that
// is not a shared library and a shared library that is not ONNX Runtime
// are errors that say what to do, not panics. ONNX Runtime loads once per
// process, so the test runs in a child process that has not loaded it.
func TestNewRefusesBadLibrary(t *testing.T) {
	if os.Getenv("UPSCALE_TEST_BAD_LIBRARY") == "" {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestNewRefusesBadLibrary$", "-test.v")
		cmd.Env = append(os.Environ(), "UPSCALE_TEST_BAD_LIBRARY=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("--- PASS")) {
			t.Fatalf("child process: %v\n%s", err, out)
		}
		return
	}
	notLibrary := filepath.Join(t.TempDir(), "libonnxruntime.so.1")
	if err := os.WriteFile(notLibrary, []byte("not a library"), 0o644); err != nil {
		t.Fatal(err)
	}
	libm, err := filepath.Glob("/lib/*-linux-gnu/libm.so.6")
	if err != nil || len(libm) == 0 {
		t.Fatal("no libm.so.6 to load as the wrong library")
	}
	for name, path := range map[string]string{
		"missing":     filepath.Join(t.TempDir(), "nothing.so"),
		"directory":   t.TempDir(),
		"not library": notLibrary,
		"libm":        libm[0],
	} {
		_, err := onnx.New(onnx.Options{Library: path})
		if err == nil || !strings.Contains(err.Error(), "make deps") {
			t.Errorf("%s: err = %v, want one that says to run make deps", name, err)
		}
	}
	// After all that, the right library still loads.
	newEngine(t, onnx.Options{})
}

// TestEstimateMemory: the estimate holds the 16-bit samples of the last
// learned pass's input and output and the encoded result twice (a PNG's
// rows stored, with a filter byte a row and a 256th for their framing);
// with no learned pass in the budget, the decoded source twice.
func TestEstimateMemory(t *testing.T) {
	src := upscaletest.TestImagePNG(t, 40, 30)
	const pixels, bands, sampleBytes = 40 * 30, 3, 2
	stored := func(scale int64) int64 {
		raw := scale * scale * pixels * bands
		return raw + 30*scale + raw/256
	}
	cases := []struct {
		name  string
		opts  onnx.Options
		scale int
		want  int64
	}{
		// One pass: source and ×2; a ×2 PNG result, twice.
		{"×2", onnx.Options{}, 2, (pixels+4*pixels)*bands*sampleBytes + 2*stored(2)},
		// Two passes: the second's input (×2) and output (×4).
		{"×4", onnx.Options{}, 4, (4*pixels+16*pixels)*bands*sampleBytes + 2*stored(4)},
		// No learned pass fits: the decoded source, twice, only.
		{"×2Classical", onnx.Options{MemoryBudget: 1000}, 2, 2*pixels*bands*sampleBytes + 2*stored(2)},
	}
	for _, c := range cases {
		got, err := newEngine(t, c.opts).EstimateMemory(src, upscale.Params{Scale: c.scale})
		if err != nil || got != c.want {
			t.Errorf("%s: EstimateMemory = %d, %v; want %d", c.name, got, err, c.want)
		}
	}
}

// TestNewRefusesUnknownPrecision: a precision the runtime does not offer
// is an error that names those it does.
func TestNewRefusesUnknownPrecision(t *testing.T) {
	for _, p := range []onnx.Precision{"fp16", onnx.BF16} {
		if _, err := onnx.New(onnx.Options{Precision: p}); err == nil || !strings.Contains(err.Error(), "int8 and fp32") && !strings.Contains(err.Error(), "fp32 and int8") {
			t.Errorf("Precision %s: %v; want an error naming int8 and fp32", p, err)
		}
	}
}

// TestEngineSaysWhatRan: Image.Engine (the Upscale-Engine header) names the
// learned passes and the classical rest that made the result, and the
// precision the networks ran in.
func TestEngineSaysWhatRan(t *testing.T) {
	src := upscaletest.TestImagePNG(t, 64, 48)
	// A budget that holds one learned pass of ×8 over 64×48 (the pass's
	// 5 × 64×48 samples of 3 bands, 2 bytes each, and the ×8 PNG result
	// twice, its rows stored: a filter byte a row, a 256th for framing),
	// not two, nor the pass of ×2 over 160×150.
	const result = (8 * 64) * (8 * 48) * 3
	e := newEngine(t, onnx.Options{MemoryBudget: 5*64*48*3*2 + 2*(result+8*48+result/256), Precision: onnx.INT8})
	for _, tc := range []struct {
		name  string
		src   []byte
		scale int
		want  string
	}{
		{"×2Learned", src, 2, "learned;passes=1;network=cunet;runtime=onnxruntime;precision=int8"},
		{"×8LearnedThenClassical", src, 8, "learned;passes=1;network=cunet;runtime=onnxruntime;precision=int8, classical;scale=4"},
		{"TooLargeForLearned", upscaletest.TestImagePNG(t, 160, 150), 2, "classical;scale=2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img, err := e.Upscale(context.Background(), tc.src, upscale.Params{Scale: tc.scale, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone})
			if err != nil {
				t.Fatal(err)
			}
			if img.Engine != tc.want {
				t.Errorf("engine %q, want %q", img.Engine, tc.want)
			}
		})
	}
	// True: what the header calls classical is engine/vips's enlargement,
	// pixel for pixel (the engine packs its PNG on every core, engine/vips
	// has libvips deflate it), and what it calls learned is not.
	classical := vips.New(vips.Options{})
	for _, tc := range []struct {
		src     []byte
		learned bool
	}{{upscaletest.TestImagePNG(t, 160, 150), false}, {src, true}} {
		params := upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone}
		ours, err := e.Upscale(context.Background(), tc.src, params)
		if err != nil {
			t.Fatal(err)
		}
		theirs, err := classical.Upscale(context.Background(), tc.src, params)
		if err != nil {
			t.Fatal(err)
		}
		a, b := quality.Decode(t, ours.Data), quality.Decode(t, theirs.Data)
		if same := slices.Equal(a.R, b.R) && slices.Equal(a.G, b.G) && slices.Equal(a.B, b.B); same == tc.learned {
			t.Errorf("%q: result the same as engine/vips's: %v", ours.Engine, same)
		}
	}
	fp32 := newEngine(t, onnx.Options{Precision: onnx.FP32})
	img, err := fp32.Upscale(context.Background(), src, upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone})
	if err != nil {
		t.Fatal(err)
	}
	if want := "learned;passes=1;network=cunet;runtime=onnxruntime;precision=fp32"; img.Engine != want {
		t.Errorf("FP32 engine %q, want %q", img.Engine, want)
	}
}

// TestFitted: a result past the engine's largest is fitted: learned
// passes up to the largest power of two within the fit, then resized to
// the largest size with the source's aspect ratio.
func TestFitted(t *testing.T) {
	e := newEngine(t, onnx.Options{Vips: vips.Options{MaxOutputPixels: 20_000}, Precision: onnx.INT8})
	img, err := e.Upscale(context.Background(), upscaletest.TestImagePNG(t, 64, 48), upscale.Params{Scale: 4, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone})
	if err != nil {
		t.Fatal(err)
	}
	// ×4 would be 256×192, 49152 pixels: 20000 fit ×2.55, 163×122.
	want := "learned;passes=1;network=cunet;runtime=onnxruntime;precision=int8, fit;width=163;height=122"
	if !img.Fitted || img.Width != 163 || img.Height != 122 || img.Engine != want {
		t.Errorf("%dx%d, fitted %v, engine %q; want 163x122, fitted, %q", img.Width, img.Height, img.Fitted, img.Engine, want)
	}
}

// TestPhoneAndWebFormats: HEIC, AVIF and TIFF sources are learned like
// any other and written as engine/vips writes them: HEIC and TIFF as JPEG,
// AVIF as AVIF.
func TestPhoneAndWebFormats(t *testing.T) {
	e := newEngine(t, onnx.Options{Precision: onnx.INT8})
	png := upscaletest.TestImagePNG(t, 64, 48)
	for _, tc := range []struct {
		kind bimg.ImageType
		want string
	}{{bimg.HEIF, "image/jpeg"}, {bimg.AVIF, "image/avif"}, {bimg.TIFF, "image/jpeg"}} {
		src, err := bimg.NewImage(png).Process(bimg.Options{Type: tc.kind, Quality: 90})
		if err != nil {
			t.Fatal(err)
		}
		img, err := e.Upscale(context.Background(), src, upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone})
		if err != nil || img.ContentType != tc.want || img.Width != 128 || !strings.HasPrefix(img.Engine, "learned;passes=1") {
			t.Errorf("%s: %s %dx%d by %q, %v; want %s 128x96, learned", bimg.ImageTypeName(tc.kind), img.ContentType, img.Width, img.Height, img.Engine, err, tc.want)
		}
	}
}

// TestAnimationsLearned: an animation's frames are learned, each alone,
// and it stays an animation of as many frames.
func TestAnimationsLearned(t *testing.T) {
	e := newEngine(t, onnx.Options{Precision: onnx.INT8})
	for _, tc := range []struct{ file, want string }{{"motion.gif", "image/gif"}, {"motion.webp", "image/webp"}} {
		src, err := os.ReadFile("../../upscaletest/testdata/formats/" + tc.file)
		if err != nil {
			t.Fatal(err)
		}
		img, err := e.Upscale(context.Background(), src, upscale.Params{Scale: 2, ImageType: upscale.Anime, Denoise: upscale.DenoiseNone})
		if err != nil {
			t.Fatal(err)
		}
		if img.ContentType != tc.want || img.Width != 32 || img.Height != 24 || !strings.HasPrefix(img.Engine, "learned;passes=1") {
			t.Errorf("%s: %s %dx%d by %q; want a learned %s of 32x24", tc.file, img.ContentType, img.Width, img.Height, img.Engine, tc.want)
		}
		if h, err := vips.New(vips.Options{}).Header(img.Data, upscale.Params{Scale: 1}); err != nil || h.Frames != 3 {
			t.Errorf("%s: the result has %d frames (%v), want 3", tc.file, h.Frames, err)
		}
	}
}
