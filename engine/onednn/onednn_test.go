package onednn_test

import (
	"testing"

	"github.com/upscalekit/upscale/engine/onednn"
	"github.com/upscalekit/upscale/engine/onnx/onnxtest"
)

func TestConformance(t *testing.T) {
	rt, err := onednn.New()
	if err != nil {
		t.Fatal(err)
	}
	onnxtest.TestRuntime(t, rt)
}
