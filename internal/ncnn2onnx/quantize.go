package ncnn2onnx

import (
	"errors"
	"fmt"
	"image"
	"image/png"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"

	"github.com/upscalekit/upscale/internal/ncnn"
	"github.com/upscalekit/upscale/internal/onnxpb"
)

// Calibration: each blob's range runs from the lowest to the highest, over
// the calibration tiles, of the values below and above which rangeTail of
// its values lie in that tile. On Set5 and Set14 (×2 and ×4) that scored
// as well as or up to 0.07 dB better than the tiles' extremes, the mean of
// their tails, or a tail ten times as large. The ranges come from
// internal/ncnn's float64 interpreter, so the quantised model is the same
// bytes on any machine.
const rangeTail = 0.0001

// Quantization says which convolutions run in INT8 and the ranges of the
// blobs they read and write.
type Quantization struct {
	// float names the convolution layers kept in float32; every other
	// (non-transposed) convolution is quantised.
	float map[string]bool
	// ranges are the calibrated ranges of the network's blobs, by ncnn
	// name.
	ranges map[string][2]float64
	// net and tiles are what it was calibrated for and on.
	net   *ncnn.Net
	tiles []*ncnn.Blob
	// channelRanges are the calibrated ranges of each channel of the
	// blobs, by ncnn name, for a brought network: what a quantised
	// convolution reads is scaled channel by channel to one range
	// (channelScaled), and its weights the other way.
	channelRanges map[string][][2]float64
	// grams are, for a brought network, the second moments of the
	// patches each convolution between those that read and make the
	// image reads (patchGram), over the calibration tiles, by layer name:
	// what its weights are rounded against (roundedWeights).
	grams map[string][]float64
	// rounded keeps each convolution's rounded weights, which depend on
	// nothing else quantised, for every twin made of q and its
	// KeepingInFloat copies.
	rounded *roundings
}

// roundings are convolutions' rounded int8 weights, by layer name.
type roundings struct {
	mu      sync.Mutex
	weights map[string][]int8
}

// of returns the weights of layer, rounded by round the first time.
func (r *roundings) of(layer string, round func() []int8) []int8 {
	r.mu.Lock()
	defer r.mu.Unlock()
	w, ok := r.weights[layer]
	if !ok {
		w = round()
		r.weights[layer] = w
	}
	return w
}

// Quantized are the convolutions q quantises, in the network's order.
func (q *Quantization) Quantized() []string {
	var names []string
	for _, l := range q.net.Layers {
		if _, ok := l.Op.(*ncnn.Conv); ok && q.int8Form(l) && !q.float[l.Name] {
			names = append(names, l.Name)
		}
	}
	return names
}

// KeepingInFloat returns q with layers kept in float32 too.
func (q *Quantization) KeepingInFloat(layers ...string) *Quantization {
	k := *q
	k.float = maps.Clone(q.float)
	for _, l := range layers {
		k.float[l] = true
	}
	return &k
}

// Tiles are the calibration tiles, each 3 planes of float32 in 0-1 (a
// network's input), side × side.
func (q *Quantization) Tiles() (tiles [][]float32, side int) {
	for _, b := range q.tiles {
		x := make([]float32, len(b.Data))
		for i, v := range b.Data {
			x[i] = float32(v)
		}
		tiles = append(tiles, x)
	}
	return tiles, q.tiles[0].W
}

// NewQuantization calibrates net on side × side tiles of the PNG files of
// dir (calibrationTiles), keeping the convolution layers named in float
// (ncnn names) in float32. With float nil, as for a network an operator
// brings, it keeps the convolutions that read or make the image
// (imageConvolutions) in float32 and quantises only what the others
// read, each channel by a step of its own (channelScaled), and rounds
// their weights against what they read (roundedWeights): their results,
// and every other layer, stay float.
func NewQuantization(net *ncnn.Net, dir string, side int, float []string) (*Quantization, error) {
	tiles, err := calibrationTiles(dir, side)
	if err != nil {
		return nil, err
	}
	q := &Quantization{float: map[string]bool{}, net: net, tiles: tiles}
	brought := float == nil
	if brought {
		q.float = imageConvolutions(net)
	}
	ranges, channels, grams, err := calibrate(net, tiles, brought, q.float)
	if err != nil {
		return nil, err
	}
	q.ranges = ranges
	if brought {
		q.channelRanges, q.grams, q.rounded = channels, grams, &roundings{weights: map[string][]int8{}}
	}
	for _, layer := range float {
		if !slices.ContainsFunc(net.Layers, func(l ncnn.Layer) bool { return l.Name == layer }) {
			return nil, fmt.Errorf("no layer %s to keep in float32", layer)
		}
		q.float[layer] = true
	}
	return q, nil
}

