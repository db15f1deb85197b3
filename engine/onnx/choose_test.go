package onnx

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/png"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/engine/internal/libvips"
	"github.com/upscalekit/upscale/engine/onnx/models"
	"github.com/upscalekit/upscale/internal/quality"
	"github.com/upscalekit/upscale/upscaletest"
)

// TestDenoiseNeverAboveRequested: the level used fits the source and never
// exceeds the one asked for; none never denoises. Upscale uses that level.
func TestDenoiseNeverAboveRequested(t *testing.T) {
	e := newTestEngine(t)
	butterfly := quality.Shrink(quality.LoadSet(t, "Set5")[2], 2)
	cel := quality.CelSet()[0]
	for _, tc := range []struct {
		image     *quality.Image
		source    quality.Degradation
		imageType upscale.ImageType
		fits      upscale.Denoise // what max gives
	}{
		{butterfly, quality.Clean, upscale.Photo, upscale.DenoiseNone},
		{butterfly, quality.GaussianNoise(15), upscale.Photo, upscale.DenoiseMax},
		{butterfly, quality.GaussianNoise(5), upscale.Photo, upscale.DenoiseLow},
		{butterfly, quality.JPEG(30), upscale.Photo, upscale.DenoiseHigh},
		{butterfly, quality.JPEG(70), upscale.Photo, upscale.DenoiseMid},
		{cel, quality.JPEG(70), upscale.Anime, upscale.DenoiseHigh},
		{cel, quality.GaussianNoise(5), upscale.Anime, upscale.DenoiseMax},
		// A photograph labelled anime is textured: photo's levels.
		{butterfly, quality.JPEG(70), upscale.Anime, upscale.DenoiseMid},
		{butterfly, quality.GaussianNoise(5), upscale.Anime, upscale.DenoiseLow},
	} {
		src := tc.source.Source(t, tc.image)
		for _, requested := range quality.Levels {
			px, err := e.codec.Decode(context.Background(), src, upscale.Params{Scale: 2})
			if err != nil {
				t.Fatal(err)
			}
			got, err := fitLevel(px, tc.imageType, requested)
			if err != nil {
				t.Fatal(err)
			}
			if want := weaker(tc.fits, requested); got != want {
				t.Errorf("%s, %s, %s requested: level %s, want %s", tc.source.Name, tc.imageType, requested, got, want)
			}
			if strength[got] > strength[requested] {
				t.Errorf("%s: level %s is above the %s requested", tc.source.Name, got, requested)
			}
		}
	}
	// Through Upscale: a noisy source with none requested is enlarged by
	// the plain network.
	src := quality.GaussianNoise(15).Source(t, butterfly)
	img, err := e.Upscale(context.Background(), src, upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone})
	if err != nil {
		t.Fatal(err)
	}
	px, err := e.codec.Decode(context.Background(), src, upscale.Params{Scale: 2})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := e.enlargeAll(context.Background(), px, 2, 1, upscale.Params{Scale: 2, ImageType: upscale.Photo}, upscale.DenoiseNone)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(img.Data, plain.Data) {
		t.Error("denoise none on a noisy source: the result is not the plain network's")
	}
}

// TestTiling: tiles cover the image, are balanced, and give the model an
// input it takes.
func TestTiling(t *testing.T) {
	m := &model{Network: &models.Network{Scale: 2, Border: 18, Multiple: 2, MinInput: 38}}
	for _, tc := range []struct {
		w, h, size   int
		tileW, tileH int
		xs, ys       []int
	}{
		{512, 512, 160, 128, 128, []int{0, 128, 256, 384}, []int{0, 128, 256, 384}},
		{500, 129, 128, 126, 66, []int{0, 126, 252, 374}, []int{0, 63}},
		{1, 1, 128, 2, 2, []int{0}, []int{0}},
		{129, 128, 128, 66, 128, []int{0, 63}, []int{0}},
	} {
		got := m.tile(tc.w, tc.h, tc.size)
		if got.tileW != tc.tileW || got.tileH != tc.tileH || !slices.Equal(got.xs, tc.xs) || !slices.Equal(got.ys, tc.ys) {
			t.Errorf("%d×%d in tiles of %d: %+v, want %dx%d at %v, %v", tc.w, tc.h, tc.size, got, tc.tileW, tc.tileH, tc.xs, tc.ys)
		}
		if (got.tileW+2*m.Border)%m.Multiple != 0 || got.tileW+2*m.Border < m.MinInput {
			t.Errorf("%d×%d: tile input %d does not fit the model", tc.w, tc.h, got.tileW+2*m.Border)
		}
	}
}

