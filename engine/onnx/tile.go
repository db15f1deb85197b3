package onnx

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/engine/internal/libvips"
)

// planes are the bands of an interleaved image that a model reads or
// writes as its three input or output channels: three bands from First
// (RGB), or band First alone (Grey), read as three equal channels and
// written as their mean. The model sees a sample of 65535 as 1.
type planes struct {
	pix           []uint16
	width, height int
	bands         int
	first         int
	grey          bool
}

func (p planes) band(c int) int {
	if p.grey {
		return p.first
	}
	return p.first + c
}

// tiling is how a model covers an image: tiles of tileW × tileH source
// pixels at the given positions, each read with the model's margin (its
// border and halo) around it (pixels beyond the image repeat its edge), so
// each tile's result is what the model gives for that area of the whole
// image.
type tiling struct {
	tileW, tileH int
	xs, ys       []int
}

// tile plans the tiles over a w × h image for m: along each axis, as few
// tiles as keep each within size (tileSide's), all of one size, as small
// as covers the image (a 512-pixel side in tiles of at most 160 takes four of 128, not
// four of 160 that overlap by a quarter). Tiles may overlap by a few
// pixels, where the model's input size must be a multiple of
// m.Multiple; a tile larger than a small image reads repeated edge
// pixels, and its extra output is dropped.
func (m *model) tile(w, h, size int) tiling {
	positions := func(extent int) (int, []int) {
		count := (extent + size - 1) / size
		side := (extent + count - 1) / count
		in := (side + 2*m.Margin() + m.Multiple - 1) / m.Multiple * m.Multiple
		side = max(in, m.MinInput) - 2*m.Margin()
		at := make([]int, count)
		for i := range at {
			at[i] = min(i*side, max(extent-side, 0))
		}
		return side, at
	}
	var t tiling
	t.tileW, t.xs = positions(w)
	t.tileH, t.ys = positions(h)
	return t
}

// haloTiles is how many times its halo a network's tiles are at least, a
// side: the halo read again around each tile then adds at most 36% to its
// work ((14/12)²). SPAN's tiles of 128 pixels with its halo of 21 did
// 1.76 times the work of the image, and ×2 of a 1000×960 photo took 8.0 s
// on ONNX Runtime against 5.25 s in tiles of 256 (AMD EPYC, AVX-512, 2
// cores).
const haloTiles = 12

// tileSide is the side of m's tiles on rt: its own (Model.Tile), else
// size (Options.Tile), where set; otherwise rt's Tile(), or, for a
// network with a halo, twice that, for the halo is read again around
// every tile. Never under haloTiles times the halo. SPAN ×2 of a
// 1000×960 photo on oneDNN in bfloat16 took 2.11 s in tiles of 512
// against 2.56 s in tiles of 256, the halo adding 18% to the image's work
// rather than 37%, and the process's peak RSS rose from 315 to 510 MiB
// (×4: 3.73 s against 4.01, 498 to 744 MiB; AMD EPYC, AVX-512, 2 cores).
func (m *model) tileSide(rt Runtime, size int) int {
	size = cmp.Or(m.ownTile, size)
	if size == 0 {
		size = rt.Tile()
		if m.Halo > 0 {
			size *= 2
		}
	}
	return max(size, haloTiles*m.Halo)
}

// work is what a pass of m over px costs, the unit of the engine's pace:
// every tile of every frame, with the margin the network reads around
// it, in the result pixels it makes (times m.Scale squared). A large
// image's work is a little above its result pixels; a tiny frame's is
// its whole tile's, border and least input size included, which is what
// the network computes for it.
func (m *model) work(px *libvips.Pixels, size int) float64 {
	return m.workOf(px.Width, px.Height/px.Frames, px.Frames, size)
}

// workOf is work for frames frames of w×h pixels.
func (m *model) workOf(w, h, frames, size int) float64 {
	t := m.tile(w, h, size)
	return m.tileWork(t) * float64(len(t.xs)*len(t.ys)*frames)
}

// tileWork is the work of one tile of t: its input, margin included, in
// the result pixels it makes.
func (m *model) tileWork(t tiling) float64 {
	return float64((t.tileW + 2*m.Margin()) * (t.tileH + 2*m.Margin()) * m.Scale * m.Scale)
}

// tileInput is the size of the input of one tile of t, margin included,
// and of the network's result for it, halo included.
func (m *model) tileInput(t tiling) (inW, inH, outW, outH int) {
	inW, inH = t.tileW+2*m.Margin(), t.tileH+2*m.Margin()
	return inW, inH, m.Scale * (t.tileW + 2*m.Halo), m.Scale * (t.tileH + 2*m.Halo)
}

