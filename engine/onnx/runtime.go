package onnx

import (
	"context"
)

// A Runtime runs the engine's networks, one tile at a time. ONNX Runtime
// (NewONNXRuntime) is the default; engine/onednn runs the same networks
// on oneDNN's convolutions.
type Runtime interface {
	// Name names the runtime in Image.Engine.
	Name() string
	// Precisions lists the arithmetic the runtime offers on this machine,
	// the one it runs fastest at its networks' quality first.
	Precisions() []Precision
	// Tile is the side of the tiles, in source pixels, that the runtime
	// runs fastest within a few hundred MiB.
	Tile() int
	// Load prepares a network to run on threads threads: model is one of
	// the embedded ONNX files, the INT8 twin when precision is INT8.
	Load(model []byte, precision Precision, threads int) (Network, error)
}

// A MemoryReleasingRuntime keeps memory between tiles that it can give
// back: the Engine calls ReleaseMemory when the handler finds the server
// idle (upscale.MemoryReleaser), and the next tile takes it again.
type MemoryReleasingRuntime interface {
	Runtime
	ReleaseMemory()
}

// A Network is a loaded network. Run may be called from several
// goroutines at once.
type Network interface {
	// Run computes the network's result for one tile: in holds 3 planes
	// of w × h samples, each plane row after row, and out receives the 3
	// planes of the result. Once ctx is done, Run stops within about one
	// layer and returns ctx.Err().
	Run(ctx context.Context, in []float32, w, h int, out []float32) error
	// Close releases the network.
	Close() error
}

// An InnerNetwork can leave out the edges of a tile's result, which the
// engine drops around the tiles of a network with a halo: a padded
// network's layers then need not make the halo's share of their values
// that nothing kept reads.
type InnerNetwork interface {
	Network
	// RunInner is Run, but makes only the samples of out at least margin
	// from its edges, and may leave the others as they were.
	RunInner(ctx context.Context, in []float32, w, h int, out []float32, margin int) error
}
