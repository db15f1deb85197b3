package onnx

import (
	"errors"
	"testing"

	"github.com/upscalekit/upscale"
)

// TestModelLoadFailureIsNotKept: a model that fails to load is an
// upstream error (502, retrying is safe), and the next image tries again:
// a transient failure used to be kept by a sync.Once for the life of the
// process, and answered 500.
func TestModelLoadFailureIsNotKept(t *testing.T) {
	newTestEngine(t) // loads ONNX Runtime
	m := &model{file: "missing.onnx"}
	if _, err := m.open(1); !errors.Is(err, upscale.ErrUpstream) {
		t.Fatalf("open of a model that cannot load: %v, want ErrUpstream", err)
	}
	m.file = networks[upscale.DenoiseNone] // what the next try finds
	session, err := m.open(1)
	if err != nil || session == nil {
		t.Fatalf("open after the failure: %v; want the session: a failure must not be kept", err)
	}
	if err := m.close(); err != nil {
		t.Errorf("close: %v", err)
	}
}