// imageConvolutions are the convolutions that no other convolution
// separates from the network's input or its output: they read the image
// or make it, where INT8's steps would show, and are a small share of an
// efficient network's arithmetic (SPAN's first and last: 5% of it).
func imageConvolutions(net *ncnn.Net) map[string]bool {
	producer, readers := map[string]ncnn.Layer{}, map[string][]ncnn.Layer{}
	for _, l := range net.Layers {
		for _, out := range l.Outputs {
			producer[out] = l
		}
		for _, in := range l.Inputs {
			readers[in] = append(readers[in], l)
		}
	}
	edge := map[string]bool{}
	// walk goes from start to the layers next gives, marking the
	// convolutions it meets and going on through the blobs along gives
	// of any other.
	walk := func(start string, next func(blob string) []ncnn.Layer, along func(ncnn.Layer) []string) {
		seen := map[string]bool{}
		var visit func(blob string)
		visit = func(blob string) {
			for _, l := range next(blob) {
				if _, ok := l.Op.(*ncnn.Conv); ok {
					edge[l.Name] = true
				} else if !seen[l.Name] {
					seen[l.Name] = true
					for _, b := range along(l) {
						visit(b)
					}
				}
			}
		}
		visit(start)
	}
	walk(net.Input, func(blob string) []ncnn.Layer { return readers[blob] }, func(l ncnn.Layer) []string { return l.Outputs })
	walk(net.Output, func(blob string) []ncnn.Layer {
		if p, ok := producer[blob]; ok {
			return []ncnn.Layer{p}
		}
		return nil
	}, func(l ncnn.Layer) []string { return l.Inputs })
	return edge
}

// int8Form reports whether l has a QDQ form (int8Layer's) under q. In a
// brought network's only a convolution has one: what it reads is scaled
// channel by channel, which only a convolution's weights undo.
func (q *Quantization) int8Form(l ncnn.Layer) bool {
	switch op := l.Op.(type) {
	case *ncnn.Conv:
		// Activations none, or LeakyReLU with a positive slope; a
		// transposed convolution whose kernel is its stride.
		act := op.Act
		return (act.Kind == ncnn.NoActivation || act.Kind == ncnn.LeakyReLU && act.Slope > 0) &&
			(!op.Transposed || q.channelRanges == nil && op.Kernel == op.Stride && op.Pad == 0)
	case *ncnn.Crop, ncnn.ChannelScale, ncnn.GlobalAvgPool:
		return q.channelRanges == nil
	case ncnn.Eltwise:
		return q.channelRanges == nil && op.Op == ncnn.Sum && len(l.Inputs) == 2
	}
	return false
}

// quantized is a tensor's uint8 quantisation: value = scale × (q − zero).
type quantized struct {
	scale float32
	zero  uint8
}

// quantizedRange covers [lo, hi] and zero (which must be exact: it is the
// padding) in 255 steps.
func quantizedRange(lo, hi float64) quantized {
	lo, hi = min(lo, 0), max(hi, 0)
	if hi-lo < 1e-6 {
		hi = lo + 1e-6
	}
	scale := float32((hi - lo) / 255)
	return quantized{scale: scale, zero: uint8(min(max(math.Round(-lo/float64(scale)), 0), 255))}
}

// calibrationTiles reads the PNG files of dir (in name order), shrinks
// each ×2 by averaging 2×2 blocks (as a low-resolution source) and cuts a
// side × side tile from its centre, as RGB in 0-1.
func calibrationTiles(dir string, side int) ([]*ncnn.Blob, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.png"))
	if err != nil {
		return nil, err
	}
	slices.Sort(files)
	var tiles []*ncnn.Blob
	for _, file := range files {
		img, err := decodePNG(file)
		if err != nil {
			return nil, err
		}
		b := img.Bounds()
		w, h := b.Dx()/2, b.Dy()/2
		if w < side || h < side {
			return nil, fmt.Errorf("%s: %d×%d is too small for a %d-pixel tile at half size", file, b.Dx(), b.Dy(), side)
		}
		left, top := (w-side)/2, (h-side)/2
		tile := ncnn.NewBlob(3, side, side)
		for y := range side {
			for x := range side {
				var sum [3]float64
				for _, d := range [4][2]int{{0, 0}, {1, 0}, {0, 1}, {1, 1}} {
					r, g, bl, _ := img.At(b.Min.X+2*(left+x)+d[0], b.Min.Y+2*(top+y)+d[1]).RGBA()
					sum[0], sum[1], sum[2] = sum[0]+float64(r), sum[1]+float64(g), sum[2]+float64(bl)
				}
				for c := range 3 {
					tile.Data[(c*side+y)*side+x] = sum[c] / 4 / 0xffff
				}
			}
		}
		tiles = append(tiles, tile)
	}
	if len(tiles) == 0 {
		return nil, fmt.Errorf("no PNG files in %s", dir)
	}
	return tiles, nil
}

