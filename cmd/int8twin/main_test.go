package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/upscalekit/upscale/internal/onnxpb"
)

// TestRun: int8twin writes a network's twin, whose metadata records its
// distance from float32, and refuses an unknown runtime.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	param := filepath.Join(dir, "net.param")
	os.WriteFile(param, []byte("7767517\n5 5\nInput in 0 1 data\nConvolution a 1 1 data x1 0=3 1=1 5=1 6=9\nConvolution b 1 1 x1 x2 0=3 1=1 5=1 6=9\nConvolution c 1 1 x2 x3 0=12 1=1 5=1 6=36\nPixelShuffle ps 1 1 x3 out 0=2\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "net.bin"), make([]byte, 4*(2*(1+9+3)+1+36+12)), 0o644)
	out := filepath.Join(dir, "net.int8.onnx")
	if err := run(context.Background(), param, out, "../../testdata/sr/Set5", 16, "onednn"); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	file, err := onnxpb.Unmarshal(data)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := file.MetadataValue("upscale.int8_psnr"); !ok || v == "" {
		t.Errorf("upscale.int8_psnr %q, want the twin's distance", v)
	}
	if err := run(context.Background(), param, out, "../../testdata/sr/Set5", 16, "tflite"); err == nil || !strings.Contains(err.Error(), "want onednn or onnxruntime") {
		t.Errorf("-runtime tflite: %v, want it refused", err)
	}
}
