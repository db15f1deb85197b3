package onnx

import (
	"fmt"
	"sync"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/engine/onnx/models"
)

// model is one network the engine runs: its file and geometry, and the
// runtime's network, loaded on first use.
type model struct {
	*models.Network
	// A brought network's own runtime and precision; nil and empty: the
	// engine's.
	runtime   Runtime
	precision Precision
	ownTile   int // Model.Tile; zero for the engine's

	mu      sync.Mutex
	network Network
}

// open loads the model on first use; it is shared by every image, since
// a Network runs concurrently. A failure is not kept: it wraps
// upscale.ErrUpstream (502, retrying is safe), and the next image tries
// again, so a transient one (memory, say) does not last as long as the
// process.
func (m *model) open(runtime Runtime, precision Precision, threads int) (Network, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.network != nil {
		return m.network, nil
	}
	network, err := runtime.Load(m.Data, precision, threads)
	if err != nil {
		return nil, fmt.Errorf("%w: onnx: load model %s on %s: %v", upscale.ErrUpstream, m.Name, runtime.Name(), err)
	}
	m.network = network
	return network, nil
}

// close releases the network, if it was loaded.
func (m *model) close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.network == nil {
		return nil
	}
	err := m.network.Close()
	m.network = nil
	return err
}
