package onnx

import (
	"math/bits"
	"slices"
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

// EstimateDuration implements upscale.DurationEstimator: what the
// learned passes the memory budget allows take at their networks'
// measured paces (duration), each run twice for a source with alpha
// (which may be opaque, and then is not). Decoding, the classical rest and
// encoding are left to the caller's headroom. It knows nothing before the
// engine has measured a pace, nor for a result with no learned pass.
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

// duration is EstimateDuration's answer for h, zero when unknown. The
// header does not say the level the engine will settle on (fitLevel reads
// the pixels), so each pass is counted at the slowest of the networks
// that could make it first: the first candidate at each level up to the
// one asked for (the first pass), then at none.
func (e *Engine) duration(h libvips.Header, opts upscale.Params) time.Duration {
	runs := 1
	if h.Bands == 2 || h.Bands == 4 {
		runs = 2
	}
	levels := slices.DeleteFunc(upscale.DenoiseLevels(), func(l upscale.Denoise) bool { return strength[l] > strength[opts.Denoise] })
	most := e.mostLearnedPasses(h)
	w, height, seconds := h.Width, h.Height, 0.0
	for steps := 0; steps < most; {
		var slowest *arch
		var slowestSeconds float64
		for _, level := range levels {
			cs := e.candidates(opts, level, h.Scale>>steps, most-steps)
			if len(cs) == 0 {
				continue
			}
			a, m := cs[0], cs[0].models[level]
			if s := m.workOf(w, height, h.Frames, e.tileOf(m)) * a.pace.seconds(); slowest == nil || s > slowestSeconds {
				slowest, slowestSeconds = a, s
			}
		}
		if slowest == nil || slowest.pace.seconds() == 0 {
			break
		}
		seconds += slowestSeconds
		levels = []upscale.Denoise{upscale.DenoiseNone}
		s := slowest.scale()
		w, height, steps = w*s, height*s, steps+bits.TrailingZeros(uint(s))
	}
	return time.Duration(seconds * float64(runs) * float64(time.Second))
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
