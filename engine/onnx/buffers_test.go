package onnx

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/engine/internal/libvips"
	"github.com/upscalekit/upscale/internal/quality"
)

// TestBuffersKeep: take gives the smallest kept buffer that holds what is
// asked and is at most twice as large, else a new one; keep holds at most the limit, dropping the
// oldest of the same kind first, and refuses a buffer larger than the
// limit; release drops them all.
func TestBuffersKeep(t *testing.T) {
	b := &buffers{limit: 100 * 4}
	small, large := make([]float32, 10), make([]float32, 50)
	b.keepPlanes(large)
	b.keepPlanes(small)
	if got := b.takePlanes(8); len(got) != 8 || &got[0] != &small[0] {
		t.Errorf("8 values: a buffer of cap %d, want the kept 10", cap(got))
	}
	if got := b.takePlanes(60); cap(got) != 60 || b.kept != 50*4 {
		t.Errorf("60 values: cap %d with %d bytes kept; want a new one, the 50 still kept", cap(got), b.kept)
	}
	if got := b.takePlanes(24); cap(got) != 24 || b.kept != 50*4 {
		t.Errorf("24 values: cap %d with %d bytes kept; want a new one, the 50 (over twice as large) still kept", cap(got), b.kept)
	}
	b.keepPlanes(small)
	samples := make([]uint16, 150) // 300 bytes: the oldest float buffer goes first
	b.keepSamples(samples)
	if len(b.planes) != 1 || &b.planes[0][0] != &small[0] || len(b.samples) != 1 || b.kept != 40+300 {
		t.Errorf("after keeping 300 bytes of samples: %d float buffers, %d sample buffers, %d bytes; want the 10 floats and the samples, 340 bytes",
			len(b.planes), len(b.samples), b.kept)
	}
	newer := make([]uint16, 150) // the older samples go, not the floats
	b.keepSamples(newer)
	if len(b.planes) != 1 || len(b.samples) != 1 || &b.samples[0][0] != &newer[0] || b.kept != 340 {
		t.Errorf("after keeping 300 bytes more of samples: %d float buffers, %d sample buffers, %d bytes; want the 10 floats and the newer samples, 340 bytes",
			len(b.planes), len(b.samples), b.kept)
	}
	b.keepSamples(make([]uint16, 201))
	if len(b.samples) != 1 || b.kept != 340 {
		t.Errorf("a buffer over the limit was kept: %d bytes", b.kept)
	}
	b.release()
	if b.kept != 0 || len(b.planes)+len(b.samples) != 0 {
		t.Errorf("after release: %d bytes in %d buffers", b.kept, len(b.planes)+len(b.samples))
	}
}