// TestTileSide: a network with a halo takes tiles of twice the runtime's
// side by default and never under 12 halos; one without takes the
// runtime's; Options.Tile, and above it a brought network's Model.Tile,
// set them.
func TestTileSide(t *testing.T) {
	var rt *ONNXRuntime // tiles of 128
	for _, tc := range []struct{ halo, own, size, want int }{
		{0, 0, 0, 128}, {0, 0, 64, 64},
		{21, 0, 0, 256}, {21, 0, 300, 300}, {21, 0, 64, 252},
		{34, 0, 0, 408},
		{21, 400, 0, 400}, {21, 400, 300, 400}, {21, 100, 0, 252},
	} {
		m := &model{Network: &models.Network{Scale: 2, Halo: tc.halo, Multiple: 1, MinInput: 1}, ownTile: tc.own}
		if got := m.tileSide(rt, tc.size); got != tc.want {
			t.Errorf("halo %d, Model.Tile %d, Options.Tile %d: tiles of %d, want %d", tc.halo, tc.own, tc.size, got, tc.want)
		}
	}
}

// TestOpaqueAlphaStaysOpaque: an alpha band that is opaque everywhere
// needs no pass of the network and comes back opaque.
func TestOpaqueAlphaStaysOpaque(t *testing.T) {
	e := newTestEngine(t)
	img := quality.CelImage(1, 40).NRGBA()
	img.Pix[3] = 254 // one pixel not quite opaque, or Go's encoder drops the alpha band
	px, err := e.codec.Decode(context.Background(), quality.EncodePNG(t, img), upscale.Params{Scale: 2})
	if err != nil {
		t.Fatal(err)
	}
	if !px.Alpha || opaque(px) {
		t.Fatalf("source: alpha %v, opaque %v; want an alpha band, not all opaque", px.Alpha, opaque(px))
	}
	px.Pix[3] = math.MaxUint16
	if !opaque(px) {
		t.Fatal("all opaque, and opaque says it is not")
	}
	out, err := e.enlarge(context.Background(), px, e.archs[0], e.archs[0].models[upscale.DenoiseNone])
	if err != nil {
		t.Fatal(err)
	}
	if !opaque(out) {
		t.Error("the result's alpha is not opaque everywhere")
	}
}

// doneAfter is a context that is done from the n-th time Err is asked.
type doneAfter struct {
	context.Context
	n    int
	done chan struct{}
}

func (c *doneAfter) Err() error {
	if c.n--; c.n <= 0 {
		select {
		case <-c.done:
		default:
			close(c.done)
		}
		return context.Canceled
	}
	return nil
}

func (c *doneAfter) Done() <-chan struct{} { return c.done }

