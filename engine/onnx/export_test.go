package onnx

import "testing"

// newTestEngine is newEngine for the package's own tests.
func newTestEngine(t *testing.T) *Engine {
	t.Helper()
	e, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}
