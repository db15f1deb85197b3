package onednn

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/engine/onnx"
	"github.com/upscalekit/upscale/engine/onnx/models"
	"github.com/upscalekit/upscale/engine/onnx/onnxtest"
	"github.com/upscalekit/upscale/internal/ncnn2onnx"
	"github.com/upscalekit/upscale/internal/onnxpb"
	"github.com/upscalekit/upscale/upscaletest"
)

func compiled(t *testing.T, arch onnx.Architecture, precision onnx.Precision) *graph {
	t.Helper()
	m, err := models.Load(onnx.NetworkFile(arch, upscale.DenoiseNone, precision))
	if err != nil {
		t.Fatal(err)
	}
	file, err := onnxpb.Unmarshal(m.Data)
	return mustCompile(t, file, err)
}

// compiledSPAN compiles SPAN ch48 ×2, converted in float32.
func compiledSPAN(t *testing.T) *graph {
	t.Helper()
	file, _, err := ncnn2onnx.Convert(onnxtest.SPAN(t, 2), "span", nil, nil)
	return mustCompile(t, file, err)
}

// mustCompile compiles file, failing t on err (reading it) or on
// compile's.
func mustCompile(t *testing.T, file *onnxpb.Model, err error) *graph {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	g, err := compile(file)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestPlacementNeverOverlaps: no two buffers in use at the same step share
// a byte of the arena, and all lie within it, for each network in each
// precision at two tile sizes.
func TestPlacementNeverOverlaps(t *testing.T) {
	for _, tc := range []struct {
		arch      onnx.Architecture
		precision onnx.Precision
		floatType int
	}{
		{onnx.CUNet, onnx.FP32, f32}, {onnx.CUNet, onnx.BF16, bf16}, {onnx.CUNet, onnx.INT8, bf16},
		{onnx.UpConv7, onnx.FP32, f32}, {onnx.UpConv7, onnx.INT8, bf16},
		{"span", onnx.FP32, f32}, {"span", onnx.BF16, bf16},
	} {
		var g *graph
		if tc.arch == "span" {
			g = compiledSPAN(t)
		} else {
			g = compiled(t, tc.arch, tc.precision)
		}
		types, err := typeGraph(g, tc.floatType, tc.precision == onnx.INT8)
		if err != nil {
			t.Fatal(err)
		}
		for _, side := range []int{42, 164} {
			p := &plan{w: side, h: side + 2, g: g, t: types}
			if err := p.shape(); err != nil {
				t.Fatal(err)
			}
			p.place()
			// Each value is in use from the step that makes it (the input
			// from the first) to the last step that reads it; a phase
			// only in its own step.
			first, last := make([]int, len(g.values)), make([]int, len(g.values))
			for i, l := range g.layers {
				first[l.out], last[l.out] = i, i
				if l.kind == transposed {
					first[l.phase], last[l.phase] = i, i
				}
				last[l.in] = i
				if l.hasSkip {
					last[l.skip] = i
				}
				for _, v := range l.inputs {
					last[v] = i
				}
			}
			type span struct{ from, to int }
			for i := range g.layers {
				var live []span
				for v := range g.values {
					if value(v) == g.output || first[v] > i || last[v] < i {
						continue
					}
					if p.at[v] < 0 {
						t.Fatalf("%s %s %d: %s is in use at step %d and has no place", tc.arch, tc.precision, side, g.values[v].name, i)
					}
					live = append(live, span{p.at[v], p.at[v] + p.size(value(v), false)})
					if p.t.copy[v] >= 0 {
						live = append(live, span{p.copyAt[v], p.copyAt[v] + p.size(value(v), true)})
					}
				}
				for a := range live {
					if live[a].to > p.bytes {
						t.Errorf("%s %s %d: a buffer ends at %d, past the arena's %d", tc.arch, tc.precision, side, live[a].to, p.bytes)
					}
					for b := range a {
						if live[a].from < live[b].to && live[b].from < live[a].to {
							t.Fatalf("%s %s %d: at step %d (%s) buffers %v and %v overlap", tc.arch, tc.precision, side, i, g.layers[i].name, live[a], live[b])
						}
					}
				}
			}
		}
	}
}

// TestTypes: in INT8 the layers ncnn2onnx quantised run on int8 but
// keptInFloat (cunet's), and the rest in float; the convolutions that
// read the image and the transposed ones that make it run in float32.
func TestTypes(t *testing.T) {
	cunet := map[string]int{
		"Convolution1": f32, "Convolution2": bf16, "Convolution3": bf16, "Convolution5": bf16,
		"Deconvolution1": bf16, "Deconvolution2": f32, "Convolution9": f32, "Convolution10": bf16,
		"Convolution11": u8, "Deconvolution3": u8, "Deconvolution4": bf16, "Convolution26": u8,
	}
	for name := range keptInFloat {
		if _, ok := cunet[name]; !ok {
			cunet[name] = bf16
		}
	}
	t.Run("cunet", func(t *testing.T) { testTypes(t, onnx.CUNet, cunet) })
	t.Run("upconv7", func(t *testing.T) {
		testTypes(t, onnx.UpConv7, map[string]int{
			"conv1_layer": f32, "conv2_layer": bf16, "conv3_layer": bf16,
			"conv4_layer": u8, "conv5_layer": u8, "conv6_layer": u8, "conv7_layer": f32,
		})
	})
}

// testTypes checks that arch's INT8 twin runs each layer want names in
// the type it gives, and exports float32.
func testTypes(t *testing.T, arch onnx.Architecture, want map[string]int) {
	g := compiled(t, arch, onnx.INT8)
	types, err := typeGraph(g, bf16, true)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for i, l := range g.layers {
		if dt, ok := want[l.name]; ok {
			seen++
			if types.conv[i] != dt {
				t.Errorf("%s runs in type %d, want %d", l.name, types.conv[i], dt)
			}
		}
		if l.kind == export && types.dt[l.in] != f32 {
			t.Errorf("the exported %s is of type %d, want float32", g.values[l.in].name, types.dt[l.in])
		}
	}
	if seen != len(want) {
		t.Errorf("%d of the %d layers named here are in the network: a name here or in keptInFloat is not", seen, len(want))
	}
}

// TestCompileRefuses: a network with an operator or a form the package
// does not run is an error that names it, not a wrong result.
func TestCompileRefuses(t *testing.T) {
	weights := onnxpb.FloatTensor("w", []int64{3, 3, 3, 3}, make([]float32, 81))
	image := []onnxpb.Value{{Name: "x", Type: onnxpb.Float, Dims: []onnxpb.Dim{{Size: 1}, {Size: 3}, {Param: "h"}, {Param: "w"}}}}
	output := []onnxpb.Value{{Name: "y", Type: onnxpb.Float}}
	for name, tc := range map[string]struct {
		nodes []onnxpb.Node
		want  string
	}{
		"MaxPool": {[]onnxpb.Node{
			{Op: "Conv", Name: "c", Inputs: []string{"x", "w"}, Outputs: []string{"a"}},
			{Op: "MaxPool", Name: "p", Inputs: []string{"a"}, Outputs: []string{"y"}},
		}, "MaxPool"},
		"Dilation": {[]onnxpb.Node{
			{Op: "Conv", Name: "c", Inputs: []string{"x", "w"}, Outputs: []string{"y"}, Attrs: []onnxpb.Attr{onnxpb.Ints("dilations", 2, 2)}},
		}, "dilations"},
		"UnevenPads": {[]onnxpb.Node{
			{Op: "Conv", Name: "c", Inputs: []string{"x", "w"}, Outputs: []string{"y"}, Attrs: []onnxpb.Attr{onnxpb.Ints("pads", 1, 0, 1, 0)}},
		}, "pads"},
		"TransposedOfOddKernel": {[]onnxpb.Node{
			{Op: "ConvTranspose", Name: "t", Inputs: []string{"x", "w"}, Outputs: []string{"y"}, Attrs: []onnxpb.Attr{onnxpb.Ints("strides", 2, 2)}},
		}, "stride 2"},
		"OutputNotTheLastLayers": {[]onnxpb.Node{
			{Op: "Conv", Name: "c", Inputs: []string{"x", "w"}, Outputs: []string{"y"}},
			{Op: "Conv", Name: "d", Inputs: []string{"y", "w"}, Outputs: []string{"z"}},
		}, "made by the last layer"},
	} {
		t.Run(name, func(t *testing.T) {
			file := &onnxpb.Model{Graph: onnxpb.Graph{Nodes: tc.nodes, Initializers: []onnxpb.Tensor{weights}, Inputs: image, Outputs: output}}
			if _, err := compile(file); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("compile: %v; want an error naming %q", err, tc.want)
			}
		})
	}
}

