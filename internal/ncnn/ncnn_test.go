package ncnn_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/upscalekit/upscale/internal/ncnn"
)

// weights encodes arrays as a .bin file: each tagged (float32 behind a
// zero tag, as ncnn writes unquantised weights) or raw.
func weights(arrays ...[]float32) []byte {
	var b bytes.Buffer
	for _, a := range arrays {
		binary.Write(&b, binary.LittleEndian, a)
	}
	return b.Bytes()
}

func tag() []float32 { return []float32{0} } // four zero bytes

func param(lines ...string) []byte {
	return []byte("7767517\n" + strings.Join(lines, "\n") + "\n")
}

func run(t *testing.T, p, bin []byte, in *ncnn.Blob) *ncnn.Blob {
	t.Helper()
	net, err := ncnn.Parse(p, bin)
	if err != nil {
		t.Fatal(err)
	}
	out, err := net.Forward(in)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func blob(c, h, w int, v ...float64) *ncnn.Blob {
	return &ncnn.Blob{C: c, H: h, W: w, Data: v}
}

func equal(t *testing.T, got *ncnn.Blob, want *ncnn.Blob) {
	t.Helper()
	if got.C != want.C || got.H != want.H || got.W != want.W {
		t.Fatalf("shape %d×%d×%d, want %d×%d×%d", got.C, got.H, got.W, want.C, want.H, want.W)
	}
	for i := range want.Data {
		if math.Abs(got.Data[i]-want.Data[i]) > 1e-6 {
			t.Fatalf("got %v, want %v", got.Data, want.Data)
		}
	}
}

// TestDeconvolutionLayout: ncnn's deconvolution scatters input pixel (y, x)
// times weight [out][in][ky][kx] into out[y*stride+ky][x*stride+kx], then
// cuts pad from each side.
func TestDeconvolutionLayout(t *testing.T) {
	p := param("2 2",
		"Input in 0 1 data 0=2 1=1 2=1",
		"Deconvolution up 1 1 data out 0=2 1=2 3=2 5=1 6=8")
	// Output channel 0: kernel 1 2 / 3 4; channel 1: 10 20 / 30 40.
	bin := weights(tag(), []float32{1, 2, 3, 4, 10, 20, 30, 40}, []float32{0.5, -1})
	got := run(t, p, bin, blob(1, 1, 2, 1, 2))
	equal(t, got, blob(2, 2, 4,
		1.5, 2.5, 2.5, 4.5, 3.5, 4.5, 6.5, 8.5,
		9, 19, 19, 39, 29, 39, 59, 79))

	p = param("2 2",
		"Input in 0 1 data 0=2 1=2 2=1",
		"Deconvolution up 1 1 data out 0=1 1=3 3=2 4=1 6=9")
	got = run(t, p, weights(tag(), []float32{1, 1, 1, 1, 1, 1, 1, 1, 1}), blob(1, 2, 2, 1, 1, 1, 1))
	// The full 5×5 result counts the kernels covering each pixel: 1 1 2 1 1
	// along each axis (they overlap in the middle); pad 1 cuts one row and
	// column off each side.
	equal(t, got, blob(1, 3, 3, 1, 2, 1, 2, 4, 2, 1, 2, 1))
}

// TestConvolutionAndActivations: a 3×3 convolution is the dot product
// with the window; activation 1 with a slope is LeakyReLU.
func TestConvolutionAndActivations(t *testing.T) {
	p := param("2 2",
		"Input in 0 1 data 0=3 1=3 2=1",
		"Convolution c 1 1 data out 0=2 1=3 5=1 6=18 9=1 -23310=1,0.25")
	kernel := []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, -1, -1, -1, -1, -1, -1, -1, -1, -1}
	got := run(t, p, weights(tag(), kernel, []float32{1, 0}), blob(1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1))
	equal(t, got, blob(2, 1, 1, 46, -9*0.25))
}

