package upscaletest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/gif"

	"golang.org/x/image/webp"
)

// animation is an animated GIF or WebP as a browser shows it: each frame
// composed onto the canvas, how long it shows and how many times the
// animation plays.
type animation struct {
	frames []*image.NRGBA
	delays []int // milliseconds
	loop   int   // as the file stores it: GIF's NETSCAPE count, WebP's loop count
}

// decodeAnimation decodes an animated GIF or WebP. Go's decoders give
// each frame's own rectangle; a browser composes them, as this does.
func decodeAnimation(data []byte) (animation, error) {
	if bytes.HasPrefix(data, []byte("GIF8")) {
		return decodeGIFAnimation(data)
	}
	return decodeWebPAnimation(data)
}

func decodeGIFAnimation(data []byte) (animation, error) {
	g, err := gif.DecodeAll(bytes.NewReader(data))
	if err != nil {
		return animation{}, err
	}
	bounds := image.Rect(0, 0, g.Config.Width, g.Config.Height)
	canvas := image.NewNRGBA(bounds)
	a := animation{loop: g.LoopCount}
	for i, frame := range g.Image {
		before := image.NewNRGBA(bounds)
		copy(before.Pix, canvas.Pix)
		draw.Draw(canvas, frame.Bounds(), frame, frame.Bounds().Min, draw.Over)
		shown := image.NewNRGBA(bounds)
		copy(shown.Pix, canvas.Pix)
		a.frames = append(a.frames, shown)
		a.delays = append(a.delays, 10*g.Delay[i])
		switch g.Disposal[i] {
		case gif.DisposalBackground:
			draw.Draw(canvas, frame.Bounds(), image.Transparent, image.Point{}, draw.Src)
		case gif.DisposalPrevious:
			canvas = before
		}
	}
	return a, nil
}

// decodeWebPAnimation composes an animated WebP's ANMF frames, each
// decoded by golang.org/x/image/webp as a still of its own.
func decodeWebPAnimation(data []byte) (animation, error) {
	if len(data) < 12 || string(data[:4]) != "RIFF" || string(data[8:12]) != "WEBP" {
		return animation{}, errors.New("not a WebP file")
	}
	var a animation
	var canvas *image.NRGBA
	for _, c := range riffChunks(data[12:]) {
		switch c.id {
		case "VP8X":
			if len(c.data) < 10 {
				return animation{}, errors.New("short VP8X chunk")
			}
			canvas = image.NewNRGBA(image.Rect(0, 0, 1+int(uint24(c.data[4:])), 1+int(uint24(c.data[7:]))))
		case "ANIM":
			if len(c.data) < 6 {
				return animation{}, errors.New("short ANIM chunk")
			}
			a.loop = int(binary.LittleEndian.Uint16(c.data[4:]))
		case "ANMF":
			if canvas == nil || len(c.data) < 16 {
				return animation{}, errors.New("an ANMF chunk before VP8X, or a short one")
			}
			x, y := 2*int(uint24(c.data)), 2*int(uint24(c.data[3:]))
			duration, flags := int(uint24(c.data[12:])), c.data[15]
			decoded, err := webp.Decode(bytes.NewReader(stillWebP(c.data[16:], 1+int(uint24(c.data[6:])), 1+int(uint24(c.data[9:])))))
			if err != nil {
				return animation{}, fmt.Errorf("frame %d: %w", len(a.frames), err)
			}
			frame := studioRGB(decoded)
			r := frame.Bounds().Add(image.Pt(x, y))
			op := draw.Over
			if flags&2 != 0 { // do not blend
				op = draw.Src
			}
			draw.Draw(canvas, r, frame, frame.Bounds().Min, op)
			shown := image.NewNRGBA(canvas.Bounds())
			copy(shown.Pix, canvas.Pix)
			a.frames = append(a.frames, shown)
			a.delays = append(a.delays, duration)
			if flags&1 != 0 { // dispose to the background, which browsers show as transparent
				draw.Draw(canvas, r, image.Transparent, image.Point{}, draw.Src)
			}
		}
	}
	if len(a.frames) == 0 {
		return animation{}, errors.New("no ANMF frames")
	}
	return a, nil
}

// stillWebP wraps one ANMF frame's chunks (an optional ALPH, then VP8 or
// VP8L) as a WebP file of its own: the extended format when there is an
// alpha chunk.
func stillWebP(frame []byte, width, height int) []byte {
	body := []byte("WEBP")
	if bytes.HasPrefix(frame, []byte("ALPH")) {
		vp8x := make([]byte, 10)
		vp8x[0] = 0x10 // alpha
		putUint24(vp8x[4:], width-1)
		putUint24(vp8x[7:], height-1)
		body = append(body, riffChunk("VP8X", vp8x)...)
	}
	body = append(body, frame...)
	return append(binary.LittleEndian.AppendUint32([]byte("RIFF"), uint32(len(body))), body...)
}

