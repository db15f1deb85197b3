package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestLoadConfig(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		c, err := loadConfig("config.example.json")
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Plans) != 2 || len(c.Accounts) != 2 || len(c.Keys) != 2 || c.FreeTierMaxFileBytes != 5<<20 {
			t.Errorf("loaded %+v", c)
		}
	})
	valid := `"plans": {"free": {"monthlyImages": 10, "maxFileBytes": 100}}, "accounts": [{"id": "acme", "plan": "free"}]`
	for _, tc := range []struct{ name, file, field string }{
		{"UnknownPlan", `{"plans": {}, "accounts": [{"id": "acme", "plan": "gold"}]}`, "accounts[0].plan"},
		{"UnknownAccount", `{` + valid + `, "keys": [{"key": "upk_test_0123456789abcdef", "account": "nobody"}]}`, "keys[0].account"},
		{"NegativeCredits", `{"plans": {"free": {}}, "accounts": [{"id": "a", "plan": "free", "credits": -1}]}`, "accounts[0].credits"},
		{"NegativeShareBonus", `{"plans": {"free": {}}, "accounts": [{"id": "a", "plan": "free", "shareBonus": -1}]}`, "accounts[0].shareBonus"},
		{"NegativeMonthly", `{"plans": {"free": {"monthlyImages": -1}}}`, "plans.free"},
		{"NegativeFreeTier", `{"freeTierMaxFileBytes": -1}`, "freeTierMaxFileBytes"},
		{"DuplicateKey", `{` + valid + `, "keys": [{"key": "upk_test_0123456789abcdef", "account": "acme"}, {"key": "upk_test_0123456789abcdef", "account": "acme"}]}`, "keys[1].key"},
		{"ShortKey", `{` + valid + `, "keys": [{"key": "short", "account": "acme"}]}`, "keys[0].key"},
		{"DuplicateAccount", `{"plans": {"free": {}}, "accounts": [{"id": "a", "plan": "free"}, {"id": "a", "plan": "free"}]}`, "accounts[1].id"},
		{"UnknownField", `{"plan": {}}`, `"plan"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.json")
			os.WriteFile(path, []byte(tc.file), 0o600)
			_, err := loadConfig(path)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("err = %v, want one naming %s", err, tc.field)
			}
		})
	}
}

// TestEndToEnd builds the real binary, starts it on a free port, upscales a
// PNG served by a local origin, downloads the link and checks the result,
// then stops the server with SIGTERM.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := filepath.Join(t.TempDir(), "standalone")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	butterfly, err := os.ReadFile("../../testdata/sr/Set5/butterfly.png")
	if err != nil {
		t.Fatal(err)
	}
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(butterfly) }))
	defer origin.Close()

	cmd := exec.Command(bin, "-addr", "127.0.0.1:0", "-allow-private-sources")
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer cmd.Process.Kill()

	base, key := readBanner(t, stdout)
	body := fmt.Sprintf(`{"imageUrl": %q, "scale": 2}`, origin.URL+"/butterfly.png")
	req, _ := http.NewRequest(http.MethodPost, base+"/api/v1/upscale", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		URL       string          `json:"url"`
		ResizedTo json.RawMessage `json:"resizedTo"`
		Via       string          `json:"via"`
	}
	json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || got.Via != "free_pool" || string(got.ResizedTo) != "null" || !strings.HasPrefix(got.URL, base+"/outputs/") {
		t.Fatalf("POST: status %d, body %+v; stderr:\n%s", resp.StatusCode, got, stderr.String())
	}
	link, err := http.Get(got.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer link.Body.Close()
	img, err := png.Decode(link.Body)
	if err != nil {
		t.Fatalf("result: %v", err)
	}
	if size := img.Bounds().Size(); size.X != 512 || size.Y != 512 {
		t.Errorf("result is %v, want 512x512 (butterfly.png is 256x256)", size)
	}

	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Error("still running 10s after SIGTERM")
	}
}

// readBanner reads the server's start-up lines: its address and demo key.
func readBanner(t *testing.T, stdout io.Reader) (base, key string) {
	t.Helper()
	lines := bufio.NewScanner(stdout)
	for lines.Scan() && (base == "" || key == "") {
		line := lines.Text()
		if v, ok := strings.CutPrefix(line, "upscale standalone listening on "); ok {
			base = v
		}
		if v, ok := strings.CutPrefix(line, "API key: "); ok {
			key = v
		}
	}
	if base == "" || key == "" {
		t.Fatalf("no address or key in the banner (address %q, key %q)", base, key)
	}
	go io.Copy(io.Discard, stdout)
	return base, key
}
