// Package onednn runs engine/onnx's networks on oneDNN, Intel's library
// of CPU convolutions (what PyTorch and OpenVINO run on CPUs): an
// onnx.Runtime, for onnx.Options.Runtime.
//
// It compiles the networks' few operators (convolutions, transposed
// convolutions, squeeze-and-excitation blocks and cropped sums, and the
// brought networks' swish, element-wise arithmetic, concatenations, pixel
// shuffles and nearest enlargements) into oneDNN's convolutions and a
// few loops of its own, with every activation
// in NHWC order from the first layer to the last, and runs them in one of
// three precisions:
//
//   - INT8 (on a CPU with AVX2 or more): the layers that ncnn2onnx
//     quantised, in the INT8 twins' QDQ form, multiply uint8 activations
//     by int8 weights with the twins' scales and zero points, at twice
//     bfloat16's rate with VNNI; the layers it kept in float run in
//     bfloat16 where the CPU has AVX-512 BF16, else float32.
//   - BF16 (on a CPU with AVX-512 BF16): products of bfloat16 values
//     summed in float32, at twice float32's rate.
//   - FP32.
//
// In each, the image's own values (the input, the first U-Net's result,
// the residual and the output) stay float32.
//
// It needs cgo and oneDNN 2.6 built with OpenMP (Debian and Ubuntu:
// libdnnl-dev), which `make deps` installs.
package onednn

