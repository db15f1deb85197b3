package onnx

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/engine/onnx/models"
	"github.com/upscalekit/upscale/internal/ncnn"
	"github.com/upscalekit/upscale/internal/ncnn2onnx"
	"github.com/upscalekit/upscale/internal/onnxpb"
)

// A Model is a super-resolution network the operator brings
// (docs/engines.md): SPAN, Real-ESRGAN's compact networks, or any network
// of the layers internal/ncnn reads. The engine reads and converts it in
// New, runs it tiled with its receptive field around each tile, and
// makes passes with it where a Rule picks it; Image.Engine names it.
type Model struct {
	// Name names the network in Image.Engine, in Rules and, when
	// Published, in a request's model field: 1 to 64 letters, digits,
	// '.', '_' or '-', not "cunet" or "upconv7".
	Name string
	// Param is its ncnn .param file, with its weights in the .bin file
	// beside it. Its scale and receptive field are measured from its
	// layers as it is converted.
	Param string
	// ONNX is instead an ONNX file: one input, NCHW float32 RGB in 0-1 of
	// any size, and one output, the same enlarged, in the operators the
	// runtime runs (those ncnn2onnx writes for the layers internal/ncnn
	// reads). Its geometry is read from its metadata where it has
	// upscale.scale (then also upscale.border, upscale.multiple,
	// upscale.min_input, and upscale.halo for a network that keeps its
	// borders, as ncnn2onnx writes them), or, where it has none, measured
	// at New: ×2 or ×4, its borders kept, any size.
	ONNX string
	// Published lets callers ask for the network by Name (upscale.Params
	// .Model). An unpublished network runs only where a Rule picks it.
	Published bool
	// Runtime runs it, in Precision: nil means the engine's. A runtime
	// runs some networks faster than another does, or cannot run them:
	// MeasureModel times the candidates on the network itself.
	Runtime Runtime
	// Precision is its arithmetic, one the runtime offers: FP32 (the
	// default) or BF16, on the network as converted, or INT8 on its
	// twin.
	Precision Precision
	// INT8 is its INT8 twin, the ONNX file MakeTwin makes of Param
	// (cmd/int8twin): the same network with the convolutions that
	// quantise well in 8-bit integers, within its target of float32 on
	// its calibration tiles (TwinOptions.Target, 48 dB by default), or
	// at least TwinFloor. Precision INT8 runs it;
	// without a twin, INT8 is refused.
	INT8 string
	// Tile is the side of its tiles, in source pixels, where its memory
	// or its speed needs another than the engine's. Zero means
	// Options.Tile where set, else the runtime's Tile(), twice that for a
	// network with a halo. Never under 12 times its halo.
	Tile int
}

// A Rule picks a Model for a learned pass: the first Rule that matches a
// pass, and whose network fits the scale left and the time left, makes
// it; a pass no Rule's network makes is the architectures' (cunet, then
// upconv7), as it is without Rules. Each empty field matches anything.
type Rule struct {
	// Model is the Name of one of Options.Models.
	Model string
	// ImageType is the request's imageType.
	ImageType upscale.ImageType
	// Denoise lists the levels the engine settles on for the source
	// (fitLevel: none for a clean source, whatever the request allowed).
	// A pass after the first, which denoises nothing, is at none.
	Denoise []upscale.Denoise
	// Scales are the request's scales.
	Scales []int
}

// matches reports whether r picks its network for a pass of a request
// of imageType and scale, denoising at level.
func (r Rule) matches(imageType upscale.ImageType, level upscale.Denoise, scale int) bool {
	return (r.ImageType == "" || r.ImageType == imageType) &&
		(len(r.Denoise) == 0 || slices.Contains(r.Denoise, level)) &&
		(len(r.Scales) == 0 || slices.Contains(r.Scales, scale))
}

