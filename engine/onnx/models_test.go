package onnx

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/upscaletest"
)

// failingOnce is a Runtime whose first Load fails.
type failingOnce struct {
	Runtime
	failed bool
}

func (r *failingOnce) Load(model []byte, precision Precision, threads int) (Network, error) {
	if !r.failed {
		r.failed = true
		return nil, errors.New("out of memory")
	}
	return r.Runtime.Load(model, precision, threads)
}

// TestModelLoadFailureIsNotKept: a model that fails to load is an
// upstream error (502, retrying is safe), and the next image tries again:
// a transient failure used to be kept by a sync.Once for the life of the
// process, and answered 500.
func TestModelLoadFailureIsNotKept(t *testing.T) {
	ort, err := NewONNXRuntime("")
	if err != nil {
		t.Fatal(err)
	}
	e := NewTestEngine(t, Options{Runtime: &failingOnce{Runtime: ort}})
	src := upscaletest.TestImagePNG(t, 64, 48)
	params := upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone}
	if _, err := e.Upscale(context.Background(), src, params); !errors.Is(err, upscale.ErrUpstream) {
		t.Fatalf("an image whose network cannot load: %v, want ErrUpstream", err)
	}
	if img, err := e.Upscale(context.Background(), src, params); err != nil || !strings.HasPrefix(img.Engine, "learned") {
		t.Fatalf("the next image: %q, %v; want it learned: a failure must not be kept", img.Engine, err)
	}
}

// TestINT8RunsTheINT8Networks: an INT8 engine loads every network's
// quantised twin.
func TestINT8RunsTheINT8Networks(t *testing.T) {
	e := NewTestEngine(t, Options{Precision: INT8})
	for _, a := range e.archs {
		for level, m := range a.models {
			if !strings.HasSuffix(m.Name, "-int8.onnx") {
				t.Errorf("%s %s: the INT8 engine runs %s", a.name, level, m.Name)
			}
		}
	}
}
