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
// INT8). Each candidate in turn is loaded alone, so that measuring holds
// one network at a time, and runs a tile of the size the engine gives the
// network on that runtime (model.tileSide) on threads threads (zero: the
// number of CPUs): once, to make what the runtime makes once per size,
// then measureRounds times, the fastest counting. It
// returns the timings fastest first, those that failed (a precision
// offered that the runtime cannot build here) last, each with its error;
// it stops with ctx's error once ctx is done. On a 2-core Intel Xeon with
// AMX, measuring its five candidates took 5 to 10 s.
func Measure(ctx context.Context, candidates []Candidate, threads int) ([]Timing, error) {
	return measure(ctx, candidates, threads, func(c Candidate) (*model, error) {
		n, err := models.Load(NetworkFile(CUNet, upscale.DenoiseNone, c.Precision))
		return &model{Network: n}, err
	})
}

// measure times the network load gives for each candidate, as Measure
// says.
func measure(ctx context.Context, candidates []Candidate, threads int, load func(Candidate) (*model, error)) ([]Timing, error) {
	if threads == 0 {
		threads = runtime.NumCPU()
	}
	timings := make([]Timing, len(candidates))
	for i, c := range candidates {
		timings[i] = Timing{Candidate: c}
		m, err := load(c)
		if err == nil {
			timings[i].Seconds, err = timeCandidate(ctx, c, m, threads)
		}
		timings[i].Err = err
		if err := ctx.Err(); err != nil {
			return nil, err
		}
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

// timeCandidate is c's fastest of measureRounds tiles of m, after one
// that warms it up, in seconds per unit of work; m is closed after.
func timeCandidate(ctx context.Context, c Candidate, m *model, threads int) (float64, error) {
	defer func() {
		m.close()
		if r, ok := c.Runtime.(MemoryReleasingRuntime); ok {
			r.ReleaseMemory() // the next candidate's memory is its own
		}
	}()
	network, err := m.open(c.Runtime, c.Precision, threads)
	if err != nil {
		return 0, err
	}
	fastest := math.Inf(1)
	for run := range measureRounds + 1 {
		seconds, err := m.timeTile(ctx, network, m.tileSide(c.Runtime, 0))
		if err != nil {
			return 0, err
		}
		if run > 0 {
			fastest = min(fastest, seconds)
		}
	}
	return fastest, nil
}

// measureRounds is how many times Measure times each candidate.
const measureRounds = 3

// timeTile runs network, m's, on one tile of size source pixels a side,
// and returns the seconds it took per unit of work (model.work).
func (m *model) timeTile(ctx context.Context, network Network, size int) (float64, error) {
	t := m.tile(size, size, size)
	inW, inH, outW, outH := m.tileInput(t)
	in, out := make([]float32, 3*inW*inH), make([]float32, 3*outW*outH)
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
