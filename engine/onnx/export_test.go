package onnx

import (
	"testing"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/upscaletest"
)

// NewTestEngine returns an Engine for a test, closed when it ends, failing
// the test when ONNX Runtime is missing: `make deps` installs it, and CI
// must not skip these tests. It is exported for the package's external
// tests too.
func NewTestEngine(t testing.TB, opts Options) *Engine {
	t.Helper()
	e, err := New(opts)
	upscaletest.Opened(t, e, err)
	return e
}

// newTestEngine is NewTestEngine with the default Options.
func newTestEngine(t *testing.T) *Engine { return NewTestEngine(t, Options{}) }

// TileOf is the side of the tiles the engine gives the brought network
// named name, zero for none of that name.
func (e *Engine) TileOf(name string) int {
	for _, a := range e.brought {
		if string(a.name) == name {
			return e.tileOf(a.models[upscale.DenoiseNone])
		}
	}
	return 0
}
