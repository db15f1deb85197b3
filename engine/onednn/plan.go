package onednn

/*
#include "net.h"
*/
import "C"

import (
	"context"
	"fmt"
	"runtime"
	"unsafe"
)

// A plan runs a graph on tiles of one size: each value's shape and place
// in an arena, and the primitives made for those shapes.
type plan struct {
	w, h    int
	g       *graph
	threads int
	bf16    bool
	descs   []C.od_desc // each value's, float32 for a planar one
	// Where each value lives in the arena: its float32 or blocked data,
	// and a planar value's bfloat16 copy; -1 for none.
	at, copyAt []int
	bytes      int // the arena's size
	convs      []*C.od_conv
	impls      []string // oneDNN's implementation of each of convs
}

// newPlan makes g's plan for tiles of w × h input pixels.
func newPlan(g *graph, w, h, threads int, bf16 bool) (*plan, error) {
	p := &plan{w: w, h: h, g: g, threads: threads, bf16: bf16}
	if err := p.shape(); err != nil {
		return nil, err
	}
	p.place()
	if err := p.makeConvolutions(); err != nil {
		p.free()
		return nil, err
	}
	return p, nil
}

// makeConvolutions makes the primitives of the graph's convolutions, in
// order.
func (p *plan) makeConvolutions() error {
	g := p.g
	for i := range g.layers {
		l := &g.layers[i]
		if l.kind != convolution && l.kind != transposed {
			continue
		}
		out := l.out
		if l.kind == transposed {
			out = l.phase
		}
		src := p.convSource(l.in)
		dst := p.descs[out]
		if src.dt == C.OD_F32 && dst.dt == C.OD_BF16 {
			return fmt.Errorf("onednn: %s: a float32 input for a bfloat16 output", l.name)
		}
		var bias *C.float
		if l.bias != nil {
			bias = (*C.float)(&l.bias[0])
		}
		var impl, msg [256]C.char
		conv := C.od_conv_new(&src, &dst, C.int(l.k), C.int(l.stride), C.int(l.pad),
			(*C.float)(&l.weights[0]), bias, cBool(l.act), C.float(l.slope), C.int(p.threads),
			&impl[0], C.size_t(len(impl)), &msg[0], C.size_t(len(msg)))
		if conv == nil {
			return fmt.Errorf("onednn: %s: %s", l.name, C.GoString(&msg[0]))
		}
		p.convs = append(p.convs, conv)
		p.impls = append(p.impls, C.GoString(&impl[0]))
	}
	return nil
}

func cBool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// shape sets each value's description for the plan's tile size, and checks
// that the network can run on it.
func (p *plan) shape() error {
	g := p.g
	p.descs = make([]C.od_desc, len(g.values))
	set := func(v value, c, h, w int) error {
		if h < 1 || w < 1 {
			return fmt.Errorf("onednn: a %d×%d tile is too small for the network: %s would be %d×%d", p.w, p.h, g.values[v].name, w, h)
		}
		info := g.values[v]
		dt := C.OD_F32
		if p.bf16 && !info.planar && c >= 16 {
			dt = C.OD_BF16
		}
		p.descs[v] = C.od_desc{c: C.int(c), h: C.int(h), w: C.int(w), dt: C.int(dt), planar: cBool(info.planar)}
		return nil
	}
	if err := set(0, 3, p.h, p.w); err != nil {
		return err
	}
	for _, l := range g.layers {
		in := p.descs[l.in]
		h, w := int(in.h), int(in.w)
		switch l.kind {
		case convolution:
			if err := set(l.out, len(l.bias), (h+2*l.pad-l.k)/l.stride+1, (w+2*l.pad-l.k)/l.stride+1); err != nil {
				return err
			}
		case transposed:
			if err := set(l.phase, len(l.bias), h-l.k+1, w-l.k+1); err != nil {
				return err
			}
			channels := g.values[l.out].channels
			if err := set(l.out, channels, l.s*(h+1-l.k)+2*l.offset, l.s*(w+1-l.k)+2*l.offset); err != nil {
				return err
			}
		case squeezeExcite:
			continue
		case addPlanar:
			if err := set(l.out, 3, h, w); err != nil {
				return err
			}
		}
		if l.hasSkip {
			out, skip := p.descs[l.out], p.descs[l.skip]
			h, w := sliceEnd(l.ends[0], int(skip.h))-l.top, sliceEnd(l.ends[1], int(skip.w))-l.left
			if h != int(out.h) || w != int(out.w) {
				return fmt.Errorf("onednn: %s: the crop of %s is %d×%d, not %d×%d", l.name, g.values[l.skip].name, w, h, out.w, out.h)
			}
		}
	}
	return nil
}

// sliceEnd is where ONNX's Slice ends an axis of size n: end, counted
// from the far side when negative, at most n.
func sliceEnd(end, n int) int {
	if end < 0 {
		end += n
	}
	return min(end, n)
}

