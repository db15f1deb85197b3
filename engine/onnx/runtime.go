package onnx

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	ort "github.com/yalue/onnxruntime_go"
)

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
