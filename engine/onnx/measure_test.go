package onnx

import (
	"context"
	"errors"
	"testing"
	"time"
)

// slowed is a Runtime whose networks take delay longer for every tile.
type slowed struct {
	Runtime
	delay time.Duration
}

func (r slowed) Name() string { return "slowed " + r.Runtime.Name() }

func (r slowed) Load(model []byte, precision Precision, threads int) (Network, error) {
	n, err := r.Runtime.Load(model, precision, threads)
	return slowNetwork{n, r.delay}, err
}

type slowNetwork struct {
	Network
	delay time.Duration
}

func (n slowNetwork) Run(ctx context.Context, in []float32, w, h int, out []float32) error {
	time.Sleep(n.delay)
	return n.Network.Run(ctx, in, w, h, out)
}

// TestMeasure: the candidates come back fastest first, by what a tile
// took on this machine, and one that cannot run last, with its error;
// Candidates lists each runtime's precisions that are allowed.
func TestMeasure(t *testing.T) {
	ort, err := NewONNXRuntime("")
	if err != nil {
		t.Fatal(err)
	}
	slow := slowed{ort, 300 * time.Millisecond}
	broken := &failingOnce{Runtime: ort}
	timings, err := Measure(context.Background(), []Candidate{{slow, FP32}, {broken, INT8}, {ort, FP32}}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(timings) != 3 || timings[0].Runtime != ort || timings[1].Runtime != slow || timings[2].Runtime != broken {
		t.Fatalf("timings %+v; want ONNX Runtime, then its slowed twin, then the one that failed", timings)
	}
	if timings[0].Err != nil || timings[1].Err != nil || timings[2].Err == nil || !(timings[0].Seconds > 0 && timings[0].Seconds < timings[1].Seconds) {
		t.Errorf("timings %+v; want two measured, the first faster, and the failure's error", timings)
	}
	if got := Candidates([]Runtime{ort, slow}, []Precision{FP32, BF16}); len(got) != 2 || got[0] != (Candidate{ort, FP32}) || got[1] != (Candidate{slow, FP32}) {
		t.Errorf("Candidates allowing fp32 and bf16: %v; want each runtime's fp32", got)
	}
	if got := Candidates([]Runtime{ort}, nil); len(got) != len(ort.Precisions()) {
		t.Errorf("Candidates allowing any: %v; want all of %v", got, ort.Precisions())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Measure(ctx, []Candidate{{ort, FP32}}, 2); !errors.Is(err, context.Canceled) {
		t.Errorf("Measure once ctx is done: %v, want context.Canceled", err)
	}
}