// doneAfter is a context that is done from the n-th time Err is asked.
type doneAfter struct {
	context.Context
	n int
}

func (c *doneAfter) Err() error {
	if c.n--; c.n <= 0 {
		return context.Canceled
	}
	return nil
}

// testNetwork loads the plain network in float32 on a new Runtime, with a
// grey side² tile and room for its result.
func testNetwork(t *testing.T, side int) (rt *Runtime, n onnx.Network, x, out []float32) {
	t.Helper()
	rt, err := New()
	if err != nil {
		t.Fatal(err)
	}
	m, err := models.Load(onnx.NetworkFile(onnx.CUNet, upscale.DenoiseNone, onnx.FP32))
	if err != nil {
		t.Fatal(err)
	}
	n, err = rt.Load(m.Data, onnx.FP32, 2)
	upscaletest.Opened(t, n, err)
	x, out = make([]float32, 3*side*side), make([]float32, 3*m.OutputSize(side)*m.OutputSize(side))
	for i := range x {
		x[i] = 0.5
	}
	return rt, n, x, out
}

// TestCancelWithinATile: a tile checks its context before each layer, and
// stops at the first check after it is done: the output is never written.
func TestCancelWithinATile(t *testing.T) {
	const side = 60
	_, n, x, out := testNetwork(t, side)
	if err := n.Run(&doneAfter{Context: context.Background(), n: 6}, x, side, side, out); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v, want context.Canceled", err)
	}
	for _, v := range out {
		if v != 0 {
			t.Fatal("the output was written: the tile ran to its end")
		}
	}
	// The plan and arena it used serve the next tile.
	if err := n.Run(context.Background(), x, side, side, out); err != nil || out[0] == 0 {
		t.Fatalf("the next tile: %v, first sample %g", err, out[0])
	}
}