// TestCancelBetweenTiles: the context is checked before every tile, and
// once it is done no further tile is run: a context done at the third
// check leaves two tiles written and the rest untouched.
func TestCancelBetweenTiles(t *testing.T) {
	e := newTestEngine(t)
	cunet := e.archs[0]
	m := cunet.models[upscale.DenoiseNone]
	network, err := e.open(m)
	if err != nil {
		t.Fatal(err)
	}
	const w, h, tile = 200, 50, 64 // 4 tiles of 50 across, one down
	in := planes{pix: make([]uint16, w*h*3), width: w, height: h, bands: 3}
	for i := range in.pix {
		in.pix[i] = 128 * 257
	}
	out := planes{pix: make([]uint16, 4*w*h*3), width: 2 * w, height: 2 * h, bands: 3}
	ctx := &doneAfter{Context: context.Background(), n: 3, done: make(chan struct{})}
	if err := m.run(ctx, network, in, out, tile, &buffers{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	written := 0
	for x := 0; x < 2*w; x += 100 { // one output tile is 100 pixels wide
		if out.pix[(h*2*w+x+50)*3] != 0 {
			written++
		}
	}
	if written != 2 {
		t.Errorf("%d tiles written, want 2 (the context was done at the third check)", written)
	}
}

// TestLearnedPasses: learned ×2 passes while what the engine holds fits
// its memory budget, the rest classical; no pixel count decides. An
// animation's frames all count.
func TestLearnedPasses(t *testing.T) {
	e := &Engine{opts: Options{MemoryBudget: DefaultMemoryBudget}}
	for _, tc := range []struct {
		name                     string
		w, h, scale, png, frames int
		passes                   int
	}{
		{"PhonePhoto×2", 4032, 3024, 2, 0, 1, 1},          // 366 MB of samples, 146 MB of JPEG twice
		{"TwoMegapixels×4", 1632, 1224, 4, 0, 1, 2},       // 240 MB and 96 MB at the second pass
		{"OneMegapixel×16", 1000, 960, 16, 0, 1, 2},       // a third pass would hold 1.2 GB with the result
		{"Thumbnail×16", 100, 100, 16, 0, 1, 4},           // learned to the end
		{"SixtyFourMegapixels×2", 8000, 8000, 2, 1, 1, 0}, // 1.9 GB of samples: all classical
		{"Sticker×4", 512, 512, 4, 0, 24, 2},              // 24 frames: 755 MB of samples and 302 MB of results at the second pass
		{"LongAnimation×2", 640, 480, 2, 0, 400, 0},       // 400 frames: 3.7 GB of samples
	} {
		h := libvips.Header{Width: tc.w, Height: tc.h, Frames: tc.frames, Scale: tc.scale, Result: image.Pt(tc.w*tc.scale, tc.h*tc.scale), Bands: 3, SampleBytes: 1, PNG: tc.png == 1}
		if got := e.mostLearnedPasses(h); got != tc.passes {
			t.Errorf("%s: %d learned passes, want %d", tc.name, got, tc.passes)
		}
		if got := learnedMemory(h, tc.passes); tc.passes > 0 && got > e.opts.MemoryBudget {
			t.Errorf("%s: %d bytes held, over the budget", tc.name, got)
		}
	}
}

// resultPixels is the work of runs ×2 passes over a side² image, counted
// as its result pixels (a large image's tiles' borders left out).
func resultPixels(side, runs int) float64 { return 4 * float64(side*side*runs) }

// TestWorkCountsWholeTiles: a pass's work counts each frame's whole tile,
// the border the network reads included, so that 1000 frames of 4×4 cost
// what the network computes for them, not 16 pixels each.
func TestWorkCountsWholeTiles(t *testing.T) {
	m := &model{Network: &models.Network{Scale: 2, Border: 18, Multiple: 2, MinInput: 38}}
	frames := &libvips.Pixels{Width: 4, Height: 4000, Frames: 1000, Bands: 3}
	if got, want := m.work(frames, 256), 1000*40*40*4.0; got != want {
		t.Errorf("1000 frames of 4×4: work %g, want %g (a 40² input each, ×4)", got, want)
	}
	large := &libvips.Pixels{Width: 1024, Height: 1024, Frames: 1, Bands: 3}
	if got := m.work(large, 256); got < 4*1024*1024 || got > 1.4*4*1024*1024 {
		t.Errorf("1024²: work %g, want a little above its %d result pixels", got, 4*1024*1024)
	}
}

// TestPassFitsTheDeadline: a learned pass runs when its estimated time
// fits in learnedShare of the time left before the request's deadline, at
// the pace the engine measured; else the rest is classical.
func TestPassFitsTheDeadline(t *testing.T) {
	a := &arch{}
	a.pace.set(1.2e-6)
	// At 1.2 µs per result pixel a pass over 512² takes 1.26 s, over
	// 1024² 5.0 s, over 2048² 20.1 s.
	for _, tc := range []struct {
		name string
		left time.Duration
		side int
		runs int
		fits bool
	}{
		{"NoTime", 0, 512, 1, false},
		{"Small", 5 * time.Second, 512, 1, true},           // 3 s for learning
		{"TooLarge", 5 * time.Second, 1024, 1, false},      //
		{"Larger", 20 * time.Second, 1024, 1, true},        // 12 s
		{"LargerStill", 20 * time.Second, 2048, 1, false},  //
		{"AlphaRunsTwice", 2 * time.Second, 512, 2, false}, // 2.5 s against 1.2
		{"Alpha", 5 * time.Second, 512, 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), tc.left)
			defer cancel()
			if got := a.fits(ctx, resultPixels(tc.side, tc.runs)); got != tc.fits {
				t.Errorf("fits %v, want %v", got, tc.fits)
			}
		})
	}
	if !a.fits(context.Background(), resultPixels(1<<14, 2)) {
		t.Error("without a deadline a pass does not fit")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A pass moves the pace by a third of the way for a megapixel, less
	// for fewer pixels: a 64² pass at 10 µs a pixel moves it 0.14%...
	a.pace.observe(10e-6, 64*64)
	if got, want := a.pace.seconds(), 1.2e-6+8.8e-6*64*64/1e6/3; math.Abs(got-want) > 1e-12 {
		t.Errorf("pace %.4g after a 64² pass, want %.4g", got, want)
	}
	// ...while large passes at 10 µs a pixel bring it there: a minute
	// (36 s to learn) holds a pass over 512² (10.5 s), not one over 1024²
	// (41.9 s).
	for range 20 {
		a.pace.observe(10e-6, 4<<20)
	}
	if !a.fits(ctx, resultPixels(512, 1)) || a.fits(ctx, resultPixels(1024, 1)) {
		t.Errorf("at a slower measured pace %.3g, the passes that fit a minute are not 512²'s alone", a.pace.seconds())
	}
	// A pass cut short by its deadline raises the pace to at least what
	// it took a pixel; a faster reading never lowers it.
	a.pace.atLeast(50e-6)
	a.pace.atLeast(1e-6)
	if got := a.pace.seconds(); got != 50e-6 {
		t.Errorf("pace %.2g after a deadline, want 5e-05", got)
	}
	// A pass with no deadline to fit comes before the pace is measured:
	// the next request plans with that pass's pace, not a third of it.
	var unmeasured pace
	unmeasured.observe(3e-6, 64*64)
	if got := unmeasured.seconds(); got != 3e-6 {
		t.Errorf("pace %.2g after a first pass at 3e-06, want 3e-06", got)
	}
}

