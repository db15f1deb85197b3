// Package models holds the waifu2x networks that engine/onnx runs,
// written by `make models` (cmd/ncnn2onnx) from the waifu2x ncnn models;
// README.md beside this file records their source and licence.
package models

import (
	"embed"
	"fmt"
	"strconv"

	"github.com/upscalekit/upscale/internal/onnxpb"
)

//go:embed *.onnx
var files embed.FS

// Network is one embedded network: its ONNX file, and the geometry that
// ncnn2onnx measured and stored in its metadata.
type Network struct {
	Name string
	Data []byte
	// The output is Scale × (input − 2 × Border) on each side; input
	// sides are a multiple of Multiple and at least MinInput.
	Scale, Border, Multiple, MinInput int
	// Halo is how far a network that keeps its size reads around each
	// pixel (upscale.halo; none in waifu2x's): a tile is read with it
	// around, and its result cut by Halo × Scale on each side.
	Halo int
	// Source names the original ncnn model (upscale.source).
	Source string
}

// Load reads the embedded network name, such as "cunet-scale2x.onnx".
func Load(name string) (*Network, error) {
	data, err := files.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("models: %w", err)
	}
	return Parse(name, data)
}

// Parse reads the network of an ONNX file that ncnn2onnx made, named
// name.
func Parse(name string, data []byte) (*Network, error) {
	file, err := onnxpb.Unmarshal(data)
	if err != nil {
		return nil, fmt.Errorf("models: %s: %w", name, err)
	}
	n := &Network{Name: name, Data: data}
	for key, dest := range map[string]*int{"scale": &n.Scale, "border": &n.Border, "multiple": &n.Multiple, "min_input": &n.MinInput} {
		v, ok := file.MetadataValue("upscale." + key)
		if !ok {
			return nil, fmt.Errorf("models: %s has no upscale.%s metadata", name, key)
		}
		if *dest, err = strconv.Atoi(v); err != nil || *dest < 0 || (*dest == 0 && key != "border") {
			return nil, fmt.Errorf("models: %s: upscale.%s = %q", name, key, v)
		}
	}
	if v, ok := file.MetadataValue("upscale.halo"); ok {
		if n.Halo, err = strconv.Atoi(v); err != nil || n.Halo < 0 {
			return nil, fmt.Errorf("models: %s: upscale.halo = %q", name, v)
		}
	}
	n.Source, _ = file.MetadataValue("upscale.source")
	return n, nil
}

// Margin is how many pixels a tile is read with around it: the border
// the network loses, and its halo.
func (n *Network) Margin() int { return n.Border + n.Halo }

// OutputSize is the side of the network's output for an input side.
func (n *Network) OutputSize(input int) int { return n.Scale * (input - 2*n.Border) }
