package onnx_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/engine/onednn"
	"github.com/upscalekit/upscale/engine/onnx"
	"github.com/upscalekit/upscale/engine/onnx/onnxtest"
	"github.com/upscalekit/upscale/internal/ncnn"
	"github.com/upscalekit/upscale/internal/ncnn2onnx"
	"github.com/upscalekit/upscale/internal/quality"
)

// spanModels are SPAN ch48 ×2 and ×4 as brought networks, and the rules
// that run them on clean photos at the scales they make in one pass.
func spanModels(t *testing.T) ([]onnx.Model, []onnx.Rule) {
	dir := onnxtest.SPANDir(t)
	clean := []upscale.Denoise{upscale.DenoiseNone}
	return []onnx.Model{
			{Name: "span-x2", Param: filepath.Join(dir, "spanx2_ch48.param"), Published: true},
			{Name: "span-x4", Param: filepath.Join(dir, "spanx4_ch48.param")},
		}, []onnx.Rule{
			{Model: "span-x4", ImageType: upscale.Photo, Denoise: clean, Scales: []int{4, 8, 16}},
			{Model: "span-x2", ImageType: upscale.Photo, Denoise: clean},
		}
}

// TestBroughtTiledEqualsWhole: SPAN ×2 and ×4, brought, enlarge a photo
// in tiles (of 252 source pixels, twelve times SPAN's halo, the least its
// tiles are, then of 300 and 400) into exactly what one tile over the
// whole image makes (the tiles read SPAN's receptive field, 21 pixels,
// around them), ×4 in one pass, and Image.Engine names the network: on
// ONNX Runtime, and on oneDNN, whose networks leave out the rows of the
// halo that the tiling drops (onnx.InnerNetwork).
func TestBroughtTiledEqualsWhole(t *testing.T) {
	brought, rules := spanModels(t)
	src := quality.Decode(t, quality.SetFile(t, "Set14/monarch.png")).Crop(560, 420).PNG(t)
	dnn, err := onednn.New()
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range []onnx.Runtime{nil, dnn} {
		name := "onnxruntime"
		if rt != nil {
			name = rt.Name()
		}
		for _, scale := range []int{2, 4} {
			opts := upscale.Params{Scale: scale, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone, Format: upscale.FormatPNG}
			enlarge := func(tile int) upscale.Image {
				e := onnx.NewTestEngine(t, onnx.Options{Runtime: rt, Precision: onnx.FP32, Tile: tile, Models: brought, Rules: rules})
				img, err := e.Upscale(context.Background(), src, opts)
				if err != nil {
					t.Fatal(err)
				}
				return img
			}
			whole := enlarge(1024)
			want := "learned;passes=1;network=span-x" + map[int]string{2: "2", 4: "4"}[scale] + ";runtime=" + name + ";precision=fp32"
			if whole.Engine != want {
				t.Errorf("%s ×%d: Image.Engine %q, want %q", name, scale, whole.Engine, want)
			}
			for _, tile := range []int{64, 300, 400} {
				if tiled := enlarge(tile); string(tiled.Data) != string(whole.Data) {
					a, _, _ := quality.Luma(quality.Decode(t, whole.Data), scale)
					b, _, _ := quality.Luma(quality.Decode(t, tiled.Data), scale)
					t.Errorf("%s ×%d in tiles of %d: %.1f dB from the whole image's result, want the same pixels", name, scale, tile, quality.PSNR(a, b))
				}
			}
		}
	}
}

