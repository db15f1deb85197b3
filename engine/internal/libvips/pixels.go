package libvips

/*
#include <vips/vips.h>
*/
import "C"

import (
	"context"
	"fmt"
	"image"

	"github.com/upscalekit/upscale"
)

// Pixels is a decoded image in memory, for engines of other kinds that
// enlarge pixels themselves and leave decoding and encoding to this
// package: upright (its EXIF orientation applied), sRGB or grey (CMYK is
// converted), with colour premultiplied by alpha, as interleaved 16-bit
// samples from 0 to 65535 (math.MaxUint16) whatever the source's depth.
// Two bytes a sample, half of float32's: an engine's passes hold their
// source and result whole, and a 48-megapixel RGB result is 290 MB.
//
// An animation's frames are one above the other, each Height/Frames rows
// (Frame), and must each be enlarged alone, so that no frame's pixels
// reach into another's.
type Pixels struct {
	// Width and Height are the whole image's, every frame's rows.
	Width, Height int
	// Frames counts the frames: 1 for a still image.
	Frames int
	// Bands is 1 (grey), 2 (grey and alpha), 3 (RGB) or 4 (RGBA).
	Bands int
	// Alpha says the last band is alpha.
	Alpha bool
	// Pix holds Width × Height × Bands samples, row by row.
	Pix []uint16

	// How to write the result: the source's file format, sample format,
	// colour interpretation, resolution and ICC profile.
	format         format
	sampleFormat   C.VipsBandFormat
	interpretation C.VipsInterpretation
	resolution     [2]C.double
	profile        []byte
	exif           keptEXIF
	delays         []C.int // an animation's, each frame's time in milliseconds
	loop           C.int   // how many times an animation plays; 0: for ever
	jpegQuality    int     // 0 unless the source is a JPEG with tables
	// fit is the result's size when it is fitted to the engine's largest
	// (Header.Fitted), whatever the passes made of the pixels before.
	fit image.Point
}

// Like returns a width × height image with the same bands, frames and
// way of writing it as p, whose samples are pix (width × height × Bands
// of them), used as they are: the caller writes every one.
func (p *Pixels) Like(width, height int, pix []uint16) *Pixels {
	out := *p
	out.Width, out.Height, out.Pix = width, height, pix
	return &out
}

// Frame returns frame i of p, sharing p's samples: a still image of its
// own, for an engine's passes.
func (p *Pixels) Frame(i int) *Pixels {
	rows := p.Height / p.Frames
	n := p.Width * rows * p.Bands
	frame := *p
	frame.Height, frame.Frames, frame.Pix = rows, 1, p.Pix[i*n:(i+1)*n]
	return &frame
}

// Decode decodes src as Upscale does for the result p asks (its scale, its
// format):
// it refuses what Upscale refuses, with the same errors, checks the same
// limits before decoding any pixel, and decodes as strictly. It does not
// wait for one of the Engine's slots: the caller admits its own work.
func (e *Engine) Decode(ctx context.Context, src []byte, p upscale.Params) (*Pixels, error) {
	f, meta, g, err := e.inspect(src, p)
	if err != nil {
		return nil, err
	}
	px, err := decodePixels(ctx, src, meta, g.frames)
	if err != nil {
		return nil, failure(ctx, src, meta, g.frames, err)
	}
	if want := uprightSize(meta); px.Width != want.X || px.Height != want.Y*g.frames {
		return nil, fmt.Errorf("%w: decoded %dx%d, header says %d frames of %v", upscale.ErrUpstream, px.Width, px.Height, g.frames, want)
	}
	px.format = f
	if g.fitted {
		px.fit = g.size
	}
	if luma, _, ok := quantTables(src); ok {
		px.jpegQuality = ijgQuality(luma)
	}
	return px, nil
}

// Noise estimates the standard deviation of white noise in p's luma, in
// 8-bit grey levels, from its quietest 8×8 blocks (the 5th percentile of
// the blocks' estimates from Immerkær's mask), so that texture and edges,
// which raise only the blocks they are in, do not read as noise. On Set5
// and Set14 shrunk ×2, clean images read 0-2.0 (the baboon's fur the
// most), images with Gaussian noise of σ 5 in R, G and B 2.5-3.9, of σ 10
// 4.5-6.2. Blocks with any pixel not fully opaque are left out; an image
// with no whole opaque block reads 0. The engine skips its own denoiser
// on sources that read below cleanNoise.
func (p *Pixels) Noise() (float64, error) {
	sigma, err := measureNoise(p)
	if err != nil {
		return 0, fmt.Errorf("%w: libvips: %v", upscale.ErrUpstream, err)
	}
	return sigma, nil
}

// JPEGQuality is, for a JPEG source, the libjpeg quality (1-100) whose
// luma quantisation table is closest to the file's: how coarsely it was
// compressed. ok is false for other sources.
func (p *Pixels) JPEGQuality() (quality int, ok bool) {
	return p.jpegQuality, p.jpegQuality > 0
}

// Encode enlarges p by scale the way Upscale enlarges an image of
// imageType without denoising (scale 1: not at all), each frame alone,
// fits it to the size Decode planned when its source's result was fitted
// (Header.Fitted), and encodes it in its source's file and sample format
// with the metadata Upscale keeps. It does not wait for a slot either.
func (e *Engine) Encode(ctx context.Context, p *Pixels, scale int, imageType upscale.ImageType) (upscale.Image, error) {
	if len(p.Pix) != p.Width*p.Height*p.Bands {
		return upscale.Image{}, fmt.Errorf("%w: %d samples for %dx%d×%d", upscale.ErrUpstream, len(p.Pix), p.Width, p.Height, p.Bands)
	}
	r := recipe{}
	if scale > 1 {
		r = recipeFor(upscale.Params{Scale: scale, ImageType: imageType, Denoise: upscale.DenoiseNone})
	}
	if p.Frames < 1 || p.Height%p.Frames != 0 {
		return upscale.Image{}, fmt.Errorf("%w: %d rows are not %d frames", upscale.ErrUpstream, p.Height, p.Frames)
	}
	g := geometry{scale: scale, size: image.Pt(p.Width*scale, p.Height/p.Frames*scale), frames: p.Frames}
	if p.fit != (image.Point{}) {
		g.size, g.fitted = p.fit, true
	}
	out, err := encodePixels(ctx, p, p.format, g, r)
	if err != nil {
		if err := ctx.Err(); err != nil {
			return upscale.Image{}, err
		}
		return upscale.Image{}, fmt.Errorf("%w: libvips: %v", upscale.ErrUpstream, err)
	}
	return result(out, p.format, g)
}