// TestReleaseMemory: the arenas idle after a tile are freed, and the next
// tile takes a new one.
func TestReleaseMemory(t *testing.T) {
	const side = 60
	rt, n, x, out := testNetwork(t, side)
	run := func() {
		t.Helper()
		if err := n.Run(context.Background(), x, side, side, out); err != nil {
			t.Fatal(err)
		}
	}
	run()
	if len(rt.arenas) != 1 {
		t.Fatalf("%d idle arenas after a tile, want 1", len(rt.arenas))
	}
	rt.ReleaseMemory()
	if len(rt.arenas) != 0 {
		t.Fatalf("%d idle arenas after ReleaseMemory, want 0", len(rt.arenas))
	}
	run()
}

// TestSharedValueMadeOnce: an element-wise result that two programs read
// is made once, by its own layer, not again in each program (as an INT8
// twin's residual sum is read by the next block's sum and scaled for its
// convolution).
func TestSharedValueMadeOnce(t *testing.T) {
	weights := onnxpb.FloatTensor("w", []int64{3, 3, 3, 3}, make([]float32, 81))
	image := []onnxpb.Value{{Name: "x", Type: onnxpb.Float, Dims: []onnxpb.Dim{{Size: 1}, {Size: 3}, {Param: "h"}, {Param: "w"}}}}
	file := &onnxpb.Model{Graph: onnxpb.Graph{Nodes: []onnxpb.Node{
		{Op: "Conv", Name: "c", Inputs: []string{"x", "w"}, Outputs: []string{"a"}},
		{Op: "Sigmoid", Name: "shared", Inputs: []string{"a"}, Outputs: []string{"b"}},
		{Op: "Mul", Name: "d", Inputs: []string{"b", "a"}, Outputs: []string{"d"}},
		{Op: "Conv", Name: "cd", Inputs: []string{"d", "w"}, Outputs: []string{"d2"}},
		{Op: "Add", Name: "e", Inputs: []string{"b", "a"}, Outputs: []string{"e"}},
		{Op: "Conv", Name: "ce", Inputs: []string{"e", "w"}, Outputs: []string{"e2"}},
		{Op: "Add", Name: "f", Inputs: []string{"d2", "e2"}, Outputs: []string{"f"}},
		{Op: "Conv", Name: "out", Inputs: []string{"f", "w"}, Outputs: []string{"y"}},
	}, Initializers: []onnxpb.Tensor{weights}, Inputs: image, Outputs: []onnxpb.Value{{Name: "y", Type: onnxpb.Float}}}}
	g := mustCompile(t, file, nil)
	var programs []string
	sigmoids := 0
	for _, l := range g.layers {
		if l.kind != elementwise {
			continue
		}
		programs = append(programs, fmt.Sprintf("%s (%d steps)", l.name, len(l.steps)))
		for _, s := range l.steps {
			if s.op == stepOps["Sigmoid"] {
				sigmoids++
			}
		}
	}
	if sigmoids != 1 || len(programs) != 4 {
		t.Errorf("programs %v with %d sigmoids; want the shared sigmoid's, d's, e's and f's, one sigmoid in all", programs, sigmoids)
	}
}