// TestBroughtByRule: the rules pick a brought network only where they
// match: SPAN for a clean photo, cunet for a noisy one (whose first pass
// denoises) and for anime; ×8 of a clean photo is SPAN ×4 then SPAN ×2.
func TestBroughtByRule(t *testing.T) {
	brought, rules := spanModels(t)
	e := onnx.NewTestEngine(t, onnx.Options{Precision: onnx.FP32, Models: brought, Rules: rules})
	clean := quality.Decode(t, quality.SetFile(t, "Set5/head.png")).Crop(48, 40)
	noisy := quality.GaussianNoise(10).Source(t, clean)
	for _, tc := range []struct {
		name string
		src  []byte
		opts upscale.Params
		want string
	}{
		{"CleanPhoto", clean.PNG(t), upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseMax}, "network=span-x2;"},
		{"NoisyPhoto", noisy, upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseMax}, "network=cunet;"},
		{"Anime", clean.PNG(t), upscale.Params{Scale: 2, ImageType: upscale.Anime, Denoise: upscale.DenoiseNone}, "network=cunet;"},
		{"CleanPhotoX8", clean.PNG(t), upscale.Params{Scale: 8, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone}, "network=span-x4;runtime=onnxruntime;precision=fp32, learned;passes=1;network=span-x2;"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Format = upscale.FormatPNG
			img, err := e.Upscale(context.Background(), tc.src, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(img.Engine, tc.want) {
				t.Errorf("Image.Engine %q, want it to say %q", img.Engine, tc.want)
			}
		})
	}
	if got := e.PublishedModels(); len(got) != 1 || got[0] != (upscale.PublishedModel{Name: "span-x2", Scale: 2}) {
		t.Errorf("PublishedModels() = %v, want span-x2 alone, ×2", got)
	}
	img, err := e.Upscale(context.Background(), noisy, upscale.Params{Scale: 4, ImageType: upscale.Photo, Denoise: upscale.DenoiseMax, Model: "span-x2", Format: upscale.FormatPNG})
	if err != nil || img.Engine != "learned;passes=2;network=span-x2;runtime=onnxruntime;precision=fp32" {
		t.Errorf("asked for span-x2: %q, %v; want both passes by it, though no rule picks it for a noisy source", img.Engine, err)
	}
}

// TestBroughtPaceEstimated: a brought network's pace is measured on its
// first pass with a deadline, as cunet's is, and EstimateDuration counts
// a pass at the pace of the network that makes it: ×4 of a clean photo,
// one pass of SPAN ×4, is estimated at under half of ×4 of anime, two
// passes of cunet (on ONNX Runtime in float32, a 1000×960 photo took
// cunet 38 s and SPAN 7).
func TestBroughtPaceEstimated(t *testing.T) {
	brought, rules := spanModels(t)
	e := onnx.NewTestEngine(t, onnx.Options{Precision: onnx.FP32, Models: brought, Rules: rules})
	small := quality.Decode(t, quality.SetFile(t, "Set5/head.png")).Crop(48, 40).PNG(t)
	large := quality.Decode(t, quality.SetFile(t, "Set14/baboon.png")).Crop(256, 256).PNG(t)
	photo := upscale.Params{Scale: 4, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone, Format: upscale.FormatPNG}
	anime := photo
	anime.ImageType = upscale.Anime
	if _, known, err := e.EstimateDuration(large, photo); known || err != nil {
		t.Fatalf("before SPAN's pace is measured: known %v, %v; want unknown", known, err)
	}
	for _, opts := range []upscale.Params{photo, anime} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		img, err := e.Upscale(ctx, small, opts)
		cancel()
		if err != nil || !strings.HasPrefix(img.Engine, "learned;") {
			t.Fatalf("%s ×4 with a deadline: %q, %v; want it learned", opts.ImageType, img.Engine, err)
		}
	}
	span, spanKnown, err1 := e.EstimateDuration(large, photo)
	cunet, cunetKnown, err2 := e.EstimateDuration(large, anime)
	if !spanKnown || !cunetKnown || err1 != nil || err2 != nil || span <= 0 || span > cunet/2 {
		t.Errorf("256² ×4: SPAN's one pass estimated %v (%v, %v), cunet's two %v (%v, %v); want SPAN's known and under half cunet's", span, spanKnown, err1, cunet, cunetKnown, err2)
	}
	t.Logf("256² ×4 estimated: SPAN ×4 %v, cunet ×2 twice %v", span, cunet)
}

