package onnx

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/engine/onnx/models"
)

// A Candidate is a runtime and one of the precisions it offers: what the
// engine may run its networks in.
type Candidate struct {
	Runtime   Runtime
	Precision Precision
}

// String names the runtime and the precision: "onednn int8".
func (c Candidate) String() string { return c.Runtime.Name() + " " + string(c.Precision) }

// Candidates are the precisions each of runtimes offers on this machine
// that allowed holds (every one when allowed is empty), runtime by
// runtime.
func Candidates(runtimes []Runtime, allowed []Precision) []Candidate {
	var cs []Candidate
	for _, rt := range runtimes {
		for _, p := range rt.Precisions() {
			if len(allowed) == 0 || slices.Contains(allowed, p) {
				cs = append(cs, Candidate{rt, p})
			}
		}
	}
	return cs
}

// A Timing is what Measure found of a Candidate: the seconds a unit of a
// pass's work takes (about a result pixel's), or why it could not run.
type Timing struct {
	Candidate
	Seconds float64
	Err     error
}

// Measure times cunet's plain network on each candidate, which is how the
// engine chooses what to run on a machine rather than by its CPU's flags:
// a runtime's fastest on one CPU is its slowest on another (on an AVX2
// EPYC without VNNI, oneDNN in float32 took 1.8 times ONNX Runtime in
// INT8). Each runs a tile of its runtime's size on threads threads (zero:
// the number of CPUs): once, to make what the runtime makes once per
// size, then in measureRounds rounds that take the candidates in turn, so
// that a moment of load elsewhere on the machine falls on all of them;
// each one's fastest round counts. It returns the timings fastest first,
// those that failed (a precision offered that the runtime cannot build
// here) last, each with its error; it stops with ctx's error once ctx is
// done. On a 2-core Intel Xeon with AMX, measuring its five candidates
// took 6 to 8 s.
func Measure(ctx context.Context, candidates []Candidate, threads int) ([]Timing, error) {
	if threads == 0 {
		threads = runtime.NumCPU()
	}
	timings := make([]Timing, len(candidates))
	loaded := make([]*model, len(candidates))
	networks := make([]Network, len(candidates))
	defer func() {
		for _, m := range loaded {
			if m != nil {
				m.close()
			}
		}
	}()
	for i, c := range candidates {
		timings[i] = Timing{Candidate: c, Seconds: math.Inf(1)}
		n, err := models.Load(NetworkFile(CUNet, upscale.DenoiseNone, c.Precision))
		if err != nil {
			return nil, err
		}
		loaded[i] = &model{Network: n}
		if networks[i], timings[i].Err = loaded[i].open(c.Runtime, c.Precision, threads); timings[i].Err == nil {
			_, timings[i].Err = loaded[i].timeTile(ctx, networks[i], c.Runtime.Tile())
		}
	}
	for range measureRounds {
		for i, c := range candidates {
			if timings[i].Err != nil {
				continue
			}
			seconds, err := loaded[i].timeTile(ctx, networks[i], c.Runtime.Tile())
			timings[i].Seconds, timings[i].Err = min(timings[i].Seconds, seconds), err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	slices.SortStableFunc(timings, func(a, b Timing) int {
		if (a.Err == nil) != (b.Err == nil) {
			if a.Err == nil {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.Seconds, b.Seconds)
	})
	return timings, nil
}

// measureRounds is how many times Measure times each candidate.
const measureRounds = 3

// timeTile runs network, m's, on one tile of size source pixels a side,
// and returns the seconds it took per unit of work (model.work).
func (m *model) timeTile(ctx context.Context, network Network, size int) (float64, error) {
	t := m.tile(size, size, size)
	inW, inH := t.tileW+2*m.Border, t.tileH+2*m.Border
	in, out := make([]float32, 3*inW*inH), make([]float32, 3*m.Scale*m.Scale*t.tileW*t.tileH)
	for i := range in {
		in[i] = 0.5
	}
	start := time.Now()
	if err := network.Run(ctx, in, inW, inH, out); err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return 0, ctxErr
		}
		return 0, fmt.Errorf("%w: %s: %v", upscale.ErrUpstream, m.Name, err)
	}
	return time.Since(start).Seconds() / m.tileWork(t), nil
}