// place gives each value its place in the arena for as long as it is
// used: the first free stretch that holds it (first fit), taken before
// the step that writes it, given back after the last that reads it.
func (p *plan) place() {
	g := p.g
	n := len(g.values)
	p.at, p.copyAt = make([]int, n), make([]int, n)
	last := make([]int, n) // the last layer that reads each value
	// Planar values read by bfloat16 convolutions have a bfloat16 copy;
	// the input needs its float32 data only if something else reads it.
	copies, readAsFloat := make([]bool, n), make([]bool, n)
	for i := range last {
		p.at[i], p.copyAt[i], last[i] = -1, -1, -1
	}
	for i, l := range g.layers {
		last[l.in] = i
		conv := l.kind == convolution || l.kind == transposed
		if conv && g.values[l.in].planar && p.bf16 {
			copies[l.in] = true
		} else {
			readAsFloat[l.in] = true
		}
		if l.hasSkip {
			last[l.skip], readAsFloat[l.skip] = i, true
		}
	}
	var arena blocks
	take := func(v value) {
		d := p.descs[v]
		if v != 0 || readAsFloat[v] {
			p.at[v] = arena.take(int(C.od_bytes(&d)))
		}
		if copies[v] {
			half := d
			half.dt = C.OD_BF16
			p.copyAt[v] = arena.take(int(C.od_bytes(&half)))
		}
	}
	give := func(v value) {
		for _, off := range []int{p.at[v], p.copyAt[v]} {
			if off >= 0 {
				arena.give(off)
			}
		}
	}
	take(0)
	for i, l := range g.layers {
		if l.kind == transposed {
			take(l.phase)
		}
		if l.out != l.in && l.out != g.output {
			take(l.out)
		}
		if l.kind == transposed {
			give(l.phase)
		}
		for _, v := range []value{l.in, l.skip} {
			if last[v] == i && (v == l.in || l.hasSkip) && v != l.out {
				give(v)
			}
		}
	}
	p.bytes = arena.size
}

// convSource is the description of what a convolution reads of v: a
// planar value's bfloat16 copy when the plan runs in bfloat16.
func (p *plan) convSource(v value) C.od_desc {
	d := p.descs[v]
	if d.planar != 0 && p.bf16 {
		d.dt = C.OD_BF16
	}
	return d
}

// run runs the plan on one tile in the arena at base: in and out are the
// planes of Network.Run. It checks ctx before each layer.
func (p *plan) run(ctx context.Context, base unsafe.Pointer, in, out []float32) error {
	// OpenMP keeps a team of threads for each thread that calls it: one
	// for the whole tile.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	g, threads := p.g, C.int(p.threads)
	ptr := func(off int) unsafe.Pointer {
		if off < 0 {
			return nil
		}
		return unsafe.Add(base, off)
	}
	C.od_import(threads, (*C.float)(&in[0]), C.int(p.h), C.int(p.w), (*C.float)(ptr(p.at[0])), ptr(p.copyAt[0]))
	conv := 0
	for i := range g.layers {
		if err := ctx.Err(); err != nil {
			return err
		}
		l := &g.layers[i]
		src := ptr(p.at[l.in])
		if p.copyAt[l.in] >= 0 {
			src = ptr(p.copyAt[l.in])
		}
		switch l.kind {
		case convolution, transposed:
			dst := l.out
			if l.kind == transposed {
				dst = l.phase
			}
			var msg [256]C.char
			if C.od_conv_run(p.convs[conv], threads, src, ptr(p.at[dst]), &msg[0], C.size_t(len(msg))) != 0 {
				return fmt.Errorf("%s: %s", l.name, C.GoString(&msg[0]))
			}
			conv++
			if l.kind == transposed {
				var skip unsafe.Pointer
				if l.hasSkip {
					skip = ptr(p.at[l.skip])
				}
				C.od_depth_to_space(threads, &p.descs[l.phase], ptr(p.at[l.phase]), C.int(l.s), C.int(l.offset),
					&p.descs[l.out], ptr(p.at[l.out]), ptr(p.copyAt[l.out]), &p.descs[l.skip], skip, C.int(l.top), C.int(l.left))
			}
		case squeezeExcite:
			C.od_squeeze_excite(threads, &p.descs[l.in], src, (*C.float)(&l.w1[0]), (*C.float)(&l.b1[0]), C.int(l.hidden),
				(*C.float)(&l.w2[0]), (*C.float)(&l.b2[0]))
		case addPlanar:
			C.od_add_planar(threads, &p.descs[l.in], (*C.float)(src), &p.descs[l.skip], (*C.float)(ptr(p.at[l.skip])),
				C.int(l.top), C.int(l.left), (*C.float)(&out[0]))
		}
	}
	return nil
}

func (p *plan) free() {
	for _, c := range p.convs {
		C.od_conv_free(c)
	}
	p.convs = nil
}

// blocks places stretches of memory in an arena, first fit, 64-byte
// aligned.
type blocks struct {
	used []block // by offset
	size int     // the end of the furthest one ever taken
}

type block struct{ off, size int }

func (b *blocks) take(size int) int {
	size = (size + 63) &^ 63
	off, i := 0, 0
	for ; i < len(b.used) && b.used[i].off-off < size; i++ {
		off = b.used[i].off + b.used[i].size
	}
	b.used = append(b.used, block{})
	copy(b.used[i+1:], b.used[i:])
	b.used[i] = block{off, size}
	b.size = max(b.size, off+size)
	return off
}

func (b *blocks) give(off int) {
	for i, u := range b.used {
		if u.off == off {
			b.used = append(b.used[:i], b.used[i+1:]...)
			return
		}
	}
}
