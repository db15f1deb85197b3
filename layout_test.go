package upscale_test

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/accounts"
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
		"github.com/upscalekit/upscale/internal/membudget",
		"github.com/upscalekit/upscale/internal/netguard",
		"github.com/upscalekit/upscale/internal/periodic",
		"github.com/upscalekit/upscale/internal/recent",
		"github.com/upscalekit/upscale/internal/workers",
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

// TestBackendsDoNotDependOnTheDashboard: the dashboard is a user
// interface on top (templates, its API reference on kin-openapi); the
// stores and queues a host plugs in, and everything else but the programs,
// build without it. Types both need live in package accounts.
func TestBackendsDoNotDependOnTheDashboard(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}:{{range .Deps}} {{.}}{{end}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const module = "github.com/upscalekit/upscale/"
	above := func(path string) bool { // the dashboard itself, and the programs that mount it
		for _, top := range []string{"dashboard", "examples", "cmd"} {
			if strings.HasPrefix(path, module+top+"/") || path == module+top {
				return true
			}
		}
		return false
	}
	checked := 0
	for line := range strings.Lines(string(out)) {
		path, deps, _ := strings.Cut(strings.TrimSpace(line), ":")
		if above(path) {
			continue
		}
		checked++
		for _, dep := range strings.Fields(deps) {
			if dep == module+"dashboard" || strings.HasPrefix(dep, "github.com/getkin/kin-openapi") {
				t.Errorf("%s depends on %s", path, dep)
			}
		}
	}
	if checked < 10 {
		t.Errorf("only %d packages checked: go list printed\n%s", checked, out)
	}
}

// TestTestingToolsStayInTestPackages: net/http/httptest and package
// testing are for tests and the packages that serve them (upscaletest, a
// fake, a benchmark's rig, the quality scores); code that serves requests
// does without them
// (dashboard's Try it once answered through an httptest.ResponseRecorder).
func TestTestingToolsStayInTestPackages(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}:{{range .Imports}} {{.}}{{end}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	forTests := func(path string) bool {
		for _, part := range strings.Split(path, "/") {
			if strings.HasSuffix(part, "test") || slices.Contains([]string{"enginebench", "testservers", "quality"}, part) {
				return true
			}
		}
		return false
	}
	for line := range strings.Lines(string(out)) {
		path, imports, _ := strings.Cut(strings.TrimSpace(line), ":")
		for _, tool := range []string{"net/http/httptest", "testing"} {
			if slices.Contains(strings.Fields(imports), tool) && !forTests(path) {
				t.Errorf("%s imports %s outside its tests", path, tool)
			}
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
		reflect.TypeFor[upscale.MemoryLedger](), reflect.TypeFor[upscale.MemoryCheckoutStore](), reflect.TypeFor[upscale.MemoryKeyStore](),
		reflect.TypeFor[upscale.MemoryIdempotencyStore](), reflect.TypeFor[upscale.MemoryRateLimiter](),
		reflect.TypeFor[upscale.CachedKeyStore](), reflect.TypeFor[upscale.Handler](),
		reflect.TypeFor[upscale.MemoryJobQueue](), reflect.TypeFor[upscale.MemoryWebhookQueue](), reflect.TypeFor[upscale.MemoryWebhookSecrets](),
		reflect.TypeFor[accounts.MemoryLinks](), reflect.TypeFor[accounts.MemorySessions](), reflect.TypeFor[accounts.MemoryDirectory](),
		reflect.TypeFor[accounts.MemoryOutbox](), reflect.TypeFor[accounts.ShareBonus](),
	} {
		for f := range typ.Fields() {
			if f.IsExported() {
				t.Errorf("%s has the exported field %s", typ, f.Name)
			}
		}
	}
}

// TestNoExecutablesCommitted: built programs stay out of the tree (two
// once landed by mistake, 21 MB each, and stay in the history for good).
// Every tracked file marked executable must be a script, and no tracked
// file may start as a compiled program does (ELF, Mach-O, PE).
func TestNoExecutablesCommitted(t *testing.T) {
	out, err := exec.Command("git", "ls-files", "--stage").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	compiled := [][]byte{{0x7f, 'E', 'L', 'F'}, {0xcf, 0xfa, 0xed, 0xfe}, {0xfe, 0xed, 0xfa, 0xcf}, {'M', 'Z'}}
	for line := range strings.Lines(string(out)) {
		meta, path, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "\t")
		head := make([]byte, 4)
		f, err := os.Open(path)
		if err != nil {
			continue // deleted in the work tree, not yet in the index
		}
		n, _ := io.ReadFull(f, head)
		f.Close()
		head = head[:n]
		if strings.HasPrefix(meta, "100755") && !bytes.HasPrefix(head, []byte("#!")) {
			t.Errorf("%s is committed executable but is not a script", path)
		}
		for _, magic := range compiled {
			if bytes.HasPrefix(head, magic) {
				t.Errorf("%s is a compiled program; build it instead of committing it", path)
			}
		}
	}
}