func decodePNG(file string) (image.Image, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return img, nil
}

// calibrate runs net on every tile and returns each blob's range (see
// rangeTail), and with byChannel each of its channels' too and the patch
// Grams (patchGram) of the convolutions not kept in float, summed over
// the tiles. Tiles run in parallel; the result does not depend on their
// order.
func calibrate(net *ncnn.Net, tiles []*ncnn.Blob, byChannel bool, float map[string]bool) (map[string][2]float64, map[string][][2]float64, map[string][]float64, error) {
	perTile := make([]map[string][2]float64, len(tiles))
	perChannel := make([]map[string][][2]float64, len(tiles))
	errs := make([]error, len(tiles))
	next := make(chan int)
	grams, tileGrams, summed := map[string][]float64{}, make(chan indexedGrams), make(chan struct{})
	go func() {
		sumGrams(grams, tileGrams)
		close(summed)
	}()
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for i := range next {
				blobs, err := net.Blobs(tiles[i])
				if err != nil {
					errs[i] = err
					tileGrams <- indexedGrams{i, nil}
					continue
				}
				g := map[string][]float64{}
				for _, l := range net.Layers {
					if conv, ok := l.Op.(*ncnn.Conv); ok && byChannel && !conv.Transposed && !float[l.Name] {
						d := conv.In * conv.Kernel * conv.Kernel
						g[l.Name] = make([]float64, d*d)
						patchGram(g[l.Name], conv, blobs[l.Inputs[0]])
					}
				}
				tileGrams <- indexedGrams{i, g}
				perTile[i], perChannel[i] = map[string][2]float64{}, map[string][][2]float64{}
				for name, blob := range blobs {
					perTile[i][name] = tails(blob.Data)
					if !byChannel {
						continue
					}
					n := blob.H * blob.W
					for ch := range blob.C {
						perChannel[i][name] = append(perChannel[i][name], tails(blob.Data[ch*n:(ch+1)*n]))
					}
				}
			}
		})
	}
	for i := range tiles {
		next <- i
	}
	close(next)
	wg.Wait()
	close(tileGrams)
	<-summed
	if err := errors.Join(errs...); err != nil {
		return nil, nil, nil, err
	}
	ranges, channels := map[string][2]float64{}, map[string][][2]float64{}
	for name := range perTile[0] {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, r := range perTile {
			lo, hi = min(lo, r[name][0]), max(hi, r[name][1])
		}
		ranges[name] = [2]float64{lo, hi}
		for ch := range perChannel[0][name] {
			lo, hi := math.Inf(1), math.Inf(-1)
			for _, r := range perChannel {
				lo, hi = min(lo, r[name][ch][0]), max(hi, r[name][ch][1])
			}
			channels[name] = append(channels[name], [2]float64{lo, hi})
		}
	}
	return ranges, channels, grams, nil
}

// indexedGrams are the patch Grams of calibration tile i, by layer name.
type indexedGrams struct {
	i     int
	grams map[string][]float64
}

// sumGrams adds the tiles' Grams into sums in the tiles' order, whatever
// order they come in, so that the sums are the same bytes on every run:
// a tile's are kept only until those before it are in.
func sumGrams(sums map[string][]float64, tiles <-chan indexedGrams) {
	early, next := map[int]map[string][]float64{}, 0
	for t := range tiles {
		early[t.i] = t.grams
		for g, ok := early[next]; ok; g, ok = early[next] {
			for name, v := range g {
				if sum, ok := sums[name]; ok {
					for j := range sum {
						sum[j] += v[j]
					}
				} else {
					sums[name] = v
				}
			}
			delete(early, next)
			next++
		}
	}
}