// TestQuantisedAsONNXDoes: a value a loop writes in uint8 for an int8
// convolution is ONNX's QuantizeLinear of it, saturate(round(v / scale)
// + zero point), rounded half to even: ties, values that saturate either
// way, and values far beyond. The network copies the image into 4
// channels (1×1, in float32), doubles it (a loop, which writes the
// quantised value), and reads it back with int8 weights that copy 3 of
// the 4 channels, so its result is scale × (q − zero point).
func TestQuantisedAsONNXDoes(t *testing.T) {
	const scale, zero = 0.5, 10
	spread := make([]float32, 12) // 3 → 4 channels: the fourth is the first again
	copied := make([]int8, 12)    // 4 → 3
	for i := range 3 {
		spread[i*3+i], copied[i*4+i] = 1, 1
	}
	spread[9] = 1
	image := []onnxpb.Value{{Name: "x", Type: onnxpb.Float, Dims: []onnxpb.Dim{{Size: 1}, {Size: 3}, {Param: "h"}, {Param: "w"}}}}
	file := &onnxpb.Model{Graph: onnxpb.Graph{Nodes: []onnxpb.Node{
		{Op: "Conv", Name: "spread", Inputs: []string{"x", "w0"}, Outputs: []string{"a"}},
		{Op: "Mul", Name: "double", Inputs: []string{"a", "two"}, Outputs: []string{"m"}},
		{Op: "QuantizeLinear", Name: "q", Inputs: []string{"m", "scale", "zero"}, Outputs: []string{"q"}},
		{Op: "DequantizeLinear", Name: "dq", Inputs: []string{"q", "scale", "zero"}, Outputs: []string{"d"}},
		{Op: "DequantizeLinear", Name: "dqw", Inputs: []string{"w1q", "wscale", "wzero"}, Outputs: []string{"w1"}},
		{Op: "Conv", Name: "copy", Inputs: []string{"d", "w1"}, Outputs: []string{"y"}},
	}, Initializers: []onnxpb.Tensor{
		onnxpb.FloatTensor("w0", []int64{4, 3, 1, 1}, spread),
		onnxpb.FloatTensor("two", []int64{1}, []float32{2}),
		onnxpb.FloatTensor("scale", nil, []float32{scale}),
		onnxpb.Uint8Tensor("zero", nil, []uint8{zero}),
		onnxpb.Int8Tensor("w1q", []int64{3, 4, 1, 1}, copied),
		onnxpb.FloatTensor("wscale", []int64{3}, []float32{1, 1, 1}),
		onnxpb.Int8Tensor("wzero", []int64{3}, []int8{0, 0, 0}),
	}, Inputs: image, Outputs: []onnxpb.Value{{Name: "y", Type: onnxpb.Float}}}}
	rt, err := New()
	if err != nil {
		t.Fatal(err)
	}
	n, err := rt.Load(file.Marshal(), onnx.INT8, 2)
	upscaletest.Opened(t, n, err)
	// 2v / scale + zero = 4v + 10: ties at v = k/4 + 1/8, 0 below v =
	// -2.5, 255 from 61.25.
	values := []float32{0, 0.125, 0.375, -0.125, -0.375, 1.625, -2.5, -2.625, -3, -1e9, 61.125, 61.25, 61.375, 100, 1e9, 3.3, -2.4}
	const w, h = 17, 3
	x, y := make([]float32, 3*w*h), make([]float32, 3*w*h)
	for i := range x {
		x[i] = values[i%len(values)]
	}
	if err := n.Run(context.Background(), x, w, h, y); err != nil {
		t.Fatal(err)
	}
	for i, v := range x {
		q := math.Max(0, math.Min(255, math.RoundToEven(float64(2*v)/scale)+zero))
		if want := scale * (q - zero); float64(y[i]) != want {
			t.Errorf("%g doubled and quantised by %g from %d: read back as %g, want %g", v, scale, zero, y[i], want)
		}
	}
}

