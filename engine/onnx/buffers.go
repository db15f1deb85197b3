package onnx

import (
	"slices"
	"sync"
	"unsafe"
)

// The engine keeps Options.MemoryBudget / keptDivisor bytes of buffers
// between images: a quarter, 256 MiB by default, which holds what ×4 of a
// 1000×960 photo fills (the result's samples, 92 MB, and a tile's planes,
// 58 MB).
const keptDivisor = 4

// buffers keeps the large buffers a learned pass fills (a tile's planes,
// a pass's result samples) between images, up to limit bytes. A buffer
// made anew costs each image its zeroing and, once the Go runtime has
// handed the pages back, a page fault every 4 KiB: SPAN ×4 of a 1000×960
// photo took 7% less time with its buffers kept (2.40 s against 2.59 s in
// the engine, AMD EPYC, 2 cores). They go with ReleaseMemory, which the
// handler calls once it has been idle for Capacity.IdleRelease.
//
// A kept buffer holds what its last image left in it: whoever takes one
// writes every value before reading any.
type buffers struct {
	mu      sync.Mutex
	planes  [][]float32
	samples [][]uint16
	kept    int64 // bytes in planes and samples
	limit   int64
}

// takePlanes and takeSamples return a buffer of n float32 planes' values
// or 16-bit samples (take); keepPlanes and keepSamples give one back
// (keep).
func (b *buffers) takePlanes(n int) []float32 { return take(b, &b.planes, n) }
func (b *buffers) takeSamples(n int) []uint16 { return take(b, &b.samples, n) }
func (b *buffers) keepPlanes(s []float32)     { keep(b, &b.planes, s) }
func (b *buffers) keepSamples(s []uint16)     { keep(b, &b.samples, s) }

// take returns a buffer of n values from list (b.planes or b.samples):
// the smallest kept one that holds them and is at most twice as large (a
// small image does not take, and hold outside its grant, a large one's),
// else a new one.
func take[T float32 | uint16](b *buffers, list *[][]T, n int) []T {
	b.mu.Lock()
	defer b.mu.Unlock()
	best := -1
	for i, s := range *list {
		if cap(s) >= n && cap(s) <= 2*n && (best < 0 || cap(s) < cap((*list)[best])) {
			best = i
		}
	}
	if best < 0 {
		return make([]T, n)
	}
	s := (*list)[best]
	*list = slices.Delete(*list, best, best+1) // which clears the moved tail: no hidden reference
	b.kept -= bytesOf(s)
	return s[:n]
}

// keep puts s on list for the next image to take. To make room it gives
// the garbage collector the oldest kept buffers, of s's kind first; s
// alone larger than the limit is not kept.
func keep[T float32 | uint16](b *buffers, list *[][]T, s []T) {
	size := bytesOf(s)
	b.mu.Lock()
	defer b.mu.Unlock()
	if size > b.limit {
		return
	}
	makeRoom(b, list, size)
	makeRoom(b, &b.planes, size)
	makeRoom(b, &b.samples, size)
	*list = append(*list, s[:cap(s)])
	b.kept += size
}

// makeRoom drops the oldest buffers of list until size more bytes fit
// the limit, or list is empty. The caller holds b.mu.
func makeRoom[T float32 | uint16](b *buffers, list *[][]T, size int64) {
	for b.kept+size > b.limit && len(*list) > 0 {
		b.kept -= bytesOf((*list)[0])
		*list = slices.Delete(*list, 0, 1)
	}
}

// release lets the garbage collector have every kept buffer.
func (b *buffers) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.planes, b.samples, b.kept = nil, nil, 0
}

// bytesOf is the memory s holds.
func bytesOf[T float32 | uint16](s []T) int64 {
	var zero T
	return int64(cap(s)) * int64(unsafe.Sizeof(zero))
}