// tails returns the values below and above which rangeTail of v lie.
func tails(v []float64) [2]float64 {
	sorted := slices.Clone(v)
	slices.Sort(sorted)
	last := float64(len(sorted) - 1)
	return [2]float64{sorted[int(math.Floor(rangeTail*last))], sorted[int(math.Ceil((1-rangeTail)*last))]}
}

// dequantized returns the name of tensor, quantised to uint8 with the
// range of ncnn blob and back (QuantizeLinear, DequantizeLinear): the
// input a quantised convolution reads, which ONNX Runtime then fuses into
// the convolution. A tensor a quantised layer wrote is that already.
func (c *converter) dequantized(tensor, blob string) (string, quantized, error) {
	if q, ok := c.quantized[tensor]; ok {
		return tensor, q, nil
	}
	if dq, ok := c.dequantizedAs[tensor]; ok {
		return dq, c.quantized[dq], nil
	}
	r, ok := c.quant.ranges[blob]
	if !ok {
		return "", quantized{}, fmt.Errorf("blob %s has no calibrated range", blob)
	}
	q := quantizedRange(r[0], r[1])
	out, from := tensor+"_dq", tensor
	if channels, ok := c.quant.channelRanges[blob]; ok {
		// Each channel divided by its step: one uint8 range holds them
		// all, as one scale could not (SPAN's run from a fraction of 1
		// to 91 in one tensor).
		var steps []float32
		q, steps = channelScaled(channels)
		inverse := make([]float32, len(steps))
		for i, s := range steps {
			inverse[i] = 1 / s
		}
		scaled := tensor + "_scaled"
		c.node("Mul", tensor+"_scale", []string{tensor, c.weightFloat(tensor+"_steps", []int64{1, int64(len(steps)), 1, 1}, inverse...)}, scaled)
		c.channelSteps[out] = steps
		tensor = scaled
	}
	c.quantize(tensor, out, q)
	c.dequantizedAs[from] = out
	return out, q, nil
}

// channelScaled chooses, for channels of the given ranges, the one
// zero point z and each channel's step s (its value over s lies in
// [−z, 255 − z]) that make the steps smallest for their ranges, summed;
// the result is a quantisation of scale 1 and zero point z.
func channelScaled(ranges [][2]float64) (quantized, []float32) {
	stepsAt := func(z int) ([]float32, float64) {
		steps, cost := make([]float32, len(ranges)), 0.0
		for i, r := range ranges {
			lo, hi := min(r[0], 0), max(r[1], 0)
			s := max(hi/float64(255-z), -lo/float64(z), 1e-6)
			steps[i] = float32(s)
			cost += s / max(hi-lo, 1e-6)
		}
		return steps, cost
	}
	best, bestCost := 1, math.Inf(1)
	for z := 1; z < 255; z++ {
		if _, cost := stepsAt(z); cost < bestCost {
			best, bestCost = z, cost
		}
	}
	steps, _ := stepsAt(best)
	return quantized{scale: 1, zero: uint8(best)}, steps
}

// quantize adds QuantizeLinear and DequantizeLinear from tensor in to out
// with q, and records out as quantised.
func (c *converter) quantize(in, out string, q quantized) {
	scale := c.weightFloat(out+"_scale", nil, q.scale)
	c.graph.Initializers = append(c.graph.Initializers, onnxpb.Uint8Tensor(out+"_zero", nil, []uint8{q.zero}))
	c.node("QuantizeLinear", out+"_quantize", []string{in, scale, out + "_zero"}, out+"_q")
	c.node("DequantizeLinear", out+"_dequantize", []string{out + "_q", scale, out + "_zero"}, out)
	c.quantized[out] = q
}

// convolution is a convolution's shape and weights ([out][in][k][k]).
type convolution struct {
	name                string
	in, out             int
	kernel, stride, pad int
	weight, bias        []float32
	act                 ncnn.Activation
}