// decodeStill decodes a JPEG, PNG, GIF or WebP result, a WebP as
// browsers show it (studioRGB).
func decodeStill(data []byte) (image.Image, error) {
	if len(data) >= 12 && string(data[8:12]) == "WEBP" {
		img, err := webp.Decode(bytes.NewReader(data))
		if err != nil {
			return nil, err
		}
		return studioRGB(img), nil
	}
	img, _, err := image.Decode(bytes.NewReader(data))
	return img, err
}

// studioRGB converts a lossy WebP's Y'CbCr as libwebp and browsers do:
// VP8 stores BT.601's studio range (Y' from 16 to 235), where Go's
// color.YCbCr reads JPEG's full range, which shifts colours by 10 levels
// and more. A lossless frame (already RGB) is returned as it is.
func studioRGB(img image.Image) image.Image {
	var alpha func(x, y int) uint8
	var ycbcr *image.YCbCr
	switch m := img.(type) {
	case *image.YCbCr:
		ycbcr, alpha = m, func(int, int) uint8 { return 0xff }
	case *image.NYCbCrA:
		ycbcr, alpha = &m.YCbCr, func(x, y int) uint8 { return m.A[m.AOffset(x, y)] }
	default:
		return img
	}
	out := image.NewNRGBA(img.Bounds())
	clamp := func(v float64) uint8 { return uint8(min(255, max(0, v+0.5))) }
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
			l := 1.164 * (float64(ycbcr.Y[ycbcr.YOffset(x, y)]) - 16)
			at := ycbcr.COffset(x, y)
			cb, cr := float64(ycbcr.Cb[at])-128, float64(ycbcr.Cr[at])-128
			out.SetNRGBA(x, y, color.NRGBA{clamp(l + 1.596*cr), clamp(l - 0.813*cr - 0.391*cb), clamp(l + 2.018*cb), alpha(x, y)})
		}
	}
	return out
}

type chunk struct {
	id   string
	data []byte
}

// riffChunks splits RIFF chunks, each padded to an even length.
func riffChunks(data []byte) []chunk {
	var chunks []chunk
	for len(data) >= 8 {
		n := int(binary.LittleEndian.Uint32(data[4:]))
		if n > len(data)-8 {
			break
		}
		chunks = append(chunks, chunk{string(data[:4]), data[8 : 8+n]})
		data = data[min(len(data), 8+n+n%2):]
	}
	return chunks
}

func riffChunk(id string, data []byte) []byte {
	out := append(binary.LittleEndian.AppendUint32([]byte(id), uint32(len(data))), data...)
	if len(data)%2 == 1 {
		out = append(out, 0)
	}
	return out
}

func uint24(b []byte) uint32 { return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 }

func putUint24(b []byte, v int) { b[0], b[1], b[2] = byte(v), byte(v>>8), byte(v>>16) }

// worstLevels is the largest difference, in 8-bit levels of any channel,
// between source's pixels and the pixels of result, source's size times
// scale: each source pixel against the mean of the scale×scale block it
// became, whose centre is its own. Alpha is compared everywhere, colour
// where both are at least a quarter opaque: below that, a level of alpha
// more or less moves the colour a browser blends in by many levels.
func worstLevels(source, result image.Image, scale int) int {
	worst := 0
	size, at := source.Bounds().Size(), result.Bounds().Min
	for y := range size.Y {
		for x := range size.X {
			a := color.NRGBAModel.Convert(source.At(source.Bounds().Min.X+x, source.Bounds().Min.Y+y)).(color.NRGBA)
			var sum [4]uint32
			for dy := range scale {
				for dx := range scale {
					r, g, b, alpha := result.At(at.X+scale*x+dx, at.Y+scale*y+dy).RGBA()
					sum = [4]uint32{sum[0] + r, sum[1] + g, sum[2] + b, sum[3] + alpha}
				}
			}
			n := uint32(scale * scale)
			mean := color.RGBA64{uint16(sum[0] / n), uint16(sum[1] / n), uint16(sum[2] / n), uint16(sum[3] / n)}
			b := color.NRGBAModel.Convert(mean).(color.NRGBA)
			diffs := []int{int(a.A) - int(b.A)}
			if min(a.A, b.A) >= 64 {
				diffs = append(diffs, int(a.R)-int(b.R), int(a.G)-int(b.G), int(a.B)-int(b.B))
			}
			for _, d := range diffs {
				worst = max(worst, d, -d)
			}
		}
	}
	return worst
}