// run enlarges in by m.Scale into out with network, tile by tile.
// Between tiles it checks ctx, and a tile under way is stopped once ctx
// is done, so cancellation takes effect within one tile.
func (m *model) run(ctx context.Context, network Network, in, out planes, tileSize int, b *buffers) error {
	t := m.tile(in.width, in.height, tileSize)
	inW, inH, outW, outH := m.tileInput(t)
	x, y := b.takePlanes(3*inW*inH), b.takePlanes(3*outW*outH)
	defer b.keepPlanes(x)
	defer b.keepPlanes(y)
	cut := m.Halo * m.Scale
	for _, ty := range t.ys {
		for _, tx := range t.xs {
			if err := ctx.Err(); err != nil {
				return err
			}
			m.gather(in, x, tx-m.Margin(), ty-m.Margin(), inW, inH)
			if err := runTile(ctx, network, x, inW, inH, y, cut); err != nil {
				if ctxErr := ctx.Err(); ctxErr != nil {
					return ctxErr
				}
				return fmt.Errorf("%w: %s: %v", upscale.ErrUpstream, m.Name, err)
			}
			scatter(y, outW, outH, cut, out, m.Scale*tx, m.Scale*ty)
		}
	}
	return nil
}

// runTile runs network on one tile, x of w × h, into y, whose edges of
// cut samples the caller drops: an InnerNetwork leaves them out.
func runTile(ctx context.Context, network Network, x []float32, w, h int, y []float32, cut int) error {
	if inner, ok := network.(InnerNetwork); ok && cut > 0 {
		return inner.RunInner(ctx, x, w, h, y, cut)
	}
	return network.Run(ctx, x, w, h, y)
}

// gather fills x (3 planes of w × h) with in's pixels from (left, top),
// repeating the edge pixels beyond the image, from 0 to 1.
func (m *model) gather(in planes, x []float32, left, top, w, h int) {
	const scale = 1.0 / math.MaxUint16
	for c := range 3 {
		band := in.band(c)
		plane := x[c*w*h : (c+1)*w*h]
		for row := range h {
			sy := min(max(top+row, 0), in.height-1)
			src := in.pix[sy*in.width*in.bands:]
			dst := plane[row*w : (row+1)*w]
			for col := range dst {
				sx := min(max(left+col, 0), in.width-1)
				dst[col] = float32(src[sx*in.bands+band]) * scale
			}
		}
	}
}

// scatter writes the part of one tile's result y (3 planes of w × h), cut
// by cut on each side, that lies inside out, at (left, top), clipped to
// 0-1 and rounded to 16 bits. Its rows are shared among GOMAXPROCS
// goroutines, as the runtime's threads wait for the next tile: a tile of
// SPAN ×4's 2168×2088 took 11 ms on two cores against 15 on one
// (BenchmarkScatter, AMD EPYC).
func scatter(y []float32, w, h, cut int, out planes, left, top int) {
	rows, cols := min(h-2*cut, out.height-top), min(w-2*cut, out.width-left)
	r, g, b := y[:w*h], y[w*h:2*w*h], y[2*w*h:]
	parallelRows(rows, func(from, to int) {
		for row := from; row < to; row++ {
			at := (row+cut)*w + cut
			r, g, b := r[at:at+cols], g[at:at+cols], b[at:at+cols]
			dst := out.pix[((top+row)*out.width+left)*out.bands+out.first:]
			if out.grey {
				for col := range cols {
					dst[col*out.bands] = sample((r[col] + g[col] + b[col]) / 3)
				}
				continue
			}
			for col := range cols {
				px := dst[col*out.bands : col*out.bands+3]
				px[0], px[1], px[2] = sample(r[col]), sample(g[col]), sample(b[col])
			}
		}
	})
}

// parallelRows runs do on n rows split into as many runs of rows as
// GOMAXPROCS, at once, and returns when all are done.
func parallelRows(n int, do func(from, to int)) {
	parts := min(runtime.GOMAXPROCS(0), n)
	var wg sync.WaitGroup
	for i := range parts {
		wg.Go(func() { do(i*n/parts, (i+1)*n/parts) })
	}
	wg.Wait()
}

// sample is v, clipped to 0-1, as a 16-bit sample.
func sample(v float32) uint16 { return uint16(min(max(v, 0), 1)*math.MaxUint16 + 0.5) }
