package onnx

import (
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/engine/internal/libvips"
)

// EstimateMemory implements upscale.MemoryEstimator from src's header:
// learnedMemory for the passes the budget allows.
func (e *Engine) EstimateMemory(src []byte, opts upscale.Params) (int64, error) {
	h, err := e.codec.Header(src, opts)
	if err != nil {
		return 0, err
	}
	return learnedMemory(h, e.mostLearnedPasses(h)), nil
}

// EstimateDuration implements upscale.DurationEstimator: what every
// learned pass the memory budget allows takes by the first of the
// engine's architectures at its measured pace, the first pass at the
// level asked for, each run twice for a source with alpha (which may be
// opaque, and then is not). Decoding, the classical rest and encoding are
// left to the caller's headroom. It knows nothing before the engine has
// measured its pace, nor for a result with no learned pass.
func (e *Engine) EstimateDuration(src []byte, opts upscale.Params) (time.Duration, bool, error) {
	h, err := e.codec.Header(src, opts)
	if err != nil {
		return 0, false, err
	}
	expected := e.duration(h, opts)
	return expected, expected > 0, nil
}

// InspectSource implements upscale.SourceInspector: SourcePixels,
// EstimateMemory and EstimateDuration from one reading of src's header.
func (e *Engine) InspectSource(src []byte, opts upscale.Params) (upscale.SourceReport, error) {
	h, err := e.codec.Header(src, opts)
	if err != nil {
		return upscale.SourceReport{}, err
	}
	return upscale.SourceReport{Pixels: h.DecodedPixels, Memory: learnedMemory(h, e.mostLearnedPasses(h)), Duration: e.duration(h, opts)}, nil
}

// duration is EstimateDuration's answer for h, zero when unknown.
func (e *Engine) duration(h libvips.Header, opts upscale.Params) time.Duration {
	first := e.archs[0]
	pace, passes := first.pace.seconds(), e.mostLearnedPasses(h)
	if pace == 0 || passes == 0 {
		return 0
	}
	runs := 1
	if h.Bands == 2 || h.Bands == 4 {
		runs = 2
	}
	m, work := first.models[opts.Denoise], 0.0
	if m == nil {
		m = first.models[upscale.DenoiseNone]
	}
	for pass := range passes {
		work += m.workOf(h.Width<<pass, h.Height<<pass, h.Frames, e.opts.Tile)
		m = first.models[upscale.DenoiseNone]
	}
	return time.Duration(work * float64(runs) * pace * float64(time.Second))
}

// learnedMemory is the most the engine holds making h's result with
// passes learned passes: the 16-bit samples of the last pass's input and
// output, or, without one, of the decoded source twice (libvips's and its
// copy), every frame's for an animation, and what encoding the result
// holds (Header.OutputBytes), as engine/vips does. The runtime's buffers
// for one tile are the same for every image and belong to the process's
// constant.
func learnedMemory(h libvips.Header, passes int) int64 {
	const sampleBytes = 2
	pixels := int64(h.Width) * int64(h.Height) * int64(h.Frames)
	held := 2 * pixels
	if passes > 0 {
		input := pixels << (2 * (passes - 1))
		held = input + 4*input
	}
	return held*int64(h.Bands)*sampleBytes + h.OutputBytes()
}

// mostLearnedPasses is how many ×2 passes of h.Scale (the enlargement its
// result is made by, fitted or not) the network may make: as many as
// keep what the engine holds (learnedMemory) within Options.MemoryBudget.
func (e *Engine) mostLearnedPasses(h libvips.Header) int {
	passes := 0
	for h.Scale>>passes > 1 && learnedMemory(h, passes+1) <= e.opts.MemoryBudget {
		passes++
	}
	return passes
}
