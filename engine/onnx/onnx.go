// Package onnx is an upscale.Upscaler that enlarges images with learned
// super-resolution: waifu2x's convolutional networks, converted from ncnn
// to ONNX by cmd/ncnn2onnx and embedded in this package, run by a Runtime:
// ONNX Runtime by default, or oneDNN (engine/onednn). Decoding and encoding are engine/vips's, so sources are read
// and results written exactly as the default engine does (formats, pixel
// limits, EXIF orientation, colour profile, alpha, grey and 16-bit).
//
// It needs cgo, libvips and libexif (Debian: libvips-dev, libexif-dev) and, for the default
// runtime, ONNX Runtime 1.24.x's libonnxruntime.so.1, which `make deps`
// installs in ~/.cache/upscale-tools; NewONNXRuntime loads it with dlopen
// and fails with an error that says what to do when it is missing or of
// another version.
//
// # Scales
//
// The networks enlarge ×2. Scale 2 is one pass and 4 two. Learned passes
// run while what the engine holds for them fits Options.MemoryBudget
// (mostLearnedPasses) and each pass's estimated time fits the request's
// deadline (passFits), and libvips's classical enlargement does the rest:
// no pixel count decides. A pass holds its source and its result whole,
// as 16-bit samples; floats live only per tile. Image.Engine says which
// did what. Each pass runs tile by tile (Options.Tile), each tile read
// with the network's receptive field around it, so tiles join without
// seams.
//
// # Denoising
//
// The first pass uses one of five networks: plain, or with one of
// waifu2x's denoisers. A request's denoise level is the strongest it allows:
// the engine reads the source's noise and, for a JPEG, its compression,
// and uses the level measured best for such a source (stronger for
// imageType anime, whose flat colour shows every artefact), never above
// the one requested. A clean source gets the plain network, so the API's
// default, max, costs it nothing.
package onnx

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"slices"
	"strings"

	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/engine/internal/libvips"
	"github.com/upscalekit/upscale/engine/onnx/models"
	"github.com/upscalekit/upscale/engine/vips"
)

// DefaultMemoryBudget is Options.MemoryBudget's default: 1 GiB, the
// default of upscale.Capacity.MemoryBudget. Within it learned passes make
// RGB results of up to about 90 megapixels (a JPEG), such as ×2 of a
// 12-megapixel phone photo (49 megapixels, 440 MB held).
const DefaultMemoryBudget = 1 << 30

// Precision is the arithmetic the networks run in.
type Precision string

const (
	// INT8 runs most of each network's convolutions, sums and
	// squeeze-and-excitation blocks on 8-bit integers (ONNX Runtime's
	// QLinearConv and kin), calibrated by cmd/ncnn2onnx, and keeps in
	// float32 the layers that set the image's values directly: cunet's
	// first U-Net's full-resolution level and the sum that makes the
	// output, upconv7's first three convolutions and the transposed one
	// that makes the output.
	INT8 Precision = "int8"
	// BF16 multiplies bfloat16 values (float32's range, 8 bits of
	// precision) and adds in float32, and keeps in float32 the values of
	// the image itself: the networks' results and the sums that make
	// them (engine/onednn).
	BF16 Precision = "bf16"
	// FP32 runs every layer in float32, as the original networks do.
	FP32 Precision = "fp32"
)