var modelName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// bring reads, converts and checks each of models, and the rules that
// name them: a network that cannot be read, holds a layer that is not
// implemented, or that the runtime cannot run, is refused here with a
// sentence naming it and why, never at a request.
func (e *Engine) bring(brought []Model, rules []Rule) error {
	byName := map[string]*arch{}
	for i, m := range brought {
		where := fmt.Sprintf("onnx: Options.Models[%d] %q", i, m.Name)
		switch {
		case !modelName.MatchString(m.Name):
			return fmt.Errorf("%s: a name is 1 to 64 letters, digits, '.', '_' or '-'", where)
		case slices.Contains([]Architecture{CUNet, UpConv7}, Architecture(m.Name)) || byName[m.Name] != nil:
			return fmt.Errorf("%s: the name is taken", where)
		case m.Tile < 0:
			return fmt.Errorf("%s: tile %d: a tile's side is a number of pixels, or 0 for the engine's", where, m.Tile)
		}
		rt, precision := cmp.Or[Runtime](m.Runtime, e.opts.Runtime), cmp.Or(m.Precision, FP32)
		if !slices.Contains(m.Precisions(), precision) || !slices.Contains(rt.Precisions(), precision) {
			return fmt.Errorf("%s: precision %q: %s runs it in %s%s", where, precision, rt.Name(), joinPrecisions(m.offeredBy(rt)), m.withoutTwin(precision))
		}
		n, err := loadModel(context.Background(), rt, m, precision)
		if err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		if n.Scale != 2 && n.Scale != 4 {
			return fmt.Errorf("%s: it enlarges ×%d; the engine makes passes of ×2 and ×4", where, n.Scale)
		}
		mod := &model{Network: n, precision: precision, runtime: rt, ownTile: m.Tile}
		if err := e.check(mod); err != nil {
			return fmt.Errorf("%s: %s cannot run it in %s: %w", where, mod.runtime.Name(), mod.precision, err)
		}
		a := &arch{name: Architecture(m.Name), models: map[upscale.Denoise]*model{}}
		for level := range levelNames {
			a.models[level] = mod // it denoises nothing: the same network at every level
		}
		byName[m.Name] = a
		e.brought = append(e.brought, a)
		if m.Published {
			e.published = append(e.published, upscale.PublishedModel{Name: m.Name, Scale: n.Scale})
		}
	}
	for i, r := range rules {
		a := byName[r.Model]
		if a == nil {
			return fmt.Errorf("onnx: Options.Rules[%d]: no model %q in Options.Models", i, r.Model)
		}
		for _, s := range r.Scales {
			if !slices.Contains(upscale.Scales(), s) {
				return fmt.Errorf("onnx: Options.Rules[%d]: scale %d is not one of %v", i, s, upscale.Scales())
			}
		}
		for _, d := range r.Denoise {
			if !slices.Contains(upscale.DenoiseLevels(), d) {
				return fmt.Errorf("onnx: Options.Rules[%d]: denoise %q is not one of %v", i, d, upscale.DenoiseLevels())
			}
		}
		e.rules = append(e.rules, rule{Rule: r, arch: a})
	}
	return nil
}

// rule is a Rule with its network.
type rule struct {
	Rule
	arch *arch
}

// loadModel reads m's network for precision: for INT8 its twin, checked
// against the network; else its ncnn files converted in float32, or its
// ONNX file, whose geometry rt measures if it does not say it.
func loadModel(ctx context.Context, rt Runtime, m Model, precision Precision) (*models.Network, error) {
	n, digest, err := loadFloat(ctx, rt, m)
	if err != nil || precision != INT8 {
		return n, err
	}
	return loadTwin(ctx, rt, m, n, digest)
}

// loadTwin reads m's INT8 twin and checks it is n's, m's network read in
// float32: of the same geometry, and for ncnn files made of those files,
// whose digest loadFloat read (MakeTwin records it).
func loadTwin(ctx context.Context, rt Runtime, m Model, n *models.Network, digest string) (*models.Network, error) {
	twin, err := readONNX(ctx, rt, Model{Name: m.Name, ONNX: m.INT8})
	if err != nil {
		return nil, fmt.Errorf("its INT8 twin: %w", err)
	}
	if twin.Scale != n.Scale || twin.Border != n.Border || twin.Multiple != n.Multiple || twin.MinInput != n.MinInput || twin.Halo != n.Halo {
		return nil, fmt.Errorf("its INT8 twin %s enlarges ×%d reading %d pixels around, the network ×%d reading %d: the twin of another network; make it again (cmd/int8twin)", m.INT8, twin.Scale, twin.Margin(), n.Scale, n.Margin())
	}
	if m.Param == "" {
		return twin, nil
	}
	file, err := onnxpb.Unmarshal(twin.Data)
	if err != nil {
		return nil, err
	}
	if got, _ := file.MetadataValue(twinOf); got != digest {
		return nil, fmt.Errorf("its INT8 twin %s was not made of %s and the .bin beside it as they are now; make it again (cmd/int8twin)", m.INT8, m.Param)
	}
	return twin, nil
}

// loadFloat reads m's network as loadModel does, in float32, with the
// digest of its ncnn files (readNet; empty for an ONNX file).
func loadFloat(ctx context.Context, rt Runtime, m Model) (*models.Network, string, error) {
	switch {
	case m.Param != "" && m.ONNX != "":
		return nil, "", errors.New("both a Param and an ONNX file: give one")
	case m.ONNX != "":
		n, err := readONNX(ctx, rt, m)
		return n, "", err
	}
	net, digest, err := readNet(m.Param)
	if err != nil {
		return nil, "", err
	}
	n, err := convertNet(net, m, nil)
	return n, digest, err
}

