package onednn

/*
#include "net.h"
*/
import "C"

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"unsafe"
)

// The types of a tensor's values (net.h).
const (
	f32  = C.OD_F32
	bf16 = C.OD_BF16
	u8   = C.OD_U8
)

// typing is how a graph runs at one precision: the type each layer's
// convolution runs in (OD_U8 for int8), and each value's type, with the
// type of a copy made for the convolutions that read it in another.
type typing struct {
	conv     []int // by layer; -1 for a layer without a convolution
	dt, copy []int // by value; copy -1 for none
}

// typeGraph types g with its float convolutions in floatType (OD_F32 or
// OD_BF16) and, when quantized, the convolutions whose weights are int8
// and whose input is quantised in int8.
//
// Image values are float32, and the convolutions that read them, and the
// transposed ones that make them, run in float32: rounding the image to
// bfloat16's 8 bits cost 2-3 dB of the INT8 form's distance from float32
// on photographs (50.1-54.4 dB against 53.0-56.1), and moved the white of
// an opaque edge by 6 levels (the upscaletest Alpha case); it costs 3% of
// a tile's time. A value made or read by a float32 convolution is
// float32; else one a bfloat16 convolution makes or reads is bfloat16;
// one a loop or an int8 convolution makes is uint8 where the network
// quantises it, else of the float type.
func typeGraph(g *graph, floatType int, quantized bool) (typing, error) {
	t := typing{conv: make([]int, len(g.layers)), dt: make([]int, len(g.values)), copy: make([]int, len(g.values))}
	readers := make([]map[int]bool, len(g.values))
	madeBy := make([]int, len(g.values)) // the type of the convolution that makes each value, or -1
	for v := range g.values {
		readers[v], madeBy[v] = map[int]bool{}, -1
	}
	for i, l := range g.layers {
		t.conv[i] = -1
		if l.kind != convolution && l.kind != transposed {
			continue
		}
		switch {
		case quantized && l.weights8 != nil && g.values[l.in].quant != nil && !keptInFloat[l.name]:
			t.conv[i] = u8
		case g.values[l.in].image || l.kind == transposed && g.values[l.out].image:
			t.conv[i] = f32
		default:
			t.conv[i] = floatType
		}
		made := l.out
		if l.kind == transposed {
			made = l.phase
		}
		readers[l.in][t.conv[i]] = true
		madeBy[made] = t.conv[i]
	}
	for v, info := range g.values {
		switch {
		case info.image || madeBy[v] == f32 || readers[v][f32]:
			t.dt[v] = f32
		case madeBy[v] == bf16 || readers[v][bf16] || info.quant == nil:
			t.dt[v] = floatType
		default:
			t.dt[v] = u8
		}
		t.copy[v] = -1
		for dt := range readers[v] {
			if dt == t.dt[v] {
				continue
			}
			if t.copy[v] >= 0 {
				return typing{}, fmt.Errorf("onednn: %s is read in three types", info.name)
			}
			t.copy[v] = dt
		}
		if t.dt[v] == bf16 && t.copy[v] == f32 || madeBy[v] == f32 && t.dt[v] != f32 {
			return typing{}, fmt.Errorf("onednn: %s: float32 from bfloat16", info.name)
		}
	}
	return t, nil
}

// keptInFloat are the int8 layers of cunet's INT8 twins that INT8 runs
// in float here: the first U-Net's lower level and the second's last
// transposed convolution. ONNX Runtime runs the twins' float layers in
// float32, this package in bfloat16, which cost Set14's ppt3 (a flat
// slide) 0.10 dB (33.85 dB at ×2, against 33.95 with those layers in
// float32, and ONNX Runtime's 33.99); these layers in bfloat16, with the
// transposed convolution that makes the first U-Net's image in float32,
// buy it back (33.95) for 8% of a tile's time, where the float32 layers
// would cost 25% (BENCHMARKS.md). They go by name: a brought network's
// twin with layers of these names would run them in bfloat16 too, which
// costs it speed, never accuracy.
var keptInFloat = map[string]bool{"Convolution3": true, "Convolution4": true, "Convolution5": true, "Deconvolution4": true}