// TestGlobalPoolDenseScale: global average pooling, InnerProduct with
// ReLU and sigmoid, and Scale by a second input: cunet's
// squeeze-and-excitation block.
func TestGlobalPoolDenseScale(t *testing.T) {
	p := param("6 7",
		"Input in 0 1 data 0=2 1=1 2=2",
		"Split s 1 2 data a b",
		"Pooling pool 1 1 a pooled 0=1 4=1",
		"InnerProduct fc1 1 1 pooled h 0=1 1=1 2=2 9=1",
		"InnerProduct fc2 1 1 h g 0=2 1=0 2=2 9=4",
		"Scale scale 2 1 b g out 0=-233")
	bin := weights(tag(), []float32{1, 1}, []float32{-1}, tag(), []float32{1, -1})
	// Channel means 2 and 6; fc1: relu(8 - 1) = 7; fc2: sigmoid(7),
	// sigmoid(-7).
	got := run(t, p, bin, blob(2, 1, 2, 1, 3, 5, 7))
	s0, s1 := 1/(1+math.Exp(-7)), 1/(1+math.Exp(7))
	equal(t, got, blob(2, 1, 2, 1*s0, 3*s0, 5*s1, 7*s1))
}

func TestCropAndSum(t *testing.T) {
	p := param("5 6",
		"Input in 0 1 data 0=4 1=4 2=1",
		"Split s 1 2 data a b",
		"Convolution small 1 1 a s2 0=1 1=3 6=9",
		"Crop crop 2 1 b s2 cropped 0=1 1=1",
		"Eltwise sum 2 1 cropped s2 out 0=1")
	in := blob(1, 4, 4, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
	// The 3×3 sum around each inner pixel, plus the pixel.
	got := run(t, p, weights(tag(), []float32{1, 1, 1, 1, 1, 1, 1, 1, 1}), in)
	equal(t, got, blob(1, 2, 2, 45+5, 54+6, 81+9, 90+10))
}

// TestEfficientSRLayers: the layers of SPAN and Real-ESRGAN's compact
// networks, each against its definition: a per-channel constant
// subtracted, a scalar product, Swish and Sigmoid, PReLU, Concat,
// PixelShuffle in PyTorch's order and nearest upsampling.
func TestEfficientSRLayers(t *testing.T) {
	p := param("9 11",
		"Input in 0 1 data",
		"MemoryData mean 0 1 m 0=1 1=1 2=2",
		"BinaryOp sub 2 1 data m centred 0=1",
		"BinaryOp mul 1 1 centred scaled 0=2 1=1 2=2.0",
		"Split s 1 3 scaled a b c",
		"Swish swish 1 1 a sw",
		"Sigmoid sigmoid 1 1 b sg",
		"PReLU prelu 1 1 c pr 0=2",
		"Concat cat 3 1 sw sg pr catted",
		"PixelShuffle shuffle 1 1 catted out 0=1")
	// Channel means 1 and -1; slopes 0.5 and 0.25.
	bin := weights([]float32{1, -1}, []float32{0.5, 0.25})
	got := run(t, p, bin, blob(2, 1, 2, 1, 3, -2, -1))
	// scaled: 2·(x − mean): 0, 4 | −2, 0.
	sig := func(v float64) float64 { return 1 / (1 + math.Exp(-v)) }
	equal(t, got, blob(6, 1, 2,
		0, 4*sig(4), -2*sig(-2), 0,
		sig(0), sig(4), sig(-2), sig(0),
		0, 4, -2*0.25, 0))

	p = param("2 2", "Input in 0 1 data", "PixelShuffle shuffle 1 1 data out 0=2")
	// Channel c·4 + i·2 + j gives output (y·2+i, x·2+j).
	equal(t, run(t, p, nil, blob(4, 1, 1, 1, 2, 3, 4)), blob(1, 2, 2, 1, 2, 3, 4))
	p = param("2 2", "Input in 0 1 data", "Interp up 1 1 data out 0=1 1=2.0 2=2.0")
	equal(t, run(t, p, nil, blob(1, 1, 2, 1, 2)), blob(1, 2, 4, 1, 1, 2, 2, 1, 1, 2, 2))
}

func TestParseRefuses(t *testing.T) {
	conv := "Convolution c 1 1 data out 0=1 1=1 6=1"
	ok := weights(tag(), []float32{1})
	for name, tc := range map[string]struct {
		param []byte
		bin   []byte
		want  string
	}{
		"magic":          {[]byte("7767518\n1 1\n"), nil, "magic"},
		"unknown layer":  {param("2 2", "Input in 0 1 data", "GroupNorm g 1 1 data out"), nil, "layer type GroupNorm is not implemented"},
		"bilinear":       {param("2 2", "Input in 0 1 data", "Interp i 1 1 data out 0=2 1=2.0 2=2.0"), nil, "nearest"},
		"pow":            {param("2 2", "Input in 0 1 data", "BinaryOp b 1 1 data out 0=6 1=1 2=2.0"), nil, "operation 6"},
		"shuffle mode":   {param("2 2", "Input in 0 1 data", "PixelShuffle p 1 1 data out 0=2 1=1"), nil, "PyTorch"},
		"leftover":       {param("2 2", "Input in 0 1 data", conv), weights(tag(), []float32{1, 2}), "left over"},
		"short":          {param("2 2", "Input in 0 1 data", conv), weights(tag()), "ends before"},
		"int8":           {param("2 2", "Input in 0 1 data", conv), append([]byte{0x38, 0x4B, 0x0D, 0}, make([]byte, 4)...), "int8"},
		"dilation":       {param("2 2", "Input in 0 1 data", conv+" 2=2"), ok, "parameter 2"},
		"groups":         {param("2 2", "Input in 0 1 data", conv+" 7=2"), ok, "parameter 7"},
		"max pooling":    {param("2 2", "Input in 0 1 data", "Pooling p 1 1 data out 0=0 4=1"), nil, "global average"},
		"two outputs":    {param("2 3", "Input in 0 1 data", "Split s 1 2 data a b"), nil, "two outputs"},
		"eltwise coeffs": {param("3 3", "Input in 0 1 data", "Split s 1 2 data a b", "Eltwise e 2 1 a b out 0=1 -23301=2,1,1"), nil, "coefficients"},
	} {
		if _, err := ncnn.Parse(tc.param, tc.bin); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one mentioning %q", name, err, tc.want)
		}
	}
}

