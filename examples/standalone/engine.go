package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/engine/onednn"
	"github.com/upscalekit/upscale/engine/onnx"
	"github.com/upscalekit/upscale/engine/vips"
)

// engineChoice is what enlarges the server's images: the engine, and for
// -engine onnx the runtime and precision its networks run in.
type engineChoice struct {
	engine, runtime, precision string
}

// info is the upscale_engine_info gauge, 1 with the choice as its
// labels, for /metrics.
func (c engineChoice) info() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "upscale_engine_info",
		Help:        "The engine that enlarges images, and the runtime and precision its networks run in (-engine onnx), as labels; always 1.",
		ConstLabels: prometheus.Labels{"engine": c.engine, "runtime": c.runtime, "precision": c.precision},
	})
	g.Set(1)
	return g
}

// openEngine returns the engine -engine names. For -engine onnx it runs
// the networks in the fastest of the runtimes and precisions the flags
// allow, measured on this machine when there are several (onnx.Measure):
// the fastest on one CPU is the slowest on another.
//
// The networks cfg brings each run on the runtime and precision measured
// fastest on them (onnx.MeasureModel), of the candidates the flags allow
// that the network has a form for: float32 and bfloat16
// (onnx.BroughtPrecisions), and INT8 where it has a twin. Where the flags
// allow none of those (-onnx-precision int8 for a network without a
// twin), it runs in the fastest float form.
func (o options) openEngine(ctx context.Context, cfg fileConfig, logger *slog.Logger) (upscale.Upscaler, engineChoice, error) {
	if o.engine != "onnx" {
		if len(cfg.Networks) > 0 {
			return nil, engineChoice{}, errors.New("the config's networks need -engine onnx")
		}
		return vips.New(vips.Options{}), engineChoice{engine: "vips", runtime: "libvips"}, nil
	}
	runtimes, err := o.onnxRuntimes(logger)
	if err != nil {
		return nil, engineChoice{}, err
	}
	var allowed []onnx.Precision
	for p := range strings.SplitSeq(o.onnxPrecision, ",") {
		if p = strings.TrimSpace(p); p != "" {
			allowed = append(allowed, onnx.Precision(p))
		}
	}
	candidates := onnx.Candidates(runtimes, allowed)
	if len(candidates) == 0 {
		var offers []string
		for _, rt := range runtimes {
			offers = append(offers, fmt.Sprintf("%s offers %s", rt.Name(), joinPrecisions(rt.Precisions())))
		}
		return nil, engineChoice{}, fmt.Errorf("-onnx-precision %s: %s on this CPU", o.onnxPrecision, strings.Join(offers, "; "))
	}
	chosen := candidates[0]
	if len(candidates) > 1 {
		start := time.Now()
		timings, err := onnx.Measure(ctx, candidates, 0)
		if err != nil {
			return nil, engineChoice{}, err
		}
		for _, t := range timings {
			if t.Err != nil {
				logger.Warn("engine: a candidate could not run here", "runtime", t.Runtime.Name(), "precision", t.Precision, "err", t.Err)
				continue
			}
			logger.Info("engine: measured", "runtime", t.Runtime.Name(), "precision", t.Precision, "µs_per_result_pixel", fmt.Sprintf("%.3f", t.Seconds*1e6))
		}
		if timings[0].Err != nil {
			return nil, engineChoice{}, fmt.Errorf("-engine onnx: no runtime and precision could run here: %w", timings[0].Err)
		}
		chosen = timings[0].Candidate
		logger.Info("engine: chose the fastest", "runtime", chosen.Runtime.Name(), "precision", chosen.Precision, "of", len(candidates), "took", time.Since(start).Round(time.Millisecond))
	}
	brought, rules := cfg.models()
	for i, m := range brought {
		runs := m.Precisions()
		own := slices.DeleteFunc(slices.Clone(candidates), func(c onnx.Candidate) bool { return !slices.Contains(runs, c.Precision) })
		if len(own) == 0 {
			own = onnx.Candidates(runtimes, onnx.BroughtPrecisions)
		}
		fastest, err := fastestFor(ctx, own, m, logger)
		if err != nil {
			return nil, engineChoice{}, err
		}
		brought[i].Runtime, brought[i].Precision = fastest.Runtime, fastest.Precision
	}
	// Learned passes fit the same budget as the requests that hold them.
	e, err := onnx.New(onnx.Options{Runtime: chosen.Runtime, Precision: chosen.Precision, MemoryBudget: o.memoryBudget, Models: brought, Rules: rules})
	if err != nil {
		return nil, engineChoice{}, err
	}
	return e, engineChoice{engine: "onnx", runtime: chosen.Runtime.Name(), precision: string(chosen.Precision)}, nil
}

// fastestFor is the candidate that runs m fastest, measured on m itself;
// an error names m and says why none can.
func fastestFor(ctx context.Context, candidates []onnx.Candidate, m onnx.Model, logger *slog.Logger) (onnx.Candidate, error) {
	timings, err := onnx.MeasureModel(ctx, candidates, m, 0)
	if err != nil {
		return onnx.Candidate{}, fmt.Errorf("networks: %s: %w", m.Name, err)
	}
	for _, t := range timings {
		if t.Err != nil {
			logger.Info("engine: a candidate cannot run a network", "network", m.Name, "runtime", t.Runtime.Name(), "precision", t.Precision, "err", t.Err)
			continue
		}
		logger.Info("engine: measured", "network", m.Name, "runtime", t.Runtime.Name(), "precision", t.Precision, "µs_per_result_pixel", fmt.Sprintf("%.3f", t.Seconds*1e6))
	}
	if timings[0].Err != nil {
		return onnx.Candidate{}, fmt.Errorf("networks: %s: no runtime here can run it: %w", m.Name, timings[0].Err)
	}
	logger.Info("engine: chose the fastest for a network", "network", m.Name, "runtime", timings[0].Runtime.Name(), "precision", timings[0].Precision)
	return timings[0].Candidate, nil
}

// onnxRuntimes are the runtimes -onnx-runtime names: for auto oneDNN and
// ONNX Runtime, the second left out, with a warning, when its library is
// not where make deps puts it and -onnxruntime-lib did not say where.
func (o options) onnxRuntimes(logger *slog.Logger) ([]onnx.Runtime, error) {
	var runtimes []onnx.Runtime
	if o.onnxRuntime != "onnxruntime" {
		rt, err := onednn.New()
		if err != nil {
			return nil, err
		}
		runtimes = append(runtimes, rt)
	}
	if o.onnxRuntime != "onednn" {
		rt, err := onnx.NewONNXRuntime(o.onnxRuntimeLib)
		switch {
		case err != nil && o.onnxRuntime == "auto" && o.onnxRuntimeLib == "":
			logger.Warn("engine: ONNX Runtime left out of the choice", "err", err)
		case err != nil:
			return nil, err
		default:
			runtimes = append(runtimes, rt)
		}
	}
	return runtimes, nil
}

// joinPrecisions lists ps, comma-separated.
func joinPrecisions(ps []onnx.Precision) string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = string(p)
	}
	return strings.Join(names, ", ")
}