// TestFlatnessTellsArtFromPhotos: the cel images read as drawn art, and
// Set5's photographs as textured, clean, as JPEGs and under noise.
func TestFlatnessTellsArtFromPhotos(t *testing.T) {
	e := newTestEngine(t)
	for _, d := range []quality.Degradation{quality.Clean, quality.JPEG(75), quality.GaussianNoise(5)} {
		for name, set := range map[string][]*quality.Image{"cel": quality.CelSet(), "photo": quality.LoadSet(t, "Set5")} {
			for i, img := range set {
				px, err := e.codec.Decode(context.Background(), d.Source(t, quality.Shrink(img.Crop(img.W/2*2, img.H/2*2), 2)), upscale.Params{Scale: 2})
				if err != nil {
					t.Fatal(err)
				}
				noise, err := px.Noise()
				if err != nil {
					t.Fatal(err)
				}
				if f := flatness(px, noise); (f >= flatArt) != (name == "cel") {
					t.Errorf("%s %d, %s: flatness %.2f against %.2f for art", name, i, d.Name, f, flatArt)
				}
			}
		}
	}
}

// TestEstimateDuration: a job's expected time is its learned passes' work
// at the measured pace, each run twice for a source with alpha, and
// nothing is known before the pace is; the handler's three times that
// (jobHeadroom) lets the first pass fit its deadline.
func TestEstimateDuration(t *testing.T) {
	e := newTestEngine(t)
	opaque := upscaletest.TestImagePNG(t, 512, 512)
	translucent := upscaletest.TestImage(512, 512)
	translucent.Pix[3] = 128
	var alpha bytes.Buffer
	if err := png.Encode(&alpha, translucent); err != nil {
		t.Fatal(err)
	}
	params := upscale.Params{Scale: 4, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone}
	if _, known, err := e.EstimateDuration(opaque, params); known || err != nil {
		t.Fatalf("before the pace is measured: known %v, %v; want unknown", known, err)
	}
	e.archs[0].pace.set(1e-6)
	// Two ×2 passes: 1024² and 2048² result pixels, and the border the
	// network reads around each tile (up to two thirds more at the
	// runtimes' tile sizes).
	got, known, err := e.EstimateDuration(opaque, params)
	least := time.Duration(1e-6 * (resultPixels(512, 1) + resultPixels(1024, 1)) * float64(time.Second))
	if !known || err != nil || got < least || got > 2*least {
		t.Errorf("512² ×4 at 1 µs a result pixel: %v, %v, %v; want %v to twice that", got, known, err, least)
	}
	if withAlpha, _, _ := e.EstimateDuration(alpha.Bytes(), params); withAlpha != 2*got {
		t.Errorf("with alpha: %v, want twice %v", withAlpha, got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*got)
	defer cancel()
	if !e.archs[0].fits(ctx, resultPixels(512, 1)) {
		t.Errorf("three times the estimate (%v) does not fit the first pass", 3*got)
	}
	if _, _, err := e.EstimateDuration([]byte("not an image"), params); !errors.Is(err, upscale.ErrUnsupportedImage) {
		t.Errorf("a source that is no image: %v, want ErrUnsupportedImage", err)
	}
}

// TestLighterNetworkBeforeInterpolation: a pass that cunet would not make
// in the time left is made by upconv7, measured when it is first needed,
// and Image.Engine says which network made which pass; a pass that
// neither would make is classical.
func TestLighterNetworkBeforeInterpolation(t *testing.T) {
	e := newTestEngine(t)
	cunet, upconv7 := e.archs[0], e.archs[1]
	if cunet.name != CUNet || upconv7.name != UpConv7 {
		t.Fatalf("the engine's networks: %s then %s; want cunet, then upconv7", cunet.name, upconv7.name)
	}
	src := upscaletest.TestImagePNG(t, 64, 48)
	params := upscale.Params{Scale: 4, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone}
	upscaleWithin := func(d time.Duration) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		img, err := e.Upscale(ctx, src, params)
		if err != nil {
			t.Fatal(err)
		}
		return img.Engine
	}
	// cunet at a pace whose first pass of the ×4 is estimated at 18 s of
	// the minute's 36 for learning, and its second, four times the work,
	// at 72 s.
	none := cunet.models[upscale.DenoiseNone]
	cunet.pace.set(18 / none.workOf(64, 48, 1, e.tileOf(none)))
	want := "learned;passes=1;network=cunet;runtime=onnxruntime;precision=int8, learned;passes=1;network=upconv7;runtime=onnxruntime;precision=int8"
	if got := upscaleWithin(time.Minute); got != want {
		t.Errorf("engine %q, want %q", got, want)
	}
	if upconv7.pace.seconds() == 0 {
		t.Error("upconv7 ran without its pace measured")
	}
	upconv7.pace.set(2 * cunet.pace.seconds())
	if got, want := upscaleWithin(time.Minute), "learned;passes=1;network=cunet;runtime=onnxruntime;precision=int8, classical;scale=2"; got != want {
		t.Errorf("with upconv7 twice as slow: engine %q, want %q", got, want)
	}
}