// TestBroughtONNX: SPAN ×4 brought as an ONNX file (ncnn2onnx's
// conversion, written out) makes the same pixels as brought from its ncnn
// files: with the file's metadata read, and with none, its scale and
// receptive field measured at New (×4 and at least 21 pixels, or its
// tiles would not match).
func TestBroughtONNX(t *testing.T) {
	dir := t.TempDir()
	model, _, err := ncnn2onnx.Convert(onnxtest.SPAN(t, 4), "span", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	withMeta, bare := filepath.Join(dir, "span.onnx"), filepath.Join(dir, "bare.onnx")
	os.WriteFile(withMeta, model.Marshal(), 0o644)
	model.Metadata = nil
	os.WriteFile(bare, model.Marshal(), 0o644)
	src := quality.Decode(t, quality.SetFile(t, "Set14/monarch.png")).Crop(300, 260).PNG(t)
	opts := upscale.Params{Scale: 4, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone, Format: upscale.FormatPNG}
	enlarge := func(m onnx.Model) upscale.Image {
		t.Helper()
		e := onnx.NewTestEngine(t, onnx.Options{Precision: onnx.FP32, Tile: 64, Models: []onnx.Model{m}, Rules: []onnx.Rule{{Model: m.Name}}})
		img, err := e.Upscale(context.Background(), src, opts)
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	want := enlarge(onnx.Model{Name: "span", Param: filepath.Join(onnxtest.SPANDir(t), "spanx4_ch48.param")})
	for _, file := range []string{withMeta, bare} {
		got := enlarge(onnx.Model{Name: "span", ONNX: file})
		if string(got.Data) != string(want.Data) || got.Engine != want.Engine {
			a, _, _ := quality.Luma(quality.Decode(t, want.Data), 4)
			b, _, _ := quality.Luma(quality.Decode(t, got.Data), 4)
			t.Errorf("%s: %.1f dB from the ncnn files' result (%q, %q), want the same pixels", filepath.Base(file), quality.PSNR(a, b), got.Engine, want.Engine)
		}
	}

}

// TestBroughtTile: a brought network runs in tiles of its own Model.Tile
// where set, else of Options.Tile, else the runtime's (ONNX Runtime's
// 128, for a network without a halo).
func TestBroughtTile(t *testing.T) {
	dir := t.TempDir()
	own, plain := onnxtest.Chain(t, dir, "own", 2, 1, 0, 1, 0), onnxtest.Chain(t, dir, "plain", 2, 1, 0, 1, 0)
	models := []onnx.Model{{Name: "own", Param: own, Tile: 48}, {Name: "plain", Param: plain}}
	for _, tc := range []struct{ engine, own, plain int }{{0, 48, 128}, {64, 48, 64}} {
		e := onnx.NewTestEngine(t, onnx.Options{Precision: onnx.FP32, Tile: tc.engine, Models: models})
		if got, gotPlain := e.TileOf("own"), e.TileOf("plain"); got != tc.own || gotPlain != tc.plain {
			t.Errorf("Options.Tile %d: tiles of %d and %d, want %d (Model.Tile) and %d", tc.engine, got, gotPlain, tc.own, tc.plain)
		}
	}
}

// TestBroughtRefusedAtStart: a network that cannot run is refused by New
// with a sentence that names it and why: an unknown layer by its type, a
// missing file, a taken name, a rule naming no network, a precision a
// brought network has no form for.
func TestBroughtRefusedAtStart(t *testing.T) {
	dir := t.TempDir()
	param := filepath.Join(dir, "odd.param")
	os.WriteFile(param, []byte("7767517\n2 2\nInput in 0 1 data\nGroupNorm g 1 1 data out 0=1\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "odd.bin"), nil, 0o644)
	// A ×2 network that runs: a 1×1 convolution to 12 channels, shuffled.
	shuffle := filepath.Join(dir, "shuffle.param")
	os.WriteFile(shuffle, []byte("7767517\n3 3\nInput in 0 1 data\nConvolution c 1 1 data c1 0=12 1=1 5=1 6=36\nPixelShuffle ps 1 1 c1 out 0=2\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "shuffle.bin"), make([]byte, 4*(1+36+12)), 0o644)
	// An ONNX file of ×3, without metadata.
	x3, err := ncnn.Parse([]byte("7767517\n3 3\nInput in 0 1 data\nConvolution c 1 1 data c1 0=27 1=1 5=1 6=81\nPixelShuffle ps 1 1 c1 out 0=3\n"), make([]byte, 4*(1+81+27)))
	if err != nil {
		t.Fatal(err)
	}
	x3Model, _, err := ncnn2onnx.Convert(x3, "x3", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	x3Model.Metadata = nil
	x3File := filepath.Join(dir, "x3.onnx")
	os.WriteFile(x3File, x3Model.Marshal(), 0o644)
	for name, tc := range map[string]struct {
		models []onnx.Model
		rules  []onnx.Rule
		want   string
	}{
		"UnknownLayer": {[]onnx.Model{{Name: "odd", Param: param}}, nil, `Options.Models[0] "odd": layer g (GroupNorm): layer type GroupNorm is not implemented`},
		"NoFile":       {[]onnx.Model{{Name: "gone", Param: filepath.Join(dir, "gone.param")}}, nil, "gone.param"},
		"TakenName":    {[]onnx.Model{{Name: "cunet", Param: param}}, nil, "the name is taken"},
		"BadName":      {[]onnx.Model{{Name: "a b", Param: param}}, nil, "letters, digits"},
		"UnknownRule":  {nil, []onnx.Rule{{Model: "span"}}, `no model "span"`},
		"RuleDenoise":  {[]onnx.Model{{Name: "shuffle", Param: shuffle}}, []onnx.Rule{{Model: "shuffle", Denoise: []upscale.Denoise{"clean"}}}, `Options.Rules[0]: denoise "clean" is not one of`},
		"INT8":         {[]onnx.Model{{Name: "shuffle", Param: shuffle, Precision: onnx.INT8}}, nil, `precision "int8": onnxruntime runs it in fp32; INT8 needs its INT8 twin (Model.INT8)`},
		"ONNXScale":    {[]onnx.Model{{Name: "x3", ONNX: x3File}}, nil, "must make ×2 or ×4 of a tile of any size"},
		"BothFiles":    {[]onnx.Model{{Name: "both", Param: shuffle, ONNX: x3File}}, nil, "both a Param and an ONNX file"},
		"NegativeTile": {[]onnx.Model{{Name: "shuffle", Param: shuffle, Tile: -1}}, nil, `"shuffle": tile -1: a tile's side is a number of pixels`},
	} {
		t.Run(name, func(t *testing.T) {
			e, err := onnx.New(onnx.Options{Models: tc.models, Rules: tc.rules})
			if err == nil {
				e.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// TestRealESRGANCompactBrought: Real-ESRGAN's compact general network
// (PReLU, PixelShuffle, a nearest ×4 of the source added back) converts
// exactly: ONNX Runtime matches internal/ncnn's reference interpreter on a
// tile; its receptive field is its 34 padded convolutions; and brought to
// the engine it makes ×4 of a photo in one pass, named.
func TestRealESRGANCompactBrought(t *testing.T) {
	net, param := onnxtest.RealESRGANCompact(t)
	rt, err := onnx.NewONNXRuntime(onnx.DefaultLibrary())
	if err != nil {
		t.Fatal(err)
	}
	if g := onnxtest.MatchesReference(t, rt, net, onnxtest.PhotoCrop(t, 12, 10), 12, 10, 1e-4); g != (ncnn2onnx.Geometry{Scale: 4, Border: 0, Multiple: 1, MinInput: 1, Halo: 34}) {
		t.Errorf("geometry %+v, want ×4 with a halo of 34", g)
	}

	e := onnx.NewTestEngine(t, onnx.Options{Precision: onnx.FP32, Models: []onnx.Model{{Name: "realesrgan-x4", Param: param}},
		Rules: []onnx.Rule{{Model: "realesrgan-x4", Scales: []int{4}}}})
	src := quality.Decode(t, quality.SetFile(t, "Set5/head.png")).Crop(40, 30).PNG(t)
	img, err := e.Upscale(context.Background(), src, upscale.Params{Scale: 4, ImageType: upscale.Photo, Denoise: upscale.DenoiseMax, Format: upscale.FormatPNG})
	if err != nil || img.Width != 160 || img.Height != 120 || img.Engine != "learned;passes=1;network=realesrgan-x4;runtime=onnxruntime;precision=fp32" {
		t.Errorf("×4: %dx%d %q, %v; want 160x120 in one pass of realesrgan-x4", img.Width, img.Height, img.Engine, err)
	}
}
