package onnx

import (
	"embed"
	"fmt"
	"strconv"
	"sync"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/upscalekit/upscale"
)

// The converted models, written by `make models` (cmd/ncnn2onnx) from the
// waifu2x ncnn models; models/README.md records their source and licence.
//
//go:embed models/*.onnx
var modelFiles embed.FS

// model is one network the engine runs: its file, and the geometry that
// ncnn2onnx measured and stored in its metadata.
type model struct {
	file string
	// scale: the output is Scale × (input − 2 × Border) on each side; input
	// sides are a multiple of Multiple and at least MinInput.
	scale, border, multiple, minInput int
	// source names the original ncnn model (upscale.source).
	source string

	mu      sync.Mutex
	session *ort.DynamicAdvancedSession
}

// open creates the model's session on first use; it is shared by every
// image, since ONNX Runtime sessions run concurrently. A failure is not
// kept: it wraps upscale.ErrUpstream (502, retrying is safe), and the
// next image tries again, so a transient one (memory, say) does not last
// as long as the process.
func (m *model) open(threads int) (*ort.DynamicAdvancedSession, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.session != nil {
		return m.session, nil
	}
	session, err := m.load(threads)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", upscale.ErrUpstream, err)
	}
	m.session = session
	return session, nil
}

func (m *model) load(threads int) (*ort.DynamicAdvancedSession, error) {
	data, err := modelFiles.ReadFile("models/" + m.file)
	if err != nil {
		return nil, fmt.Errorf("onnx: model %s: %w", m.file, err)
	}
	if err := m.readGeometry(data); err != nil {
		return nil, err
	}
	opts, err := ort.NewSessionOptions()
	if err != nil {
		return nil, fmt.Errorf("onnx: session options: %w", err)
	}
	defer opts.Destroy()
	// One image's tiles run one after another, each on every thread the
	// engine gives it; a second thread pool for independent operators
	// would only compete with it. The memory pattern (one block planned
	// for all of a run's intermediate tensors) is off: it took a ×2 of a
	// 1024² source from 357 to 432 MB at its peak and was no faster.
	for _, set := range []func() error{
		func() error { return opts.SetIntraOpNumThreads(threads) },
		func() error { return opts.SetInterOpNumThreads(1) },
		func() error { return opts.SetExecutionMode(ort.ExecutionModeSequential) },
		func() error { return opts.SetGraphOptimizationLevel(ort.GraphOptimizationLevelEnableAll) },
		func() error { return opts.SetMemPattern(false) },
	} {
		if err := set(); err != nil {
			return nil, fmt.Errorf("onnx: session options: %w", err)
		}
	}
	session, err := ort.NewDynamicAdvancedSessionWithONNXData(data, []string{"input"}, []string{"output"}, opts)
	if err != nil {
		return nil, fmt.Errorf("onnx: load model %s: %w", m.file, err)
	}
	return session, nil
}

// readGeometry reads the upscale.* metadata that ncnn2onnx wrote.
func (m *model) readGeometry(data []byte) error {
	meta, err := ort.GetModelMetadataWithONNXData(data)
	if err != nil {
		return fmt.Errorf("onnx: model %s: metadata: %w", m.file, err)
	}
	defer meta.Destroy()
	for key, dest := range map[string]*int{"scale": &m.scale, "border": &m.border, "multiple": &m.multiple, "min_input": &m.minInput} {
		v, ok, err := meta.LookupCustomMetadataMap("upscale." + key)
		if err != nil || !ok {
			return fmt.Errorf("onnx: model %s has no upscale.%s metadata (%v)", m.file, key, err)
		}
		if *dest, err = strconv.Atoi(v); err != nil || *dest < 0 || (*dest == 0 && key != "border") {
			return fmt.Errorf("onnx: model %s: upscale.%s = %q", m.file, key, v)
		}
	}
	source, _, err := meta.LookupCustomMetadataMap("upscale.source")
	if err != nil {
		return fmt.Errorf("onnx: model %s: metadata: %w", m.file, err)
	}
	m.source = source
	return nil
}

// close destroys the session, if one was made.
func (m *model) close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.session == nil {
		return nil
	}
	err := m.session.Destroy()
	m.session = nil
	return err
}