// Options configures an Engine. Every zero field means the default beside
// it.
type Options struct {
	// Runtime runs the networks. Nil means ONNX Runtime, loaded from
	// Library.
	Runtime Runtime
	// Library is the path of libonnxruntime.so.1 when Runtime is nil.
	// Empty means the UPSCALE_ONNXRUNTIME_LIB environment variable, else
	// DefaultLibrary().
	Library string
	// Vips configures the libvips engine that decodes, encodes and makes
	// the classical passes; its pixel limits apply to this engine's
	// sources and results. Its Concurrency is not used.
	Vips vips.Options
	// Concurrency is how many images are enlarged at once; further
	// requests queue, and their wait counts against their deadline. Zero
	// means 1: one image on all of Threads finishes sooner than two that
	// share them.
	Concurrency int
	// Threads is how many threads the runtime uses for one image. Zero
	// means the number of CPUs.
	Threads int
	// Tile is the side of the tiles, in source pixels; a network with a
	// halo (a brought one that keeps its size) takes tiles of at least 12
	// times its halo. Zero means the runtime's Tile(), and twice that for
	// a network with a halo, which it reads again around every tile.
	Tile int
	// MemoryBudget caps what one image's learned passes may hold (see
	// EstimateMemory): a pass that would hold more is done classically.
	// Set it to the handler's upscale.Capacity.MemoryBudget, so that every
	// estimate fits it. Zero means DefaultMemoryBudget.
	MemoryBudget int64
	// Precision is the networks' arithmetic, one of the runtime's
	// Precisions(). Empty means the first of them.
	Precision Precision
	// Architectures are the networks a learned pass may use, in the order
	// the engine tries them: the first whose pass fits the time left
	// makes it. Empty means CUNet, then UpConv7.
	Architectures []Architecture
	// Models are networks the operator brings, read and checked on their
	// runtimes in New, each in its own precision (Model.Precision: FP32
	// unless it says BF16, or INT8 on its twin). None by default.
	Models []Model
	// Rules pick Models for passes, before the Architectures; a pass no
	// rule picks a network for is the Architectures'. None by default.
	Rules []Rule
}

// Engine enlarges the images engine/vips reads (JPEG, PNG, WebP, GIF,
// HEIC, AVIF, TIFF; an animation frame by frame) with waifu2x networks.
// It is safe for concurrent use.
type Engine struct {
	opts      Options
	codec     *libvips.Engine
	slots     chan struct{}
	archs     []*arch                  // in the order of Options.Architectures
	brought   []*arch                  // Options.Models, in their order
	published []upscale.PublishedModel // those callers may ask for by name
	rules     []rule                   // Options.Rules
	buffers   buffers                  // kept between images
}

// An arch is one Architecture's networks on the engine's runtime, or a
// network the operator brought (one for every level), and the pace
// measured of them.
type arch struct {
	name   Architecture
	models map[upscale.Denoise]*model // by the level it denoises at
	pace   pace                       // seconds per unit of model.work
}

// scale is what a pass of a's enlarges by.
func (a *arch) scale() int { return a.models[upscale.DenoiseNone].Scale }

// precision is what a's networks run in on an engine of precision
// engine: a brought one's in its own (Model.Precision).
func (a *arch) precision(engine Precision) Precision {
	return cmp.Or(a.models[upscale.DenoiseNone].precision, engine)
}

var (
	_ upscale.ConcurrentUpscaler = (*Engine)(nil)
	_ upscale.MemoryEstimator    = (*Engine)(nil)
	_ upscale.MemoryReleaser     = (*Engine)(nil)
	_ upscale.SizeReader         = (*Engine)(nil)
	_ upscale.SourceInspector    = (*Engine)(nil)
	_ upscale.DurationEstimator  = (*Engine)(nil)
	_ upscale.ModelPublisher     = (*Engine)(nil)
)

// Concurrency is how many images the Engine enlarges at once
// (Options.Concurrency).
func (e *Engine) Concurrency() int { return e.opts.Concurrency }