/*
#cgo CFLAGS: -O3 -fopenmp
#cgo LDFLAGS: -ldnnl -fopenmp -lm
#include "net.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"unsafe"

	"github.com/upscalekit/upscale/engine/onnx"
	"github.com/upscalekit/upscale/internal/onnxpb"
)

// Runtime runs networks on oneDNN. It keeps the memory its networks work
// in between tiles, one arena for each tile run at once, until
// ReleaseMemory.
type Runtime struct {
	mu     sync.Mutex
	arenas []*arena // not in use
}

var _ onnx.MemoryReleasingRuntime = (*Runtime)(nil)

// New starts oneDNN's CPU engine, once per process.
func New() (*Runtime, error) {
	var msg [256]C.char
	if C.od_init(&msg[0], C.size_t(len(msg))) != 0 {
		return nil, fmt.Errorf("onednn: %s", C.GoString(&msg[0]))
	}
	return &Runtime{}, nil
}

// Name is "onednn".
func (*Runtime) Name() string { return "onednn" }

// Precisions offers what oneDNN builds kernels for here, fastest first:
// the CPU's instruction set, unless ONEDNN_MAX_CPU_ISA caps it (a CPU's
// flags alone offered bfloat16 that oneDNN, capped at AVX2, then refused
// to build). INT8 on AVX2 and above, VNNI or not: without VNNI its
// kernels (jit_uni_int8 on AVX2, jit_int8 on AVX-512) made identical
// results, 54-60 dB from float32 on the suite's tiles, so nothing
// saturated that mattered, and weights cut to 7 bits against it cost
// 5 dB; BF16 with AVX-512 BF16; FP32 everywhere.
func (*Runtime) Precisions() []onnx.Precision {
	isa := int(C.od_isa())
	var offered []onnx.Precision
	if isa&isaAVX2 == isaAVX2 {
		offered = append(offered, onnx.INT8)
	}
	if isa&isaBF16 != 0 {
		offered = append(offered, onnx.BF16)
	}
	return append(offered, onnx.FP32)
}

// Bits of oneDNN's dnnl_cpu_isa_t (dnnl_types.h), whose values add bits
// as instruction sets grow.
const (
	isaAVX2 = 0x7  // dnnl_cpu_isa_avx2
	isaBF16 = 0x80 // in dnnl_cpu_isa_avx512_core_bf16 and above
)

// Tile is 256: cunet's unpadded convolutions make a tile of 256 do 1.08
// times its own share of the work, one of 128 1.23 times.
func (*Runtime) Tile() int { return 256 }

// Load compiles model, the INT8 twin for INT8, for precision; primitives
// for a tile size are made on its first tile.
func (rt *Runtime) Load(model []byte, precision onnx.Precision, threads int) (onnx.Network, error) {
	floatType := f32
	switch precision {
	case onnx.BF16:
		floatType = bf16
	case onnx.INT8:
		if int(C.od_isa())&isaBF16 != 0 {
			floatType = bf16
		}
	case onnx.FP32:
	default:
		return nil, fmt.Errorf("onednn: precision %q: want %q, %q or %q", precision, onnx.INT8, onnx.BF16, onnx.FP32)
	}
	file, err := onnxpb.Unmarshal(model)
	if err != nil {
		return nil, err
	}
	g, err := compile(file)
	if err != nil {
		return nil, fmt.Errorf("onednn: %w", err)
	}
	t, err := typeGraph(g, floatType, precision == onnx.INT8)
	if err != nil {
		return nil, err
	}
	if precision == onnx.INT8 && !slices.Contains(t.conv, u8) {
		return nil, errors.New("onednn: precision int8 for a network with no int8 layer (want the INT8 twin)")
	}
	return &network{rt: rt, g: g, t: t, threads: max(threads, 1)}, nil
}

// ReleaseMemory frees the arenas not in use (onnx.MemoryReleasingRuntime).
func (rt *Runtime) ReleaseMemory() {
	rt.mu.Lock()
	idle := rt.arenas
	rt.arenas = nil
	rt.mu.Unlock()
	for _, a := range idle {
		C.od_free(a.base)
	}
}

// arena is the memory one tile's values live in.
type arena struct {
	base  unsafe.Pointer
	bytes int
}

// arena returns an arena of at least bytes: the largest not in use,
// grown if it is too small.
func (rt *Runtime) arena(bytes int) (*arena, error) {
	rt.mu.Lock()
	var a *arena
	if n := len(rt.arenas); n > 0 {
		a, rt.arenas = rt.arenas[n-1], rt.arenas[:n-1]
	}
	rt.mu.Unlock()
	if a != nil && a.bytes >= bytes {
		return a, nil
	}
	if a != nil {
		C.od_free(a.base)
	}
	base := C.od_alloc(C.size_t(bytes))
	if base == nil {
		return nil, fmt.Errorf("onednn: no memory for a %d MiB arena", bytes>>20)
	}
	return &arena{base: base, bytes: bytes}, nil
}

// putArena keeps a for the next tile, the largest last.
func (rt *Runtime) putArena(a *arena) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.arenas = append(rt.arenas, a)
	for i := len(rt.arenas) - 1; i > 0 && rt.arenas[i].bytes < rt.arenas[i-1].bytes; i-- {
		rt.arenas[i], rt.arenas[i-1] = rt.arenas[i-1], rt.arenas[i]
	}
}

// network is a compiled graph and the plans made for it, kept for the
// tile sizes it ran last.
type network struct {
	rt      *Runtime
	g       *graph
	t       typing
	threads int

	mu   sync.Mutex
	idle []*plan // not in use, the most recent first
}

// keptPlans is how many idle plans a network keeps: an image's tiles are
// of one size, and its second pass's of another.
const keptPlans = 2

func (n *network) Run(ctx context.Context, in []float32, w, h int, out []float32) error {
	return n.RunInner(ctx, in, w, h, out, 0)
}

// RunInner implements onnx.InnerNetwork: its plan makes, of each value,
// only the rows that the result's rows past margin read (plan.needRows).
// It leaves the result's columns near its edges made, for a band of
// columns is not a dense tensor oneDNN runs fast on.
func (n *network) RunInner(ctx context.Context, in []float32, w, h int, out []float32, margin int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(in) != 3*w*h {
		return fmt.Errorf("onednn: %d samples for a %d×%d tile", len(in), w, h)
	}
	p, err := n.plan(w, h, max(margin, 0))
	if err != nil {
		return err
	}
	defer n.keep(p)
	outDesc := p.descs[n.g.output]
	if len(out) != 3*int(outDesc.w)*int(outDesc.h) {
		return fmt.Errorf("onednn: room for %d samples, the result of a %d×%d tile has %d", len(out), w, h, 3*outDesc.w*outDesc.h)
	}
	a, err := n.rt.arena(p.bytes)
	if err != nil {
		return err
	}
	defer n.rt.putArena(a)
	return p.run(ctx, a.base, in, out)
}

// plan takes an idle plan for w × h tiles and margin, or makes one.
func (n *network) plan(w, h, margin int) (*plan, error) {
	n.mu.Lock()
	for i, p := range n.idle {
		if p.w == w && p.h == h && p.margin == margin {
			n.idle = append(n.idle[:i], n.idle[i+1:]...)
			n.mu.Unlock()
			return p, nil
		}
	}
	n.mu.Unlock()
	return newPlan(n.g, n.t, w, h, margin, n.threads)
}

// keep makes p idle, and frees the plans past keptPlans.
func (n *network) keep(p *plan) {
	n.mu.Lock()
	n.idle = append([]*plan{p}, n.idle...)
	var drop []*plan
	if len(n.idle) > keptPlans {
		drop = n.idle[keptPlans:]
		n.idle = n.idle[:keptPlans]
	}
	n.mu.Unlock()
	for _, p := range drop {
		p.free()
	}
}

// Close frees the network's plans; it must not run at the same time as
// Run.
func (n *network) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range n.idle {
		p.free()
	}
	n.idle = nil
	return nil
}