// TestGateRunsAsItsProgram: a program that makes (a + b) × (sigmoid(a)
// − k), SPAN's attention, in whatever order its operators come, and
// optionally then scales each channel, runs in od_gate's one loop and
// makes the same bits as the program's steps, in float32 and in
// bfloat16; a program that differs from it anywhere runs as steps.
func TestGateRunsAsItsProgram(t *testing.T) {
	weights := func(name string, seed int) onnxpb.Tensor {
		w := make([]float32, 12)
		for i := range w {
			w[i] = float32((i*7+seed)%11-5) / 2
		}
		return onnxpb.FloatTensor(name, []int64{4, 3, 1, 1}, w)
	}
	model := func(attention ...onnxpb.Node) *onnxpb.Model {
		nodes := append([]onnxpb.Node{
			{Op: "Conv", Name: "ca", Inputs: []string{"x", "wa"}, Outputs: []string{"a"}},
			{Op: "Conv", Name: "cb", Inputs: []string{"x", "wb"}, Outputs: []string{"b"}},
		}, attention...)
		nodes = append(nodes, onnxpb.Node{Op: "Conv", Name: "out", Inputs: []string{"m", "wo"}, Outputs: []string{"y"}})
		image := []onnxpb.Value{{Name: "x", Type: onnxpb.Float, Dims: []onnxpb.Dim{{Size: 1}, {Size: 3}, {Param: "h"}, {Param: "w"}}}}
		return &onnxpb.Model{Graph: onnxpb.Graph{Nodes: nodes, Initializers: []onnxpb.Tensor{
			weights("wa", 1), weights("wb", 4),
			onnxpb.FloatTensor("wo", []int64{3, 4, 1, 1}, []float32{1, 0, 0, 0.5, 0, 1, 0, -0.5, 0, 0, 1, 0.25}),
			onnxpb.FloatTensor("k", []int64{1, 4, 1, 1}, []float32{0.5, 0.25, -1, 2}),
			onnxpb.FloatTensor("half", []int64{1}, []float32{0.5}),
			onnxpb.FloatTensor("f", []int64{1, 4, 1, 1}, []float32{0.75, 3, -0.125, 1.5}),
		}, Inputs: image, Outputs: []onnxpb.Value{{Name: "y", Type: onnxpb.Float}}}}
	}
	sigmoid := onnxpb.Node{Op: "Sigmoid", Name: "s", Inputs: []string{"a"}, Outputs: []string{"s"}}
	gated := map[string][]onnxpb.Node{
		"SPAN's order": {
			{Op: "Add", Name: "e", Inputs: []string{"a", "b"}, Outputs: []string{"e"}}, sigmoid,
			{Op: "Sub", Name: "d", Inputs: []string{"s", "k"}, Outputs: []string{"d"}},
			{Op: "Mul", Name: "m", Inputs: []string{"e", "d"}, Outputs: []string{"m"}},
		},
		"the sigmoid of the sum's second operand": {
			{Op: "Add", Name: "e", Inputs: []string{"a", "b"}, Outputs: []string{"e"}},
			{Op: "Sigmoid", Name: "s", Inputs: []string{"b"}, Outputs: []string{"s"}},
			{Op: "Sub", Name: "d", Inputs: []string{"s", "k"}, Outputs: []string{"d"}},
			{Op: "Mul", Name: "m", Inputs: []string{"e", "d"}, Outputs: []string{"m"}},
		},
		"operands swapped, one constant": {
			sigmoid, {Op: "Sub", Name: "d", Inputs: []string{"s", "half"}, Outputs: []string{"d"}},
			{Op: "Add", Name: "e", Inputs: []string{"b", "a"}, Outputs: []string{"e"}},
			{Op: "Mul", Name: "m", Inputs: []string{"d", "e"}, Outputs: []string{"m"}},
		},
		"then scaled": {
			{Op: "Add", Name: "e", Inputs: []string{"a", "b"}, Outputs: []string{"e"}}, sigmoid,
			{Op: "Sub", Name: "d", Inputs: []string{"s", "k"}, Outputs: []string{"d"}},
			{Op: "Mul", Name: "g", Inputs: []string{"e", "d"}, Outputs: []string{"g"}},
			{Op: "Mul", Name: "m", Inputs: []string{"g", "f"}, Outputs: []string{"m"}},
		},
		"then scaled, the scale first": {
			{Op: "Add", Name: "e", Inputs: []string{"a", "b"}, Outputs: []string{"e"}}, sigmoid,
			{Op: "Sub", Name: "d", Inputs: []string{"s", "half"}, Outputs: []string{"d"}},
			{Op: "Mul", Name: "g", Inputs: []string{"d", "e"}, Outputs: []string{"g"}},
			{Op: "Mul", Name: "m", Inputs: []string{"f", "g"}, Outputs: []string{"m"}},
		},
	}
	steps := map[string][]onnxpb.Node{
		"the constant first": {
			{Op: "Add", Name: "e", Inputs: []string{"a", "b"}, Outputs: []string{"e"}}, sigmoid,
			{Op: "Sub", Name: "d", Inputs: []string{"k", "s"}, Outputs: []string{"d"}},
			{Op: "Mul", Name: "m", Inputs: []string{"e", "d"}, Outputs: []string{"m"}},
		},
		"a difference for the sum": {
			{Op: "Sub", Name: "e", Inputs: []string{"a", "b"}, Outputs: []string{"e"}}, sigmoid,
			{Op: "Sub", Name: "d", Inputs: []string{"s", "k"}, Outputs: []string{"d"}},
			{Op: "Mul", Name: "m", Inputs: []string{"e", "d"}, Outputs: []string{"m"}},
		},
		"the difference scaled, not the product": {
			{Op: "Add", Name: "e", Inputs: []string{"a", "b"}, Outputs: []string{"e"}}, sigmoid,
			{Op: "Sub", Name: "d", Inputs: []string{"s", "k"}, Outputs: []string{"d"}},
			{Op: "Mul", Name: "g", Inputs: []string{"d", "f"}, Outputs: []string{"g"}},
			{Op: "Mul", Name: "m", Inputs: []string{"e", "g"}, Outputs: []string{"m"}},
		},
		"then shifted": {
			{Op: "Add", Name: "e", Inputs: []string{"a", "b"}, Outputs: []string{"e"}}, sigmoid,
			{Op: "Sub", Name: "d", Inputs: []string{"s", "k"}, Outputs: []string{"d"}},
			{Op: "Mul", Name: "g", Inputs: []string{"e", "d"}, Outputs: []string{"g"}},
			{Op: "Add", Name: "m", Inputs: []string{"g", "f"}, Outputs: []string{"m"}},
		},
	}
	rt, err := New()
	if err != nil {
		t.Fatal(err)
	}
	const w, h = 29, 7
	x := make([]float32, 3*w*h)
	for i := range x {
		x[i] = float32(i%37)/3 - 6
	}
	run := func(g *graph, floatType int) []float32 {
		types, err := typeGraph(g, floatType, false)
		if err != nil {
			t.Fatal(err)
		}
		y := make([]float32, 3*w*h)
		if err := (&network{rt: rt, g: g, t: types, threads: 2}).Run(context.Background(), x, w, h, y); err != nil {
			t.Fatal(err)
		}
		return y
	}
	gates := func(g *graph) (n int) {
		for _, l := range g.layers {
			if l.gate != nil {
				n++
			}
		}
		return n
	}
	for name, nodes := range gated {
		g := mustCompile(t, model(nodes...), nil)
		if gates(g) != 1 {
			t.Errorf("%s: %d gates, want 1", name, gates(g))
			continue
		}
		asSteps := *g
		asSteps.layers = slices.Clone(g.layers)
		for i := range asSteps.layers {
			asSteps.layers[i].gate = nil
		}
		for _, floatType := range []int{f32, bf16} {
			if got, want := run(g, floatType), run(&asSteps, floatType); !slices.Equal(got, want) {
				t.Errorf("%s, type %d: the gate's result differs from its program's", name, floatType)
			}
		}
	}
	for name, nodes := range steps {
		if g := mustCompile(t, model(nodes...), nil); gates(g) != 0 {
			t.Errorf("%s: %d gates, want none", name, gates(g))
		}
	}
}

