package main

import (
	"embed"
	"io/fs"
	"net/http"
)

// The demo images, served at /samples/ and known to the handler as
// built-in sources, so that the banner's request works on a machine with
// no internet access without letting sources reach private addresses:
// photo.png is "butterfly" from Set5, lineart.png is "comic" from Set14,
// the super-resolution benchmarks the tests also use.
//
//go:embed samples/*.png
var sampleFiles embed.FS

var samples, _ = fs.Sub(sampleFiles, "samples")

// builtinSamples maps each sample's URL under publicURL to its bytes.
func builtinSamples(publicURL string) (map[string][]byte, error) {
	entries, err := fs.ReadDir(samples, ".")
	if err != nil {
		return nil, err
	}
	builtin := make(map[string][]byte, len(entries))
	for _, e := range entries {
		data, err := fs.ReadFile(samples, e.Name())
		if err != nil {
			return nil, err
		}
		builtin[sampleURL(publicURL, e.Name())] = data
	}
	return builtin, nil
}

func sampleURL(publicURL, name string) string { return publicURL + "/samples/" + name }

// sampleHandler serves the samples for people to look at.
func sampleHandler() http.Handler {
	return http.StripPrefix("/samples/", http.FileServerFS(samples))
}