// TestFloat16Weights: ncnn's half-precision arrays (tag 0x01306B47) are
// read exactly, padded to four bytes.
func TestFloat16Weights(t *testing.T) {
	p := param("2 2", "Input in 0 1 data 0=1 1=1 2=3", "Convolution c 1 1 data out 0=1 1=1 6=3")
	// 1, -2, 2^-24 (the smallest subnormal), then two bytes of padding.
	bin := []byte{0x47, 0x6B, 0x30, 0x01, 0x00, 0x3C, 0x00, 0xC0, 0x01, 0x00, 0, 0}
	got := run(t, p, bin, blob(3, 1, 1, 1, 1, 1<<24))
	equal(t, got, blob(1, 1, 1, 1-2+1))
}

// TestShapes: a strided convolution refuses an input it would floor.
func TestShapes(t *testing.T) {
	net, err := ncnn.Parse(param("2 2", "Input in 0 1 data", "Convolution c 1 1 data out 0=1 1=2 3=2 6=4"), weights(tag(), []float32{1, 1, 1, 1}))
	if err != nil {
		t.Fatal(err)
	}
	if shapes, err := net.Shapes(ncnn.Shape{C: 1, H: 8, W: 6}); err != nil || shapes["out"] != (ncnn.Shape{C: 1, H: 4, W: 3}) {
		t.Errorf("8×6 input: %v, %v; want a 4×3 output", shapes["out"], err)
	}
	if _, err := net.Shapes(ncnn.Shape{C: 1, H: 7, W: 6}); err == nil {
		t.Error("7 rows through a stride-2 kernel of 2: no error")
	}
}
