package main

import (
	"context"
	"embed"
	"io/fs"
	"net/http"
	"sync"
	"time"

	"github.com/upscalekit/upscale"
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

// showcaseSample is the sample the storefront shows enlarged, at
// showcasePath.
const (
	showcaseSample = "photo.png"
	showcasePath   = "/samples/photo-enlarged.png"
)

// showcase serves showcaseSample enlarged ×2 by the server's engine: made
// at its first view, outside the API's admission, memory budget and quota
// (it is one 256×256 image, once a process), and kept. A failure is
// answered 503 and tried again at the next view.
func (p *process) showcase() http.Handler {
	var mu sync.Mutex
	var made *upscale.Image
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if made == nil {
			// Made whatever becomes of the first viewer, who may leave:
			// the others wait for it on mu.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), time.Minute)
			img, err := p.enlargeShowcase(ctx)
			cancel()
			if err != nil {
				p.logger.Warn("standalone: enlarge the storefront's showcase", "err", err)
				http.Error(w, "The sample could not be enlarged just now; reload in a moment.", http.StatusServiceUnavailable)
				return
			}
			made = &img
		}
		w.Header().Set("Content-Type", made.ContentType)
		w.Header().Set("Cache-Control", "public, max-age=86400")
		w.Write(made.Data)
	})
}

func (p *process) enlargeShowcase(ctx context.Context) (upscale.Image, error) {
	src, err := fs.ReadFile(samples, showcaseSample)
	if err != nil {
		return upscale.Image{}, err
	}
	return p.engine.Upscale(ctx, src, upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseLow})
}
