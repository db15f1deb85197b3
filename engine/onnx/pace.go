package onnx

import (
	"context"

	"math"

	"sync"
	"sync/atomic"
)

// measurePace sets a's pace, before its first learned pass that has a
// deadline to fit, from a tile of the engine's size run by m, one of a's,
// on this machine, so that the first decisions (fits) are this
// machine's, not a prior's. The tile is run twice and the second timed:
// the first holds the runtime's one-time work for its size (oneDNN builds
// its kernels), which made a pace so slow that an architecture measured
// by it might never be given a pass to correct it.
func (e *Engine) measurePace(ctx context.Context, a *arch, m *model) error {
	if _, ok := ctx.Deadline(); !ok || a.pace.seconds() > 0 {
		return nil
	}
	a.pace.measuring.Lock()
	defer a.pace.measuring.Unlock()
	if a.pace.seconds() > 0 {
		return nil
	}
	network, err := e.open(m)
	if err != nil {
		return err
	}
	var seconds float64
	for range 2 { // the first makes what the runtime makes once per size
		if seconds, err = m.timeTile(ctx, network, e.tileOf(m)); err != nil {
			return err
		}
	}
	a.pace.set(seconds)
	return nil
}

// pace is the time a learned pass takes per unit of model.work, in
// seconds (about a result pixel's, on a large image): a moving average of the passes the engine has made, starting from one
// tile measured (measurePace); zero before that.
type pace struct {
	bits      atomic.Uint64
	measuring sync.Mutex
}

func (p *pace) seconds() float64 { return math.Float64frombits(p.bits.Load()) }

func (p *pace) set(seconds float64) { p.bits.Store(math.Float64bits(seconds)) }

// observe moves the pace towards a pass's measured one, by a third for a
// pass of a megapixel or more and less for smaller ones, whose tile
// borders cost more per pixel: thumbnails should not make the next large
// image classical. A pace not measured yet (a pass without a deadline
// came first) becomes the pass's.
func (p *pace) observe(seconds, pixels float64) {
	weight := min(pixels/1e6, 1) / 3
	p.update(func(old float64) float64 {
		if old == 0 {
			return seconds
		}
		return old + (seconds-old)*weight
	})
}

// atLeast raises the pace to seconds if it is lower.
func (p *pace) atLeast(seconds float64) {
	p.update(func(old float64) float64 { return max(old, seconds) })
}

func (p *pace) update(next func(float64) float64) {
	for {
		old := p.bits.Load()
		if p.bits.CompareAndSwap(old, math.Float64bits(next(math.Float64frombits(old)))) {
			return
		}
	}
}