// int8Conv adds a convolution in QDQ form: its input and output as uint8
// (per tensor: the input's calibrated range, and outRange), its weights
// as int8 (per output channel, symmetric) and its bias as int32 in the
// product of the two scales, which is what ONNX Runtime runs as
// QLinearConv. A LeakyReLU after it gets its own QDQ pair, which ONNX
// Runtime runs as QLinearLeakyRelu. Without quantizeOut (a brought
// network's) its result stays float32.
func (c *converter) int8Conv(conv convolution, in, inBlob, out string, outRange [2]float64, quantizeOut bool) error {
	x, qx, err := c.dequantized(in, inBlob)
	if err != nil {
		return err
	}
	k := conv.kernel * conv.kernel
	steps, scaled := c.channelSteps[x]
	if scaled { // the input was divided by them
		w := make([]float32, len(conv.weight))
		for i, v := range conv.weight {
			w[i] = v * steps[i/k%conv.in]
		}
		conv.weight = w
	}
	d := conv.in * k // the weights of an output channel
	scales := make([]float32, conv.out)
	for o := range conv.out {
		var peak float32
		for _, w := range conv.weight[o*d : (o+1)*d] {
			peak = max(peak, float32(math.Abs(float64(w))))
		}
		scales[o] = max(peak/127, 1e-12)
	}
	var weights []int8
	if gram, ok := c.quant.grams[conv.name]; ok && scaled {
		weights = c.quant.rounded.of(conv.name, func() []int8 {
			// The patches as the convolution reads them: divided by the
			// steps.
			g := make([]float64, d*d)
			for i := range d {
				for j := i; j < d; j++ {
					g[i*d+j] = gram[i*d+j] / (float64(steps[i/k]) * float64(steps[j/k]))
				}
			}
			return roundedWeights(conv.weight, d, scales, g)
		})
	} else {
		weights = make([]int8, len(conv.weight))
		for i, w := range conv.weight {
			weights[i] = int8(math.Round(float64(w / scales[i/d])))
		}
	}
	dims := []int64{int64(conv.out), int64(conv.in), int64(conv.kernel), int64(conv.kernel)}
	name := conv.name
	c.graph.Initializers = append(c.graph.Initializers,
		onnxpb.Int8Tensor(name+"_weight_q", dims, weights),
		onnxpb.Int8Tensor(name+"_weight_zero", []int64{int64(conv.out)}, make([]int8, conv.out)))
	c.weightFloat(name+"_weight_scale", []int64{int64(conv.out)}, scales...)
	c.node("DequantizeLinear", name+"_weight_dequantize", []string{name + "_weight_q", name + "_weight_scale", name + "_weight_zero"}, name+"_weight", onnxpb.Int("axis", 0))
	inputs := []string{x, name + "_weight"}
	if conv.bias != nil {
		biases := make([]int32, conv.out)
		biasScales := make([]float32, conv.out)
		for o := range conv.out {
			biasScales[o] = qx.scale * scales[o]
			// A channel of zero weights has a tiny scale: its bias is
			// clamped, as the int32 it must fit in.
			biases[o] = int32(min(max(math.Round(float64(conv.bias[o]/biasScales[o])), math.MinInt32), math.MaxInt32))
		}
		c.graph.Initializers = append(c.graph.Initializers,
			onnxpb.Int32Tensor(name+"_bias_q", []int64{int64(conv.out)}, biases),
			onnxpb.Int32Tensor(name+"_bias_zero", []int64{int64(conv.out)}, make([]int32, conv.out)))
		c.weightFloat(name+"_bias_scale", []int64{int64(conv.out)}, biasScales...)
		c.node("DequantizeLinear", name+"_bias_dequantize", []string{name + "_bias_q", name + "_bias_scale", name + "_bias_zero"}, name+"_bias", onnxpb.Int("axis", 0))
		inputs = append(inputs, name+"_bias")
	}
	s, p := int64(conv.stride), int64(conv.pad)
	attrs := []onnxpb.Attr{onnxpb.Ints("kernel_shape", int64(conv.kernel), int64(conv.kernel)), onnxpb.Ints("strides", s, s), onnxpb.Ints("pads", p, p, p, p)}
	if !quantizeOut {
		c.activated("Conv", name, inputs, out, conv.act, attrs...)
		return nil
	}
	switch conv.act.Kind {
	case ncnn.NoActivation:
		c.node("Conv", name, inputs, name+"_out", attrs...)
		c.quantize(name+"_out", out, quantizedRange(outRange[0], outRange[1]))
	case ncnn.LeakyReLU:
		// LeakyReLU is monotonic, so the range before it is the range
		// after it with the negative end divided by the slope.
		slope := float64(conv.act.Slope)
		c.node("Conv", name, inputs, name+"_preact", attrs...)
		c.quantize(name+"_preact", name+"_preact_dq", quantizedRange(min(outRange[0]/slope, outRange[0]), outRange[1]))
		c.node("LeakyRelu", name+"_leakyrelu", []string{name + "_preact_dq"}, name+"_act", onnxpb.FloatAttr("alpha", conv.act.Slope))
		c.quantize(name+"_act", out, quantizedRange(outRange[0], outRange[1]))
	default:
		return fmt.Errorf("no INT8 form for activation %v", conv.act.Kind)
	}
	return nil
}