// readNet reads the ncnn network of a .param file and the .bin beside it,
// and their SHA-256 in hex: what a twin records it was made of (twinOf).
func readNet(paramPath string) (*ncnn.Net, string, error) {
	if paramPath == "" {
		return nil, "", errors.New("no Param or ONNX file")
	}
	param, err := os.ReadFile(paramPath)
	if err != nil {
		return nil, "", err
	}
	bin, err := os.ReadFile(strings.TrimSuffix(paramPath, filepath.Ext(paramPath)) + ".bin")
	if err != nil {
		return nil, "", fmt.Errorf("its weights: %w", err)
	}
	net, err := ncnn.Parse(param, bin)
	if err != nil {
		return nil, "", err
	}
	h := sha256.New()
	h.Write(param)
	h.Write(bin)
	return net, hex.EncodeToString(h.Sum(nil)), nil
}

// convertNet converts m's network net, in INT8 with q, its metadata
// naming m.Param as its source, and meta.
func convertNet(net *ncnn.Net, m Model, q *ncnn2onnx.Quantization, meta ...[2]string) (*models.Network, error) {
	onnx, g, err := ncnn2onnx.Convert(net, m.Name, append([][2]string{{"upscale.source", m.Param}}, meta...), q)
	if err != nil {
		return nil, err
	}
	return &models.Network{Name: m.Name, Data: onnx.Marshal(), Scale: g.Scale, Border: g.Border, Multiple: g.Multiple, MinInput: g.MinInput, Halo: g.Halo, Source: m.Param}, nil
}

// check loads mod on the engine's runtime and runs it on one small tile,
// so that an operator it cannot run is found at start.
func (e *Engine) check(mod *model) error {
	network, err := e.open(mod)
	if err != nil {
		return err
	}
	side := max(mod.MinInput, 2*mod.Margin()+mod.Multiple)
	side = (side + mod.Multiple - 1) / mod.Multiple * mod.Multiple
	t := tiling{tileW: side - 2*mod.Margin(), tileH: side - 2*mod.Margin()}
	inW, inH, outW, outH := mod.tileInput(t)
	in, out := make([]float32, 3*inW*inH), make([]float32, 3*outW*outH)
	return network.Run(context.Background(), in, inW, inH, out)
}

// BroughtPrecisions are what a brought network runs in, as converted:
// its float32 weights, which oneDNN's BF16 rounds as it runs them. One
// with an INT8 twin (Model.INT8) runs in INT8 too.
var BroughtPrecisions = []Precision{FP32, BF16}

// Precisions are what m runs in: BroughtPrecisions, and INT8 with a twin.
func (m Model) Precisions() []Precision {
	ps := slices.Clone(BroughtPrecisions)
	if m.INT8 != "" {
		ps = append(ps, INT8)
	}
	return ps
}

// offeredBy is what rt runs m in.
func (m Model) offeredBy(rt Runtime) []Precision {
	return slices.DeleteFunc(slices.Clone(rt.Precisions()), func(p Precision) bool { return !slices.Contains(m.Precisions(), p) })
}

// withoutTwin explains, for INT8 asked of m without a twin, where one
// comes from.
func (m Model) withoutTwin(p Precision) string {
	if p == INT8 && m.INT8 == "" {
		return "; INT8 needs its INT8 twin (Model.INT8), which MakeTwin makes"
	}
	return ""
}

// MeasureModel times m, a network to bring, on each of candidates (a
// precision the network has no form for fails) as Measure times cunet:
// the timings fastest first, those that cannot run it (a runtime without
// one of its operators) last, each with its error. The standalone runs
// each brought network on its fastest.
func MeasureModel(ctx context.Context, candidates []Candidate, m Model, threads int) ([]Timing, error) {
	// The network is read (an ONNX file's geometry measured) on the first
	// runtime that can run it.
	var n *models.Network
	var digest string
	var err error
	for _, c := range candidates {
		if n, digest, err = loadFloat(ctx, c.Runtime, m); err == nil || ctx.Err() != nil {
			break
		}
	}
	if n == nil {
		return nil, cmp.Or(err, errors.New("onnx: no candidates to measure"))
	}
	// A twin that is not the network's is the operator's mistake, not a
	// runtime's: it fails the measure.
	var twin *models.Network
	if m.INT8 != "" && slices.ContainsFunc(candidates, func(c Candidate) bool { return c.Precision == INT8 }) {
		if twin, err = loadTwin(ctx, candidates[0].Runtime, m, n, digest); err != nil {
			return nil, err
		}
	}
	runs := m.Precisions()
	return measure(ctx, candidates, threads, func(c Candidate) (*model, error) {
		switch {
		case !slices.Contains(runs, c.Precision):
			return nil, fmt.Errorf("it runs in %s, not %s%s", joinPrecisions(runs), c.Precision, m.withoutTwin(c.Precision))
		case c.Precision == INT8:
			return &model{Network: twin, ownTile: m.Tile}, nil
		}
		return &model{Network: n, ownTile: m.Tile}, nil
	})
}

// PublishedModels implements upscale.ModelPublisher: the networks
// callers may ask for by name (Model.Published), in the order of
// Options.Models. The list is the engine's own, made once in New: the
// caller must not change it.
func (e *Engine) PublishedModels() []upscale.PublishedModel { return e.published }
