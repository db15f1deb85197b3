// Package browsertest drives Debian's chromium, headless, for the
// dashboard's browser tests (chromedp), and checks pages as a person
// would meet them: axe-core's accessibility rules, a phone's width, and a
// screenshot kept as the test's artifact.
//
// A missing chromium or axe-core skips the test, except when
// UPSCALE_REQUIRE_SERVERS is set (CI), as for the other servers; make
// test installs both.
package browsertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/upscalekit/upscale/internal/testservers"
)

// Browser is a headless chromium tab and what the checks need.
type Browser struct {
	// Ctx runs chromedp's actions in the tab.
	Ctx       context.Context
	t         *testing.T
	axe       string
	artifacts string
}

// New starts a headless chromium for t, stopped when t ends. Screenshots
// go to $UPSCALE_ARTIFACTS/<test name>, else artifacts/<test name> at the
// repository's root.
func New(t *testing.T) *Browser {
	t.Helper()
	if testing.Short() {
		t.Skip("drives a browser")
	}
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		testservers.Unavailable(t, "no chromium for the browser tests; run make test-deps, or install Debian's chromium package")
	}
	axeFile := os.Getenv("UPSCALE_AXE")
	axe, err := os.ReadFile(axeFile)
	if err != nil {
		testservers.Unavailable(t, fmt.Sprintf("no axe-core (UPSCALE_AXE=%q: %v); run make test-deps, which fetches it", axeFile, err))
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.WindowSize(1280, 900))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	allocator, cancelAllocator := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocator)
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAllocator() })
	root := os.Getenv("UPSCALE_ARTIFACTS")
	if root == "" {
		out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
		if err != nil {
			t.Fatalf("find the repository's root for the artifacts: %v", err)
		}
		root = filepath.Join(strings.TrimSpace(string(out)), "artifacts")
	}
	artifacts := filepath.Join(root, t.Name())
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	return &Browser{Ctx: ctx, t: t, axe: string(axe), artifacts: artifacts}
}

// Do runs steps in the tab, failing the test on an error.
func (b *Browser) Do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.Ctx, steps...); err != nil {
		b.t.Fatal(err)
	}
}

// Text returns the text of the first element sel matches.
func (b *Browser) Text(sel string) string {
	b.t.Helper()
	text, err := chromedp.Run(b.Ctx, chromedp.Text(sel))
	if err != nil {
		b.t.Fatalf("text of %s: %v", sel, err)
	}
	return text
}

// violation is one axe-core rule a page breaks.
type violation struct {
	ID, Impact, Help string
	Nodes            int
}

// Check checks the page the tab shows, under name: no serious or critical
// axe-core violation, nothing wider than a 375-pixel phone, and a
// screenshot at the desktop's width and at the phone's.
func (b *Browser) Check(name string) {
	b.t.Helper()
	if _, err := chromedp.Run(b.Ctx, chromedp.Evaluate[bool](b.axe+";true")); err != nil {
		b.t.Fatalf("%s: load axe-core: %v", name, err)
	}
	violations, err := chromedp.Run(b.Ctx, chromedp.Evaluate[[]violation](`axe.run().then(r => r.violations
		.filter(v => v.impact === "serious" || v.impact === "critical")
		.map(v => ({ID: v.id, Impact: v.impact, Help: v.help, Nodes: v.nodes.length})))`, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("%s: run axe-core: %v", name, err)
	}
	for _, v := range violations {
		b.t.Errorf("%s: axe-core %s violation %s on %d elements: %s", name, v.Impact, v.ID, v.Nodes, v.Help)
	}
	b.screenshot(name)
	b.Do(chromedp.EmulateViewport(375, 812))
	width, err := chromedp.Run(b.Ctx, chromedp.Evaluate[int]("document.documentElement.scrollWidth"))
	if err != nil || width > 375 {
		b.t.Errorf("%s: %d pixels wide on a 375-pixel phone (%v); want no sideways scrolling", name, width, err)
	}
	b.screenshot(name + "-375")
	b.Do(chromedp.EmulateViewport(1280, 900))
}

// screenshot saves the whole page as name.png among the artifacts.
func (b *Browser) screenshot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.Ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("%s: screenshot: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(b.artifacts, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}
