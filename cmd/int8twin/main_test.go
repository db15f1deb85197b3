package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/upscalekit/upscale/engine/onnx"
	"github.com/upscalekit/upscale/engine/onnx/onnxtest"
	"github.com/upscalekit/upscale/internal/onnxpb"
)

// TestRun: int8twin writes a network's twin, whose metadata records its
// distance from float32, and refuses an unknown runtime.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	param := onnxtest.Chain(t, dir, "net", 2, 1, 0, 1, 0)
	out := filepath.Join(dir, "net.int8.onnx")
	if err := run(context.Background(), param, out, "onednn", onnx.TwinOptions{Calibration: "../../testdata/sr/Set5", Tile: 16}); err != nil {
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
	if v, _ := file.MetadataValue("upscale.int8_psnr"); v == "" || strings.Contains(v, "Inf") || strings.Contains(v, "NaN") {
		t.Errorf("upscale.int8_psnr %q, want the twin's distance", v)
	} else if psnr, err := strconv.ParseFloat(v, 64); err != nil || psnr < 48 {
		t.Errorf("upscale.int8_psnr %q, want 48 dB or more for a network that keeps the image", v)
	}
	if err := run(context.Background(), param, out, "tflite", onnx.TwinOptions{Calibration: "../../testdata/sr/Set5", Tile: 16}); err == nil || !strings.Contains(err.Error(), "want onednn or onnxruntime") {
		t.Errorf("-runtime tflite: %v, want it refused", err)
	}
}
