package upscale_test

import (
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/dirstore"
)

// TestRootDependencies holds the root package to its shape: the domain,
// the contracts, the in-memory defaults and the handler, on the standard
// library and the design's small libraries only. Disk, cloud, database
// and cgo code live in subpackages.
func TestRootDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}} {{len .CgoFiles}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	allowed := []string{
		"github.com/upscalekit/upscale",
		"github.com/upscalekit/upscale/internal/link",
		"github.com/upscalekit/upscale/internal/periodic",
		"github.com/golang-jwt/jwt/v5",
		"github.com/patrickmn/go-cache",
		"golang.org/x/sync/semaphore",
		"golang.org/x/time/rate",
	}
	for line := range strings.Lines(strings.TrimSpace(string(out))) {
		path, cgoFiles, _ := strings.Cut(strings.TrimSpace(line), " ")
		if !slices.Contains(allowed, path) {
			t.Errorf("the root package depends on %s", path)
		}
		if cgoFiles != "0" {
			t.Errorf("%s, which the root package imports, uses cgo", path)
		}
	}
}

// TestStoresHaveNoExportedFields: a store's state, the handler that serves
// its links included, is reached through its methods only; an exported
// field (an embedded http.Handler, as there once was) lets a caller swap
// what serves the links.
func TestStoresHaveNoExportedFields(t *testing.T) {
	for _, typ := range []reflect.Type{
		reflect.TypeFor[upscale.MemoryBlobStore](), reflect.TypeFor[dirstore.Store](),
		reflect.TypeFor[upscale.MemoryLedger](), reflect.TypeFor[upscale.MemoryKeyStore](),
		reflect.TypeFor[upscale.MemoryIdempotencyStore](), reflect.TypeFor[upscale.MemoryRateLimiter](),
		reflect.TypeFor[upscale.CachedKeyStore](), reflect.TypeFor[upscale.Handler](),
	} {
		for f := range typ.Fields() {
			if f.IsExported() {
				t.Errorf("%s has the exported field %s", typ, f.Name)
			}
		}
	}
}