// TestKeptBuffersCarryNothing: a pass made in buffers that other images
// left, filled here with values no image has, makes the samples it makes
// in fresh ones: every value of a kept buffer is written before it is
// read. Each kind of image in turn, in tiles of 16 that overlap and clip
// at the edges: grey, colour, translucent, with an alpha band opaque
// everywhere (set, not run through the network), grey and alpha, and an
// animation of two frames.
func TestKeptBuffersCarryNothing(t *testing.T) {
	e := NewTestEngine(t, Options{Tile: 16})
	const w, h = 48, 40
	grey, rgb, rgba := image.NewGray(image.Rect(0, 0, w, h)), image.NewNRGBA(image.Rect(0, 0, w, h)), image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			v := uint8(x*5 + y*3)
			grey.SetGray(x, y, color.Gray{v})
			rgb.SetNRGBA(x, y, color.NRGBA{v, 255 - v, uint8(x * y), 255})
			rgba.SetNRGBA(x, y, color.NRGBA{255 - v, v, 40, uint8(y * 6)})
		}
	}
	ctx, cunet := context.Background(), e.archs[0]
	m := cunet.models[upscale.DenoiseNone]
	if tiles := m.tile(w, h, e.tileOf(m)); len(tiles.xs) < 2 || len(tiles.ys) < 2 {
		t.Fatalf("tiles at %v across, %v down: want several each way", tiles.xs, tiles.ys)
	}
	var sources []*libvips.Pixels
	for _, img := range []image.Image{grey, rgb, rgba, rgba} {
		src := quality.EncodePNG(t, img)
		if len(sources) == 0 { // the whole of Upscale gives its buffers back too
			if _, err := e.Upscale(ctx, src, upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseNone, Format: upscale.FormatPNG}); err != nil || e.buffers.kept == 0 {
				t.Fatalf("after an image: %d bytes kept, %v; want its buffers kept", e.buffers.kept, err)
			}
		}
		px, err := e.codec.Decode(ctx, src, upscale.Params{Scale: 2})
		if err != nil {
			t.Fatal(err)
		}
		sources = append(sources, px)
	}
	// Grey and alpha, and two frames: no PNG of Go's makes them.
	greyAlpha := &libvips.Pixels{Width: w, Height: h, Frames: 1, Bands: 2, Alpha: true, Pix: make([]uint16, w*h*2)}
	frames := &libvips.Pixels{Width: w, Height: 2 * h, Frames: 2, Bands: 3, Pix: slices.Concat(sources[1].Pix, sources[1].Pix)}
	for i := range greyAlpha.Pix {
		greyAlpha.Pix[i] = uint16(i * 97)
	}
	for i := range frames.Pix[len(frames.Pix)/2:] {
		frames.Pix[len(frames.Pix)/2+i] ^= 0x5555 // the second frame unlike the first
	}
	sources = append(sources, greyAlpha, frames)
	opaque := sources[3]
	for i := 3; i < len(opaque.Pix); i += 4 {
		opaque.Pix[i] = math.MaxUint16
	}
	enlarge := func(px *libvips.Pixels) []uint16 {
		out, err := e.enlarge(ctx, px, cunet, m)
		if err != nil {
			t.Fatal(err)
		}
		samples := slices.Clone(out.Pix)
		e.buffers.keepSamples(out.Pix) // as enlargeAll does once it is encoded
		return samples
	}
	var fresh [][]uint16
	for _, px := range sources {
		e.ReleaseMemory()
		fresh = append(fresh, enlarge(px))
	}
	for i, px := range sources {
		for _, s := range e.buffers.samples {
			for j := range s[:cap(s)] {
				s[j] = 0x1234
			}
		}
		for _, p := range e.buffers.planes {
			for j := range p[:cap(p)] {
				p[j] = float32(math.NaN())
			}
		}
		if got := enlarge(px); !slices.Equal(got, fresh[i]) {
			t.Errorf("image %d in kept buffers differs from its pass in fresh ones", i)
		}
	}
}

// TestKeptBuffersShared: images enlarged at once, each ×4 in two passes
// (whose first result is given back once the second has read it), share
// the kept buffers and come out as each does alone.
func TestKeptBuffersShared(t *testing.T) {
	e := NewTestEngine(t, Options{Concurrency: 3, Tile: 16})
	opts := upscale.Params{Scale: 4, ImageType: upscale.Anime, Denoise: upscale.DenoiseNone, Format: upscale.FormatPNG}
	var sources, alone [][]byte
	for i := range 3 {
		img := image.NewNRGBA(image.Rect(0, 0, 32, 24))
		for j := range img.Pix {
			img.Pix[j] = uint8(j*(i+3) + i*40)
		}
		src := quality.EncodePNG(t, img)
		e.ReleaseMemory()
		out, err := e.Upscale(context.Background(), src, opts)
		if err != nil || !strings.HasPrefix(out.Engine, "learned;passes=2;") {
			t.Fatalf("image %d alone: %q, %v; want two learned passes", i, out.Engine, err)
		}
		sources, alone = append(sources, src), append(alone, out.Data)
	}
	for round := range 3 {
		var wg sync.WaitGroup
		for i, src := range sources {
			wg.Go(func() {
				out, err := e.Upscale(context.Background(), src, opts)
				if err != nil || !bytes.Equal(out.Data, alone[i]) {
					t.Errorf("round %d, image %d among others: %v, or not what it makes alone", round, i, err)
				}
			})
		}
		wg.Wait()
	}
}