// int8Layer adds l in INT8 when it has an INT8 form and quant does not
// keep it in float32, and reports whether it did.
func (c *converter) int8Layer(l ncnn.Layer, in []string, out string) (bool, error) {
	if c.quant == nil || c.quant.float[l.Name] || !c.quant.int8Form(l) {
		return false, nil
	}
	outRange, ok := c.quant.ranges[l.Outputs[0]]
	if !ok {
		return false, fmt.Errorf("blob %s has no calibrated range", l.Outputs[0])
	}
	switch op := l.Op.(type) {
	case *ncnn.Conv:
		conv := convolution{name: l.Name, in: op.In, out: op.Out, kernel: op.Kernel, stride: op.Stride, pad: op.Pad, weight: op.Weight, bias: op.Bias, act: op.Act}
		if !op.Transposed {
			return true, c.int8Conv(conv, in[0], l.Inputs[0], out, outRange, c.quant.channelRanges == nil)
		}
		// Each input pixel alone makes a k × k block of the output: a
		// 1×1 convolution to k² × Out channels, then DepthToSpace, which
		// moves uint8 values where ONNX Runtime's ConvTranspose has no
		// INT8 kernel.
		k := op.Kernel
		conv.kernel, conv.stride, conv.out = 1, 1, op.Out*k*k
		conv.weight, conv.bias = shuffled(op)
		blocks := l.Name + "_blocks"
		if err := c.int8Conv(conv, in[0], l.Inputs[0], blocks, outRange, true); err != nil {
			return true, err
		}
		c.node("DepthToSpace", l.Name+"_shuffle", []string{blocks}, l.Name+"_shuffled", onnxpb.Int("blocksize", int64(k)))
		c.quantize(l.Name+"_shuffled", out, c.quantized[blocks])
		return true, nil
	case *ncnn.Crop:
		x, q, err := c.dequantized(in[0], l.Inputs[0])
		if err != nil {
			return true, err
		}
		c.crop(l.Name, op, x, l.Name+"_cut")
		c.quantize(l.Name+"_cut", out, q)
		return true, nil
	case ncnn.Eltwise:
		if op.Op != ncnn.Sum || len(in) != 2 {
			return false, nil
		}
		return true, c.int8Node("Add", l, in, out, outRange)
	case ncnn.ChannelScale:
		return true, c.int8Node("Mul", l, in, out, outRange)
	case ncnn.GlobalAvgPool:
		return true, c.int8Node("GlobalAveragePool", l, in, out, outRange)
	}
	return false, nil
}

// int8Node adds l as the ONNX operation kind in QDQ form: its inputs
// dequantized, its output quantised to outRange.
func (c *converter) int8Node(kind string, l ncnn.Layer, in []string, out string, outRange [2]float64) error {
	inputs := make([]string, len(in))
	for i := range in {
		var err error
		if inputs[i], _, err = c.dequantized(in[i], l.Inputs[i]); err != nil {
			return err
		}
	}
	c.node(kind, l.Name, inputs, l.Name+"_out")
	c.quantize(l.Name+"_out", out, quantizedRange(outRange[0], outRange[1]))
	return nil
}

// shuffled returns the weights and bias of the 1×1 convolution that,
// followed by DepthToSpace (its default mode, DCR: channel
// (ky·k + kx)·Out + o goes to (ky, kx) of channel o's blocks), equals the
// deconvolution op whose kernel is its stride.
func shuffled(op *ncnn.Conv) (weight, bias []float32) {
	k := op.Kernel
	weight = make([]float32, len(op.Weight))
	for o := range op.Out {
		for i := range op.In {
			for j := range k * k {
				weight[(j*op.Out+o)*op.In+i] = op.Weight[(o*op.In+i)*k*k+j]
			}
		}
	}
	if op.Bias != nil {
		bias = make([]float32, op.Out*k*k)
		for i := range bias {
			bias[i] = op.Bias[i%op.Out]
		}
	}
	return weight, bias
}

// weightFloat adds a float32 initializer (a scalar when dims is nil).
func (c *converter) weightFloat(name string, dims []int64, v ...float32) string {
	c.graph.Initializers = append(c.graph.Initializers, onnxpb.FloatTensor(name, dims, v))
	return name
}