// TestChannelProductFused: an INT8 twin of SPAN ×2 with every inner
// convolution quantised scales what each reads channel by channel (a Mul
// by a value a channel before its QuantizeLinear). Where that Mul alone
// reads a convolution's result, the product is fused into the
// convolution, so that in INT8 one int8 convolution writes the next one's
// uint8 input itself, with no pass between; and into the Concat, which
// then writes the uint8 the 1×1 convolution after it reads. The fused
// multipliers hold in
// every precision: on photo tiles the twin run in float32 (its weights
// quantised, what it reads not: 52-59 dB from the float network here) and
// in INT8 (46-52 dB) stays above the floor a twin must keep; with the
// multipliers left out, both measured 29-33 dB.
func TestChannelProductFused(t *testing.T) {
	net := onnxtest.SPAN(t, 2)
	q, err := ncnn2onnx.NewQuantization(net, onnxtest.CalibrationDir(t), 64, nil)
	if err != nil {
		t.Fatal(err)
	}
	twin, _, err := ncnn2onnx.Convert(net, "span", nil, q)
	g := mustCompile(t, twin, err)
	types, err := typeGraph(g, bf16, true)
	if err != nil {
		t.Fatal(err)
	}
	fused, concats := 0, 0
	for i, l := range g.layers {
		if l.post == nil {
			continue
		}
		if l.kind == concat {
			concats++
			if types.dt[l.out] != u8 || types.copy[l.out] != -1 {
				t.Errorf("%s: writes type %d (copied to %d), want uint8, read as it is", l.name, types.dt[l.out], types.copy[l.out])
			}
			continue
		}
		fused++
		if types.conv[i] != u8 || types.dt[l.out] != u8 || types.copy[l.out] != -1 {
			t.Errorf("%s: runs in type %d and writes type %d (copied to %d), want uint8 from uint8, read as it is", l.name, types.conv[i], types.dt[l.out], types.copy[l.out])
		}
	}
	if fused != 11 || concats != 1 {
		t.Errorf("%d convolutions and %d concats carry a fused product, want 11 (the first two of each block's three, but the sixth's first, whose result the Concat reads too) and the Concat", fused, concats)
	}
	gates := 0
	for _, l := range g.layers {
		if l.gate != nil {
			gates++
		}
	}
	if gates != 6 {
		t.Errorf("%d attention passes run as gates, want 6: each block's, the last's with the scaling for conv_2 that alone reads it", gates)
	}

	rt, err := New()
	if err != nil {
		t.Fatal(err)
	}
	float, _, err := ncnn2onnx.Convert(net, "span", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	run := func(model []byte, precision onnx.Precision) [][]float32 {
		n, err := rt.Load(model, precision, 2)
		upscaletest.Opened(t, n, err)
		var outs [][]float32
		for _, x := range onnxtest.PhotoTiles(t) {
			out := make([]float32, 3*4*onnxtest.PhotoTileSide*onnxtest.PhotoTileSide)
			if err := n.Run(context.Background(), x, onnxtest.PhotoTileSide, onnxtest.PhotoTileSide, out); err != nil {
				t.Fatal(err)
			}
			outs = append(outs, out)
		}
		return outs
	}
	want := run(float.Marshal(), onnx.FP32)
	for _, tc := range []struct {
		precision onnx.Precision
		least     float64
	}{{onnx.FP32, onnx.TwinFloor}, {onnx.INT8, onnx.TwinFloor}} {
		for i, got := range run(twin.Marshal(), tc.precision) {
			if d := onnx.TilePSNR(got, want[i]); !(d >= tc.least) {
				t.Errorf("the twin in %s, tile %d: %.1f dB from the float network, want at least %.0f", tc.precision, i, d, tc.least)
			}
		}
	}
}

// TestInnerRowsLeftOut: SPAN ×2 on a tile whose result's first and last
// 42 rows (its halo of 21 source rows, doubled) are left out makes, of
// each 3×3 convolution's value, one row fewer above and below than the
// convolution before it reads: from all but the input's first and last
// row (conv_1) to the 2 × 21 fewer that the pixel shuffle spreads over
// the rows kept (the upsampler). Run so, it leaves the result's rows in
// the margin as they were and makes the rest as Run does
// (onnxtest.InnerMatches).
func TestInnerRowsLeftOut(t *testing.T) {
	g := compiledSPAN(t)
	types, err := typeGraph(g, f32, false)
	if err != nil {
		t.Fatal(err)
	}
	const w, h, margin = 50, 46, 42
	p, err := newPlan(g, types, w, h, margin, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer p.free()
	var made []int // rows made by each 3×3 convolution
	for _, l := range g.layers {
		switch {
		case l.kind == convolution && l.k == 3:
			made = append(made, p.rows[l.out].end-p.rows[l.out].first)
		case l.kind == transposed:
			made = append(made, p.rows[l.phase].end-p.rows[l.phase].first)
		}
	}
	if len(made) != 21 {
		t.Fatalf("%d 3×3 convolutions, want SPAN's 21", len(made))
	}
	for i, rows := range made {
		if want := h - 2*(i+1); rows != want {
			t.Errorf("3×3 convolution %d makes %d rows, want %d: %v", i+1, rows, want, made)
		}
	}

	rt, err := New()
	if err != nil {
		t.Fatal(err)
	}
	n := &network{rt: rt, g: g, t: types, threads: 2}
	x := onnxtest.PhotoCrop(t, w, h)
	want, got := make([]float32, 3*4*w*h), make([]float32, 3*4*w*h)
	if err := n.Run(context.Background(), x, w, h, want); err != nil {
		t.Fatal(err)
	}
	left := float32(math.NaN())
	for i := range got {
		got[i] = left
	}
	if err := n.RunInner(context.Background(), x, w, h, got, margin); err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		if row := i / (2 * w) % (2 * h); (row < margin || row >= 2*h-margin) != math.IsNaN(float64(v)) {
			t.Fatalf("result row %d of %d with a margin of %d: %v", row, 2*h, margin, v)
		}
	}
	onnxtest.InnerMatches(t, n, x, w, h, want, 2*w)
}