// A plan runs a graph on tiles of one size: each value's shape and place
// in an arena, the rows of it the run makes, and the primitives made for
// those shapes.
type plan struct {
	w, h    int
	margin  int // rows of the result, at its top and at its bottom, left unmade
	g       *graph
	t       typing
	threads int
	// Each value's description and, for a value with a copy, the copy's.
	descs, copies []C.od_desc
	// The rows of each value the run makes, [first, end).
	rows []span
	// Where each value and its copy live in the arena; -1 for none.
	at, copyAt []int
	bytes      int // the arena's size
	convs      []*C.od_conv
	reads      []span   // the rows of its input each of convs reads
	impls      []string // oneDNN's implementation of each of convs
}

// A span is the rows [first, end) of a value.
type span struct{ first, end int }

// newPlan makes g's plan for tiles of w × h input pixels, whose result's
// first and last margin rows the caller drops.
func newPlan(g *graph, t typing, w, h, margin, threads int) (*plan, error) {
	p := &plan{w: w, h: h, margin: margin, g: g, t: t, threads: threads}
	if err := p.shape(); err != nil {
		return nil, err
	}
	p.needRows()
	p.place()
	if err := p.makeConvolutions(); err != nil {
		p.free()
		return nil, err
	}
	return p, nil
}

// shape sets each value's description for the plan's tile size, and checks
// that the network can run on it.
func (p *plan) shape() error {
	g := p.g
	p.descs, p.copies = make([]C.od_desc, len(g.values)), make([]C.od_desc, len(g.values))
	set := func(v value, h, w int) error {
		if h < 1 || w < 1 {
			return fmt.Errorf("onednn: a %d×%d tile is too small for the network: %s would be %d×%d", p.w, p.h, g.values[v].name, w, h)
		}
		info := g.values[v]
		describe := func(dt int) C.od_desc {
			d := C.od_desc{c: C.int(info.channels), h: C.int(h), w: C.int(w), dt: C.int(dt)}
			if dt == u8 {
				d.scale, d.zp = C.float(info.quant.scale), C.int(info.quant.zp)
			}
			return d
		}
		p.descs[v] = describe(p.t.dt[v])
		if p.t.copy[v] >= 0 {
			p.copies[v] = describe(p.t.copy[v])
		}
		return nil
	}
	if err := set(0, p.h, p.w); err != nil {
		return err
	}
	for _, l := range g.layers {
		in := p.descs[l.in]
		h, w := int(in.h), int(in.w)
		var err error
		switch l.kind {
		case convolution:
			err = set(l.out, (h+2*l.pad-l.k)/l.stride+1, (w+2*l.pad-l.k)/l.stride+1)
		case transposed:
			ph, pw := h+2*l.pad-l.k+1, w+2*l.pad-l.k+1
			if err = set(l.phase, ph, pw); err == nil {
				err = set(l.out, l.s*ph+2*l.offset, l.s*pw+2*l.offset)
			}
		case elementwise, concat:
			for _, v := range l.inputs {
				if d := p.descs[v]; int(d.h) != h || int(d.w) != w {
					return fmt.Errorf("onednn: %s: %s is %d×%d, %s %d×%d", l.name, g.values[v].name, d.w, d.h, g.values[l.in].name, w, h)
				}
			}
			err = set(l.out, h, w)
		case upsample:
			err = set(l.out, l.s*h, l.s*w)
		case squeezeExcite, export:
			err = set(l.out, h, w)
		}
		if err != nil {
			return err
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

// needRows sets the rows of each value the run makes: those that the
// rows of the result it keeps read, through the layers back from the
// result. A padded network's convolutions then leave out, layer by layer,
// the rows of the halo that the tiling drops (SPAN ×2 on a 542×522 tile
// of which the middle 480 rows are kept: 4% of its convolutions' rows).
// Squeeze-and-excitation and upsampling work on whole values, and read
// whole values.
func (p *plan) needRows() {
	g := p.g
	p.rows = make([]span, len(g.values))
	for v := range p.rows {
		p.rows[v] = span{math.MaxInt, math.MinInt}
	}
	all := func(v value) span { return span{0, int(p.descs[v].h)} }
	need := func(v value, first, end int) {
		r := &p.rows[v]
		r.first, r.end = min(r.first, max(first, 0)), max(r.end, min(end, int(p.descs[v].h)))
	}
	read := func(v value, r span, k, stride, pad int) { need(v, r.first*stride-pad, (r.end-1)*stride-pad+k) }
	for i := len(g.layers) - 1; i >= 0; i-- {
		l := &g.layers[i]
		r := p.rows[l.out]
		switch {
		case l.out == g.output:
			r = span{p.margin, int(p.descs[l.out].h) - p.margin}
			if r.first >= r.end {
				r = all(l.out)
			}
		case r.first >= r.end: // read by no layer: made whole, as ever
			r = all(l.out)
		}
		if l.kind == squeezeExcite || l.kind == upsample {
			r = all(l.out)
		}
		p.rows[l.out] = r
		if l.hasSkip {
			need(l.skip, r.first+l.top, r.end+l.top)
		}
		switch l.kind {
		case convolution:
			read(l.in, r, l.k, l.stride, l.pad)
		case transposed:
			// Output row s × q + qy + offset is made from row q of the phase.
			phase := span{floorDiv(r.first-l.offset, l.s), floorDiv(r.end-1-l.offset, l.s) + 1}
			phase.first, phase.end = max(phase.first, 0), min(phase.end, int(p.descs[l.phase].h))
			p.rows[l.phase] = phase
			read(l.in, phase, l.k, l.stride, l.pad)
		case elementwise, concat, export:
			for _, v := range append([]value{l.in}, l.inputs...) {
				need(v, r.first, r.end)
			}
		case squeezeExcite, upsample:
			need(l.in, 0, int(p.descs[l.in].h))
		}
	}
	p.rows[0] = all(0) // imported whole
}

// floorDiv is a / b rounded down, b positive.
func floorDiv(a, b int) int {
	if a < 0 {
		return -((-a + b - 1) / b)
	}
	return a / b
}

// band is the description of rows r of v (of its copy), and where they
// start in the arena at base.
func (p *plan) band(base unsafe.Pointer, v value, r span, copy bool) (C.od_desc, unsafe.Pointer) {
	d, off := p.descs[v], p.at[v]
	if copy {
		d, off = p.copies[v], p.copyAt[v]
	}
	if off < 0 {
		return d, nil
	}
	start := unsafe.Add(base, off+r.first*int(C.od_bytes(&d))/int(d.h))
	d.h = C.int(r.end - r.first)
	return d, start
}

// sliceEnd is where ONNX's Slice ends an axis of size n: end, counted
// from the far side when negative, at most n.
func sliceEnd(end, n int) int {
	if end < 0 {
		end += n
	}
	return min(end, n)
}

// place gives each value, and its copy, a place in the arena for as long
// as it is used: the first free stretch that holds it (first fit), taken
// before the step that makes it, given back after the last that reads it.
// The output is written to the caller's planes, not the arena.
func (p *plan) place() {
	g := p.g
	n := len(g.values)
	p.at, p.copyAt = make([]int, n), make([]int, n)
	last := make([]int, n) // the last layer that reads each value
	for i := range last {
		p.at[i], p.copyAt[i], last[i] = -1, -1, -1
	}
	for i, l := range g.layers {
		last[l.in] = i
		if l.hasSkip {
			last[l.skip] = i
		}
		for _, v := range l.inputs {
			last[v] = i
		}
	}
	var arena blocks
	take := func(v value) {
		p.at[v] = arena.take(p.size(v, false))
		if p.t.copy[v] >= 0 {
			p.copyAt[v] = arena.take(p.size(v, true))
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
		if l.out != g.output {
			take(l.out)
		}
		if l.kind == transposed {
			give(l.phase)
		}
		if last[l.in] == i {
			give(l.in)
		}
		if l.hasSkip && last[l.skip] == i && l.skip != l.in {
			give(l.skip)
		}
		for _, v := range l.inputs {
			if last[v] == i && v != l.in {
				give(v)
			}
		}
	}
	p.bytes = arena.size
}

// size is the bytes of v, or of its copy.
func (p *plan) size(v value, copy bool) int {
	if copy {
		return int(C.od_bytes(&p.copies[v]))
	}
	return int(C.od_bytes(&p.descs[v]))
}

// readsCopy reports whether layer i's convolution reads v's copy, of the
// type it runs in, rather than v.
func (p *plan) readsCopy(i int, v value) bool {
	want := p.t.conv[i]
	return p.t.dt[v] != want && p.t.copy[v] == want
}

// sourceDesc is the description of what layer i's convolution reads of v.
func (p *plan) sourceDesc(i int, v value) C.od_desc {
	if p.readsCopy(i, v) {
		return p.copies[v]
	}
	return p.descs[v]
}

// makeConvolutions makes the primitives of the graph's convolutions, in
// order.
func (p *plan) makeConvolutions() error {
	for i := range p.g.layers {
		l := &p.g.layers[i]
		if l.kind != convolution && l.kind != transposed {
			continue
		}
		made := l.out
		if l.kind == transposed {
			made = l.phase
		}
		// The rows made, and those of the input they read: zero padding
		// only where those meet the input's edges.
		r, src := p.rows[made], p.sourceDesc(i, l.in)
		top, bottom := r.first*l.stride-l.pad, (r.end-1)*l.stride-l.pad+l.k
		padTop, padBottom := max(-top, 0), max(bottom-int(src.h), 0)
		top, bottom = max(top, 0), min(bottom, int(src.h))
		src.h = C.int(bottom - top)
		dst := p.descs[made]
		dst.h = C.int(r.end - r.first)
		var weights, bias, wscale *C.float
		var weights8 *C.int8_t
		if p.t.conv[i] == u8 {
			weights8, wscale = (*C.int8_t)(&l.weights8[0]), (*C.float)(&l.wscale[0])
		} else {
			weights = (*C.float)(&l.weights[0])
		}
		if l.bias != nil {
			bias = (*C.float)(&l.bias[0])
		}
		var impl, msg [256]C.char
		conv := C.od_conv_new(&src, &dst, C.int(l.k), C.int(l.stride), C.int(l.pad), C.int(padTop), C.int(padBottom), weights, weights8, wscale,
			bias, C.int(l.act), C.float(l.slope), l.postFactors(), C.int(p.threads), &impl[0], C.size_t(len(impl)), &msg[0], C.size_t(len(msg)))
		if conv == nil {
			return fmt.Errorf("onednn: %s: %s", l.name, C.GoString(&msg[0]))
		}
		p.convs = append(p.convs, conv)
		p.reads = append(p.reads, span{top, bottom})
		p.impls = append(p.impls, C.GoString(&impl[0]))
	}
	return nil
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
	// copy makes the rows made of v's copy, if it has one.
	copyOf := func(v value) {
		if p.t.copy[v] >= 0 {
			from, x := p.band(base, v, p.rows[v], false)
			to, y := p.band(base, v, p.rows[v], true)
			C.od_convert(threads, &from, x, &to, y)
		}
	}
	C.od_import(threads, (*C.float)(&in[0]), &p.descs[0], ptr(p.at[0]))
	copyOf(0)
	conv := 0
	for i := range g.layers {
		if err := ctx.Err(); err != nil {
			return err
		}
		l := &g.layers[i]
		r := p.rows[l.out]
		dst, y := p.band(base, l.out, r, false)
		switch l.kind {
		case convolution, transposed:
			made := l.out
			if l.kind == transposed {
				made = l.phase
			}
			_, src := p.band(base, l.in, p.reads[conv], p.readsCopy(i, l.in))
			_, to := p.band(base, made, p.rows[made], false)
			var msg [256]C.char
			if C.od_conv_run(p.convs[conv], threads, src, to, &msg[0], C.size_t(len(msg))) != 0 {
				return fmt.Errorf("onednn: %s: %s", l.name, C.GoString(&msg[0]))
			}
			conv++
			if l.kind == transposed {
				phase, x := p.band(base, l.phase, p.rows[l.phase], false)
				var skip unsafe.Pointer
				if l.hasSkip {
					skip = ptr(p.at[l.skip])
				}
				rowOffset := l.offset + l.s*p.rows[l.phase].first - r.first
				C.od_depth_to_space(threads, &phase, x, C.int(l.s), C.int(l.offset), C.int(rowOffset),
					&dst, y, &p.descs[l.skip], skip, C.int(l.top+r.first), C.int(l.left))
			}
		case squeezeExcite:
			C.od_squeeze_excite(threads, &p.descs[l.in], ptr(p.at[l.in]), &dst, y,
				(*C.float)(&l.w1[0]), (*C.float)(&l.b1[0]), C.int(l.hidden), (*C.float)(&l.w2[0]), (*C.float)(&l.b2[0]))
		case elementwise:
			descs, xs := p.operands(base, l.inputs, r)
			if gt := l.gate; gt != nil {
				var post *C.float
				if gt.post >= 0 {
					post = (*C.float)(&l.constants[gt.post])
				}
				C.od_gate(threads, &descs[gt.a], xs[gt.a], &descs[gt.b], xs[gt.b], (*C.float)(&l.constants[gt.c]), post, &dst, y)
				break
			}
			var constants *C.float
			if len(l.constants) > 0 {
				constants = (*C.float)(&l.constants[0])
			}
			if C.od_elementwise(threads, &descs[0], &xs[0], &dst, y, C.int(len(l.steps)), &l.steps[0], constants) != 0 {
				return fmt.Errorf("onednn: %s: out of memory", l.name)
			}
		case concat:
			descs, xs := p.operands(base, l.inputs, r)
			C.od_concat(threads, C.int(len(descs)), &descs[0], &xs[0], &dst, y, l.postFactors())
		case upsample:
			C.od_upsample(threads, &p.descs[l.in], ptr(p.at[l.in]), C.int(l.s), &dst, y)
		case export:
			a, x := p.band(base, l.in, r, false)
			var skip unsafe.Pointer
			if l.hasSkip {
				skip = ptr(p.at[l.skip])
			}
			C.od_export(threads, &a, x, &p.descs[l.skip], skip,
				C.int(l.top+r.first), C.int(l.left), (*C.float)(&out[r.first*int(a.w)]), C.size_t(len(out)/3))
		}
		if l.out != g.output {
			copyOf(l.out)
		}
	}
	return nil
}

// operands returns the descriptions of rows r of vs and where they are.
func (p *plan) operands(base unsafe.Pointer, vs []value, r span) ([]C.od_desc, []unsafe.Pointer) {
	descs, xs := make([]C.od_desc, len(vs)), make([]unsafe.Pointer, len(vs))
	for i, v := range vs {
		descs[i], xs[i] = p.band(base, v, r, false)
	}
	return descs, xs
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

// postFactors are l.post for C: nil where l has none.
func (l *layer) postFactors() *C.float {
	if l.post == nil {
		return nil
	}
	return (*C.float)(&l.post[0])
}