// New returns an Engine, loading ONNX Runtime (once per process) when
// opts.Runtime is nil. The networks are loaded on first use.
func New(opts Options) (*Engine, error) {
	if opts.Runtime == nil {
		ort, err := NewONNXRuntime(opts.Library)
		if err != nil {
			return nil, err
		}
		opts.Runtime = ort
	}
	if opts.Concurrency == 0 {
		opts.Concurrency = 1
	}
	if opts.Threads == 0 {
		opts.Threads = runtime.NumCPU()
	}
	if opts.MemoryBudget == 0 {
		opts.MemoryBudget = DefaultMemoryBudget
	}
	offered := opts.Runtime.Precisions()
	if opts.Precision == "" {
		opts.Precision = offered[0]
	}
	if !slices.Contains(offered, opts.Precision) {
		return nil, fmt.Errorf("onnx: Options.Precision %q: %s offers %s", opts.Precision, opts.Runtime.Name(), joinPrecisions(offered))
	}
	if len(opts.Architectures) == 0 {
		opts.Architectures = []Architecture{CUNet, UpConv7}
	}
	e := &Engine{opts: opts, codec: libvips.New(opts.Vips), slots: make(chan struct{}, opts.Concurrency)}
	e.buffers.limit = opts.MemoryBudget / keptDivisor
	for _, name := range opts.Architectures {
		if !slices.Contains([]Architecture{CUNet, UpConv7}, name) {
			return nil, fmt.Errorf("onnx: Options.Architectures: %q is not %q or %q", name, CUNet, UpConv7)
		}
		a := &arch{name: name, models: map[upscale.Denoise]*model{}}
		for level := range levelNames {
			n, err := models.Load(NetworkFile(name, level, opts.Precision))
			if err != nil {
				return nil, err
			}
			a.models[level] = &model{Network: n}
		}
		e.archs = append(e.archs, a)
	}
	if err := e.bring(opts.Models, opts.Rules); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// Close releases the networks. The Engine must not be used
// afterwards.
func (e *Engine) Close() error {
	var errs []error
	for _, a := range slices.Concat(e.archs, e.brought) {
		for _, m := range a.models {
			errs = append(errs, m.close())
		}
	}
	return errors.Join(errs...)
}

// Upscale implements upscale.Upscaler: it waits for one of the engine's
// images (Options.Concurrency) until ctx ends, decodes src as engine/vips
// does, fits the denoise level to the source, and makes as many ×2 passes
// learned as memory and the deadline allow (enlargeAll), the rest
// classically. Image.Engine says which network made which pass.
func (e *Engine) Upscale(ctx context.Context, src []byte, opts upscale.Params) (upscale.Image, error) {
	select {
	case e.slots <- struct{}{}:
	case <-ctx.Done():
		return upscale.Image{}, ctx.Err()
	}
	defer func() { <-e.slots }()
	h, err := e.codec.Header(src, opts)
	if err != nil {
		return upscale.Image{}, err
	}
	px, err := e.codec.Decode(ctx, src, opts)
	if err != nil {
		return upscale.Image{}, err
	}
	level, err := fitLevel(px, opts.ImageType, opts.Denoise)
	if err != nil {
		return upscale.Image{}, err
	}
	return e.enlargeAll(ctx, px, h.Scale, e.mostLearnedPasses(h), opts, level)
}

// SourcePixels implements upscale.SizeReader, as engine/vips does.
func (e *Engine) SourcePixels(src []byte) (int64, error) {
	return e.codec.SourcePixels(src)
}

// ReleaseMemory implements upscale.MemoryReleaser: it drops the buffers
// kept between images (a quarter of Options.MemoryBudget at most), and
// gives back the memory of the decoding and encoding libvips does
// (engine/vips) and the runtime's buffers when it is a
// MemoryReleasingRuntime.
func (e *Engine) ReleaseMemory() {
	e.buffers.release()
	e.codec.ReleaseMemory()
	if r, ok := e.opts.Runtime.(MemoryReleasingRuntime); ok {
		r.ReleaseMemory()
	}
}

// enlargeAll enlarges px by scale: learned passes of at most most ×2
// steps in all, the first denoising at level, each by the first network
// that fits the scale and the time left (fitting), then the classical
// rest, and encodes the result.
func (e *Engine) enlargeAll(ctx context.Context, px *libvips.Pixels, scale, most int, opts upscale.Params, level upscale.Denoise) (upscale.Image, error) {
	// Each pass is decided as it comes, at the pace the last one measured.
	var ran []*arch          // by pass
	steps := 0               // ×2 steps made: a ×4 pass is two
	var made *libvips.Pixels // the last pass's result, in a kept buffer until encoded
	defer func() {
		if made != nil {
			e.buffers.keepSamples(made.Pix)
		}
	}()
	for steps < most {
		a, err := e.fitting(ctx, px, opts, level, scale>>steps, most-steps)
		if a == nil || err != nil {
			if err != nil {
				return upscale.Image{}, err
			}
			break
		}
		next, err := e.enlarge(ctx, px, a, a.models[level])
		if err != nil {
			return upscale.Image{}, err
		}
		if made != nil { // read by this pass: done with
			e.buffers.keepSamples(made.Pix)
		}
		px, made = next, next
		level = upscale.DenoiseNone
		ran = append(ran, a)
		steps += bits.TrailingZeros(uint(a.scale()))
	}
	img, err := e.codec.Encode(ctx, px, scale>>steps, opts.ImageType)
	if err == nil && len(ran) > 0 {
		var names []string
		for i := 0; i < len(ran); {
			n := 1
			for i+n < len(ran) && ran[i+n] == ran[i] {
				n++
			}
			a := ran[i]
			names = append(names, fmt.Sprintf("learned;passes=%d;network=%s;runtime=%s;precision=%s", n, a.name, e.runtimeOf(a.models[upscale.DenoiseNone]).Name(), a.precision(e.opts.Precision)))
			i += n
		}
		if img.Engine != "" { // the classical rest
			names = append(names, img.Engine)
		}
		img.Engine = strings.Join(names, ", ")
	}
	return img, err
}

// candidates are the networks that may make a pass denoising at level
// with left of the request's scale still to make and at most steps ×2
// steps: the networks the Rules pick for it, in their order, then the
// Architectures; each only where its scale divides what is left and
// takes no more steps than allowed.
func (e *Engine) candidates(opts upscale.Params, level upscale.Denoise, left, steps int) []*arch {
	var cs []*arch
	fit := func(a *arch) {
		if s := a.scale(); left%s == 0 && bits.TrailingZeros(uint(s)) <= steps && !slices.Contains(cs, a) {
			cs = append(cs, a)
		}
	}
	if opts.Model != "" { // the caller's choice, the handler checked it is published
		for _, a := range e.brought {
			if string(a.name) == opts.Model {
				fit(a)
			}
		}
		return cs
	}
	for _, r := range e.rules {
		if r.matches(opts.ImageType, level, opts.Scale) {
			fit(r.arch)
		}
	}
	for _, a := range e.archs {
		fit(a)
	}
	return cs
}

// fitting returns the first candidate network whose pass over px fits
// the time left (arch.fits), measuring its pace first if it has none;
// nil when none fits.
func (e *Engine) fitting(ctx context.Context, px *libvips.Pixels, opts upscale.Params, level upscale.Denoise, left, steps int) (*arch, error) {
	for _, a := range e.candidates(opts, level, left, steps) {
		m := a.models[level]
		if err := e.measurePace(ctx, a, m); err != nil {
			return nil, err
		}
		if a.fits(ctx, m.work(px, e.tileOf(m))*float64(networkRuns(px))) {
			return a, nil
		}
	}
	return nil, nil
}

// fits reports whether a learned pass of a's of work (model.work, times
// the network's runs) fits the request's time: its estimated time, at a's
// measured pace, within learnedShare of the time left before ctx's
// deadline, so that the rest is enlarged by a lighter network or
// classically rather than the request timing out. Without a deadline, it
// fits.
func (a *arch) fits(ctx context.Context, work float64) bool {
	deadline, ok := ctx.Deadline()
	if !ok {
		return true
	}
	return work*a.pace.seconds() <= time.Until(deadline).Seconds()*learnedShare
}

// networkRuns is how many times a pass runs the network over px: once for
// its colour, and once more for an alpha that is not opaque everywhere.
func networkRuns(px *libvips.Pixels) int {
	if px.Alpha && !opaque(px) {
		return 2
	}
	return 1
}

// learnedShare is the part of a request's time left that learned passes
// may take: the rest is for decoding, the classical rest and encoding, and
// for an estimate that runs slow (a machine busier than when it was
// measured).
const learnedShare = 0.6

// enlarge runs m over px: over its colour, and over its alpha as a grey
// image, so both take the same edges (BenchmarkAlpha: on Set5 cut out by
// an anti-aliased disc, alpha 46.4 dB and the image over grey 41.0 dB,
// against 33.3 and 38.6 with alpha enlarged classically). An alpha that is
// opaque everywhere stays so without a pass. The result's samples are a
// kept buffer's: the caller gives them back (keep) once nothing reads them.
func (e *Engine) enlarge(ctx context.Context, px *libvips.Pixels, a *arch, m *model) (*libvips.Pixels, error) {
	network, err := e.open(m)
	if err != nil {
		return nil, err
	}
	w, h := px.Width*m.Scale, px.Height*m.Scale
	out := px.Like(w, h, e.buffers.takeSamples(w*h*px.Bands))
	colour := px.Bands
	if px.Alpha {
		colour--
	}
	layers := []int{0}
	switch {
	case networkRuns(px) == 2:
		layers = append(layers, colour)
	case px.Alpha: // opaque
		for i := colour; i < len(out.Pix); i += out.Bands {
			out.Pix[i] = math.MaxUint16
		}
	}
	start := time.Now()
	tile := e.tileOf(m)
	work := m.work(px, tile) * float64(len(layers))
	for _, first := range layers {
		grey := first != 0 || colour == 1
		for k := range px.Frames { // an animation's frames each alone
			from, to := px.Frame(k), out.Frame(k)
			in := planes{pix: from.Pix, width: from.Width, height: from.Height, bands: from.Bands, first: first, grey: grey}
			o := planes{pix: to.Pix, width: to.Width, height: to.Height, bands: to.Bands, first: first, grey: grey}
			if err := m.run(ctx, network, in, o, tile, &e.buffers); err != nil {
				if errors.Is(err, context.DeadlineExceeded) {
					// Cut short by the deadline: the whole pass would have
					// taken longer than this, so the pace is at least that.
					a.pace.atLeast(time.Since(start).Seconds() / work)
				}
				e.buffers.keepSamples(out.Pix) // run has returned: nothing writes it
				return nil, err
			}
		}
	}
	a.pace.observe(time.Since(start).Seconds()/work, work)
	return out, nil
}

// opaque reports whether px's alpha is the largest value everywhere.
func opaque(px *libvips.Pixels) bool {
	for i := px.Bands - 1; i < len(px.Pix); i += px.Bands {
		if px.Pix[i] != math.MaxUint16 {
			return false
		}
	}
	return true
}

// open loads m on its runtime, once, in its precision.
func (e *Engine) open(m *model) (Network, error) {
	return m.open(e.runtimeOf(m), cmp.Or(m.precision, e.opts.Precision), e.opts.Threads)
}

// tileOf is the side of m's tiles (model.tileSide).
func (e *Engine) tileOf(m *model) int { return m.tileSide(e.runtimeOf(m), e.opts.Tile) }

// runtimeOf is what runs m: its own runtime, or the engine's.
func (e *Engine) runtimeOf(m *model) Runtime {
	if m.runtime != nil {
		return m.runtime
	}
	return e.opts.Runtime
}

// joinPrecisions lists ps as a sentence does: "int8, bf16 and fp32".
func joinPrecisions(ps []Precision) string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = string(p)
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
