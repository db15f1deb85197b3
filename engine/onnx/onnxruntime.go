package onnx

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	ort "github.com/yalue/onnxruntime_go"
	"golang.org/x/sys/cpu"
)

// ONNXRuntime runs the networks on ONNX Runtime's CPU provider.
type ONNXRuntime struct{}

var _ Runtime = (*ONNXRuntime)(nil)

// NewONNXRuntime loads ONNX Runtime from library: its path, or empty for
// the LibraryEnv environment variable, else DefaultLibrary(). The library
// is loaded once per process; a later call must name the same one.
func NewONNXRuntime(library string) (*ONNXRuntime, error) {
	if err := loadRuntime(libraryPath(library)); err != nil {
		return nil, err
	}
	return &ONNXRuntime{}, nil
}

// Name is "onnxruntime".
func (*ONNXRuntime) Name() string { return "onnxruntime" }

// Precisions puts INT8 first on a CPU with VNNI (x86-64's AVX-512 VNNI or
// AVX-VNNI), where ONNX Runtime multiplies uint8 by int8 exactly, and FP32
// first elsewhere: without VNNI its x86 kernels may saturate their
// intermediate sums (ONNX Runtime's quantisation documentation), and INT8
// was measured only on a VNNI CPU.
func (*ONNXRuntime) Precisions() []Precision {
	if cpu.X86.HasAVX512VNNI || cpu.X86.HasAVXVNNI {
		return []Precision{INT8, FP32}
	}
	return []Precision{FP32, INT8}
}

// Tile is 128: tiles of 192 were as fast and took 337 MiB at their peak
// for a ×2 of 1024², tiles of 256 were slower and took 507 MiB
// (BENCHMARKS.md).
func (*ONNXRuntime) Tile() int { return 128 }

// Load creates an ONNX Runtime session for model. One image's tiles run
// one after another, each on every thread the engine gives it; a second
// thread pool for independent operators would only compete with it. The
// memory pattern (one block planned for all of a run's intermediate
// tensors) is off: it took a ×2 of a 1024² source from 357 to 432 MB at
// its peak and was no faster. The model's one input and one output may
// have any names (ncnn2onnx's are input and output).
func (*ONNXRuntime) Load(model []byte, _ Precision, threads int) (Network, error) {
	inputs, outputs, err := ort.GetInputOutputInfoWithONNXData(model)
	if err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	if len(inputs) != 1 || len(outputs) != 1 {
		return nil, fmt.Errorf("onnx: the network has %d inputs and %d outputs, not one of each", len(inputs), len(outputs))
	}
	opts, err := ort.NewSessionOptions()
	if err != nil {
		return nil, fmt.Errorf("onnx: session options: %w", err)
	}
	defer opts.Destroy()
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
	session, err := ort.NewDynamicAdvancedSessionWithONNXData(model, []string{inputs[0].Name}, []string{outputs[0].Name}, opts)
	if err != nil {
		return nil, err
	}
	return ortNetwork{session}, nil
}

// ortNetwork is a session, which ONNX Runtime runs concurrently.
type ortNetwork struct{ session *ort.DynamicAdvancedSession }

func (n ortNetwork) Run(ctx context.Context, in []float32, w, h int, out []float32) error {
	input, err := ort.NewTensor(ort.NewShape(1, 3, int64(h), int64(w)), in)
	if err != nil {
		return fmt.Errorf("input tensor: %w", err)
	}
	defer input.Destroy()
	runOpts, err := ort.NewRunOptions()
	if err != nil {
		return fmt.Errorf("run options: %w", err)
	}
	// Once ctx is done, the run is told to stop. The options are
	// destroyed only after that call has returned: stop reports false
	// when it has begun.
	terminated := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(terminated)
		runOpts.Terminate()
	})
	defer func() {
		if !stop() {
			<-terminated
		}
		runOpts.Destroy()
	}()
	outputs := []ort.Value{nil} // ONNX Runtime sizes it
	if err := n.session.RunWithOptions([]ort.Value{input}, outputs, runOpts); err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return ctxErr
		}
		return err
	}
	defer outputs[0].Destroy()
	y := outputs[0].(*ort.Tensor[float32]).GetData()
	if len(y) != len(out) {
		return fmt.Errorf("the network made %d samples of a %d×%d tile, want %d", len(y), w, h, len(out))
	}
	copy(out, y)
	return nil
}

func (n ortNetwork) Close() error { return n.session.Destroy() }

// RuntimeVersion is the ONNX Runtime release the engine is built and
// tested against: onnxruntime_go v1.27.0 speaks its C API (version 24),
// which every 1.24.x library offers.
const RuntimeVersion = "1.24.1"

// LibraryEnv names the environment variable that, when Options.Library is
// empty, gives the path of libonnxruntime.so.1.
const LibraryEnv = "UPSCALE_ONNXRUNTIME_LIB"

// DefaultLibrary is where `make deps` installs the library:
// ~/.cache/upscale-tools/onnxruntime-1.24.1/libonnxruntime.so.1.
func DefaultLibrary() string {
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".cache", "upscale-tools", "onnxruntime-"+RuntimeVersion, "libonnxruntime.so.1")
}

// libraryPath resolves Options.Library: the option, else the environment
// variable, else DefaultLibrary.
func libraryPath(option string) string {
	if option != "" {
		return option
	}
	if env := os.Getenv(LibraryEnv); env != "" {
		return env
	}
	return DefaultLibrary()
}

// ONNX Runtime keeps one environment per process, loaded from one library.
var runtimeState struct {
	sync.Mutex
	path string // the library loaded, once it is
}

// loadRuntime loads the library at path and starts ONNX Runtime, once per
// process; a later call must name the same library. The checks before
// dlopen turn the common mistakes (no file, a directory, a file that is
// not a shared library) into errors that say what to do; onnxruntime_go
// turns a library of another API version into an error too.
func loadRuntime(path string) error {
	runtimeState.Lock()
	defer runtimeState.Unlock()
	if runtimeState.path != "" {
		if runtimeState.path != path {
			return fmt.Errorf("onnx: ONNX Runtime is already loaded from %s in this process; cannot load %s as well", runtimeState.path, path)
		}
		return nil
	}
	hint := fmt.Sprintf("install ONNX Runtime %s with `make deps`, or give its libonnxruntime.so.1 in Options.Library or %s", RuntimeVersion, LibraryEnv)
	info, err := os.Stat(path)
	switch {
	case path == "":
		return fmt.Errorf("onnx: no ONNX Runtime library path: %s", hint)
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("onnx: no ONNX Runtime library at %s: %s", path, hint)
	case err != nil:
		return fmt.Errorf("onnx: ONNX Runtime library %s: %w", path, err)
	case !info.Mode().IsRegular():
		return fmt.Errorf("onnx: ONNX Runtime library %s is not a file: %s", path, hint)
	}
	ort.SetSharedLibraryPath(path)
	if err := ort.InitializeEnvironment(ort.WithLogLevelError()); err != nil {
		return fmt.Errorf("onnx: cannot start ONNX Runtime from %s (want version %s): %w; %s", path, RuntimeVersion, err, hint)
	}
	runtimeState.path = path
	return nil
}
