package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"io"
	"log/slog"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/client"
	"github.com/upscalekit/upscale/internal/quality"
	"github.com/upscalekit/upscale/internal/testservers"
	"github.com/upscalekit/upscale/sqlstore"
	"github.com/upscalekit/upscale/upscaletest"
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
	t.Run("NetworkFilesBesideTheConfig", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "config.json")
		os.WriteFile(path, []byte(`{"networks": [{"name": "a", "param": "a.param", "int8": "a.int8.onnx", "tile": 400}, {"name": "b", "onnx": "models/b.onnx"}, {"name": "c", "onnx": "/abs/c.onnx"}]}`), 0o600)
		c, err := loadConfig(path)
		if err != nil {
			t.Fatal(err)
		}
		models, _ := c.models()
		if len(models) != 3 || models[0].Param != filepath.Join(dir, "a.param") || models[0].INT8 != filepath.Join(dir, "a.int8.onnx") || models[0].Tile != 400 || models[1].Tile != 0 || models[1].ONNX != filepath.Join(dir, "models/b.onnx") || models[2].ONNX != "/abs/c.onnx" {
			t.Errorf("models %+v: want each file beside the config, an absolute one as it is", models)
		}
	})
	valid := `"plans": {"free": {"monthlyImages": 10, "maxFileBytes": 100}}, "accounts": [{"id": "acme", "plan": "free"}]`
	for _, tc := range []struct{ name, file, field string }{
		{"UnknownPlan", `{"plans": {}, "accounts": [{"id": "acme", "plan": "gold"}]}`, "accounts[0].plan"},
		{"UnknownSignUpPlan", `{"plans": {"free": {}}, "signUpPlan": "gold"}`, "signUpPlan"},
		{"ShareBonusCapBelowOne", `{"plans": {"free": {}}, "shareBonus": {"perSignup": 5, "monthlyCap": 4}}`, "shareBonus"},
		{"UnknownAccount", `{` + valid + `, "keys": [{"key": "upk_test_0123456789abcdef", "account": "nobody"}]}`, "keys[0].account"},
		{"NegativeCredits", `{"plans": {"free": {}}, "accounts": [{"id": "a", "plan": "free", "credits": -1}]}`, "accounts[0].credits"},
		{"NegativeShareBonus", `{"plans": {"free": {}}, "accounts": [{"id": "a", "plan": "free", "shareBonus": -1}]}`, "accounts[0].shareBonus"},
		{"NegativeMonthly", `{"plans": {"free": {"monthlyImages": -1}}}`, "plans.free"},
		{"NegativeFreeTier", `{"freeTierMaxFileBytes": -1}`, "freeTierMaxFileBytes"},
		{"DuplicateKey", `{` + valid + `, "keys": [{"key": "upk_test_0123456789abcdef", "account": "acme"}, {"key": "upk_test_0123456789abcdef", "account": "acme"}]}`, "keys[1].key"},
		{"ShortKey", `{` + valid + `, "keys": [{"key": "short", "account": "acme"}]}`, "keys[0].key"},
		{"DuplicateAccount", `{"plans": {"free": {}}, "accounts": [{"id": "a", "plan": "free"}, {"id": "a", "plan": "free"}]}`, "accounts[1].id"},
		{"UnknownField", `{"plan": {}}`, `"plan"`},
		{"NetworkWithoutFile", `{"networks": [{"name": "span"}]}`, "networks[0]: name is required, and one of param and onnx"},
		{"NetworkWithTwoFiles", `{"networks": [{"name": "span", "param": "a.param", "onnx": "a.onnx"}]}`, "networks[0]: name is required, and one of param and onnx"},
		{"NegativeTile", `{"networks": [{"name": "span", "param": "a.param", "tile": -1}]}`, "networks[0]: tile is a side in pixels, or 0 for the engine's"},
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
// PNG served by a local origin, downloads the link and checks the result
// and the request's metrics on the -metrics-addr listener.
// Then it stops the server with SIGTERM while a second request is held at
// the origin: /readyz must turn 503 while /livez stays 200 (the drain
// delay), then the server must stop accepting connections, finish that
// request with a 200 and exit cleanly.
func TestEndToEnd(t *testing.T) {
	bin := buildStandalone(t)
	butterfly := quality.SetFile(t, "Set5/butterfly.png")
	heldArrived, releaseHeld := make(chan struct{}), make(chan struct{})
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/held.png" {
			close(heldArrived)
			<-releaseHeld
		}
		w.Write(butterfly)
	}))
	defer origin.Close()

	// The drain delay is room for a loaded machine to see /readyz turn
	// and /livez stay before the listener closes.
	srv := startStandalone(t, bin, "-data", t.TempDir(), "-drain-delay", "3s", "-metrics-addr", "127.0.0.1:0")
	base, key, stderr, cmd, exited := srv.base, srv.key, &srv.stderr, srv.cmd, srv.exited
	checkStatus(t, base+"/livez", http.StatusOK)
	checkStatus(t, base+"/readyz", http.StatusOK)

	link := upscaleVia(t, base, key, origin.URL+"/butterfly.png", stderr)
	if size := upscaletest.ResultPNG(t, link).Bounds().Size(); size.X != 512 || size.Y != 512 {
		t.Errorf("result is %v, want 512x512 (butterfly.png is 256x256)", size)
	}
	checkMetrics(t, srv.metrics, `upscale_requests_total{code="ok",pool="free_pool"} 1`, "process_resident_memory_bytes ", `upscale_step_duration_seconds_count{step="engine"} 1`)

	held := make(chan string, 1)
	go func() { held <- upscaleVia(t, base, key, origin.URL+"/held.png", stderr) }()
	<-heldArrived
	cmd.Process.Signal(syscall.SIGTERM)
	for deadline := time.Now().Add(3 * time.Second); statusOf(t, base+"/readyz") != http.StatusServiceUnavailable; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("/readyz did not turn 503 after SIGTERM")
		}
	}
	checkStatus(t, base+"/livez", http.StatusOK)
	addr := strings.TrimPrefix(base, "http://")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			break // the listener is closed: no new requests while draining
		}
		conn.Close()
		if time.Now().After(deadline) {
			t.Fatal("still accepting connections 10s after SIGTERM")
		}
	}
	close(releaseHeld)
	if got := <-held; got == "" {
		t.Error("the request in flight at SIGTERM did not finish")
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Error("still running 10s after SIGTERM")
	}
}

func statusOf(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func checkStatus(t *testing.T, url string, want int) {
	t.Helper()
	if got := statusOf(t, url); got != want {
		t.Errorf("GET %s: %d, want %d", url, got, want)
	}
}

// scratch is a directory for the whole test process (TestMain makes and
// removes it): the binary buildStandalone builds, and what else every
// test shares.
var scratch string

// binaries are the binaries the tests build, by package, each once per
// test process: every test runs the same code, and linking the
// standalone took seconds per test.
var binaries struct {
	sync.Mutex
	built map[string]*binary
}

type binary struct {
	once sync.Once
	path string
	err  error
}

// buildStandalone returns the path of the package's binary, built on
// its first call; a test must not change the file.
func buildStandalone(t testing.TB) string { return buildBinary(t, ".", "standalone") }

// buildBinary returns the path of the command pkg (a directory), built
// as name, without the race detector, on its first call.
func buildBinary(t testing.TB, pkg, name string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	binaries.Lock()
	if binaries.built == nil {
		binaries.built = map[string]*binary{}
	}
	b := binaries.built[pkg]
	if b == nil {
		b = &binary{}
		binaries.built[pkg] = b
	}
	binaries.Unlock()
	b.once.Do(func() {
		b.path = filepath.Join(scratch, name)
		if out, err := exec.Command("go", "build", "-o", b.path, pkg).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// standalone is a running server process.
type standalone struct {
	base, key string
	tries     []string // the banner's curl commands, without "curl "
	metrics   string   // the -metrics-addr URL, when given
	dashboard string   // the banner's sign-in link
	banner    []string
	cmd       *exec.Cmd
	exited    chan error
	stderr    bytes.Buffer
}

// startStandalone runs bin with args on a free port, sources allowed on
// loopback, and waits for its banner: the demo's, or with -config the
// lines up to the address.
func startStandalone(t testing.TB, bin string, args ...string) *standalone {
	t.Helper()
	s := &standalone{exited: make(chan error, 1)}
	// The tests count on the demo's images running out at 10.
	s.cmd = exec.Command(bin, append([]string{"-addr", "127.0.0.1:0", "-allow-private-sources", "-drain-delay", "0", "-demo-images", "10"}, args...)...)
	stdout, _ := s.cmd.StdoutPipe()
	s.cmd.Stderr = &s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.exited <- s.cmd.Wait() }()
	t.Cleanup(func() { s.cmd.Process.Kill() })
	s.readBanner(t, stdout, !slices.Contains(args, "-config"), slices.Contains(args, "-metrics-addr"))
	return s
}

// stop sends SIGTERM and waits for a clean exit.
func (s *standalone) stop(t testing.TB) {
	t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, s.stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still running 10s after SIGTERM")
	}
}

// upscaleVia asks the server at base to upscale imageURL ×2 and returns the
// result's link, failing the test on anything but a 200 from free_pool.
func upscaleVia(t *testing.T, base, key, imageURL string, stderr *bytes.Buffer) string {
	body := fmt.Sprintf(`{"imageUrl": %q, "scale": 2}`, imageURL)
	req, _ := http.NewRequest(http.MethodPost, base+"/api/v1/upscale", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return ""
	}
	defer resp.Body.Close()
	var got struct {
		URL       string          `json:"url"`
		ResizedTo json.RawMessage `json:"resizedTo"`
		Via       string          `json:"via"`
	}
	json.NewDecoder(resp.Body).Decode(&got)
	if resp.StatusCode != http.StatusOK || got.Via != "free_pool" || string(got.ResizedTo) != "null" || !strings.HasPrefix(got.URL, base+"/outputs/") {
		t.Errorf("POST %s: status %d, body %+v; stderr:\n%s", imageURL, resp.StatusCode, got, stderr.String())
		return ""
	}
	return got.URL
}

// readBanner reads the server's start-up lines: its address, its metrics
// address if it has one (metrics), and for the demo (demo) its key, its
// dashboard link and its curl commands.
func (s *standalone) readBanner(t testing.TB, stdout io.Reader, demo, metrics bool) {
	t.Helper()
	lines := bufio.NewScanner(stdout)
	for (demo && len(s.tries) < 3 || !demo && s.base == "" || metrics && s.metrics == "") && lines.Scan() {
		line := lines.Text()
		s.banner = append(s.banner, line)
		if v, ok := strings.CutPrefix(line, "  curl "); ok {
			s.tries = append(s.tries, v)
		}
		if v, ok := strings.CutPrefix(line, "upscale standalone listening on "); ok {
			s.base, _, _ = strings.Cut(v, " ")
		}
		if v, ok := strings.CutPrefix(line, "metrics at "); ok {
			s.metrics = v
		}
		if v, ok := strings.CutPrefix(line, "API key: "); ok {
			s.key = v
		}
		if _, v, ok := strings.Cut(line, "standalone dashboard link makes more): "); ok {
			s.dashboard = v
		}
	}
	if s.base == "" || demo && s.key == "" {
		t.Fatalf("no address or key in the banner (address %q, key %q)", s.base, s.key)
	}
	go io.Copy(io.Discard, stdout)
}

// encodeJPEG is img as a JPEG file.
func encodeJPEG(t *testing.T, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, nil); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestUploadRefusedThroughTheServer: through the standalone, as curl
// sends it (Expect: 100-continue), a 30 MB upload on the free plan is 400
// image_too_large before its body is sent, and a HEIC that lies about its
// size is 400 unsupported_image within seconds; neither is charged.
func TestUploadRefusedThroughTheServer(t *testing.T) {
	bin := buildStandalone(t)
	data := t.TempDir()
	s := startStandalone(t, bin, "-data", data)
	defer s.stop(t)
	lying, err := os.ReadFile("../../engine/internal/libvips/testdata/hostile/lying.heic")
	if err != nil {
		t.Fatal(err)
	}
	httpClient := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: 5 * time.Second}}
	for _, tc := range []struct {
		name   string
		file   []byte
		status int
		code   string
	}{
		{"30MB", make([]byte, 30<<20), 400, "image_too_large"},
		{"LyingHEIC", lying, 400, "unsupported_image"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body bytes.Buffer
			form := multipart.NewWriter(&body)
			file, _ := form.CreateFormFile("image", tc.name)
			file.Write(tc.file)
			form.WriteField("scale", "2")
			form.Close()
			r, _ := http.NewRequest(http.MethodPost, s.base+"/api/v1/upscale", &body)
			r.Header.Set("Authorization", "Bearer "+s.key)
			r.Header.Set("Content-Type", form.FormDataContentType())
			r.Header.Set("Expect", "100-continue")
			start := time.Now()
			resp, err := httpClient.Do(r)
			if err != nil {
				t.Fatal(err)
			}
			answer, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			// Tens of milliseconds when idle; the bound is for a hang, with
			// room for a loaded machine.
			if took := time.Since(start); resp.StatusCode != tc.status || !strings.Contains(string(answer), `"`+tc.code+`"`) || took > 3*time.Second {
				t.Errorf("%d %s in %v; want %d %s within 3 s", resp.StatusCode, answer, took, tc.status, tc.code)
			}
		})
	}
	checkUsage(t, bin, []string{"-data", data}, 0, 10)
}

// runTry runs the banner's command i in dir (the test's when empty) and
// returns the result's link.
func runTry(t *testing.T, s *standalone, i int, dir string) string {
	t.Helper()
	cmd := exec.Command("sh", "-c", "curl "+s.tries[i])
	cmd.Dir = dir
	out, err := cmd.Output()
	var answer struct{ URL string }
	if err != nil || json.Unmarshal(out, &answer) != nil || answer.URL == "" {
		t.Fatalf("the banner's command %d: %v\n%s\nstderr:\n%s", i+1, err, out, s.stderr.String())
	}
	return answer.URL
}

// fetchHead returns the first n bytes of what link serves.
func fetchHead(t *testing.T, link string, n int) []byte {
	t.Helper()
	resp, err := http.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	head := make([]byte, n)
	if _, err := io.ReadFull(resp.Body, head); err != nil {
		t.Fatalf("GET %s: %s, %v", link, resp.Status, err)
	}
	return head
}

// TestDemoCommandWorksOffline runs the banner's commands as printed,
// through sh and curl, on a server whose sources may not be on private
// addresses (the default): the samples they name are served by the server
// itself, with no download, so the commands work without internet access.
// Each link serves its sample enlarged; the third command uploads a
// photo.jpg of its own and gets a WebP.
func TestDemoCommandWorksOffline(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl to run the banner's commands with")
	}
	bin := buildStandalone(t)
	s := startStandalone(t, bin, "-data", t.TempDir(), "-allow-private-sources=false")
	if !slices.Contains(s.banner, `demo account "demo" on the plan "demo" (10 images a month)`) {
		t.Errorf("the banner does not say the demo's plan:\n%s", strings.Join(s.banner, "\n"))
	}
	for i, want := range []image.Point{image.Pt(512, 512), image.Pt(1000, 1444)} {
		if size := upscaletest.ResultPNG(t, runTry(t, s, i, "")).Bounds().Size(); size != want {
			t.Errorf("the banner's command %d made %v; want %v", i+1, size, want)
		}
	}
	// The third uploads photo.jpg from where it runs, and asks for WebP.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "photo.jpg"), encodeJPEG(t, upscaletest.TestImage(60, 40)), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := fetchHead(t, runTry(t, s, 2, dir), 16); string(got[:4]) != "RIFF" || string(got[8:12]) != "WEBP" {
		t.Errorf("the banner's upload made %q; want a WebP", got)
	}
	contract, err := http.Get(s.base + "/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(contract.Body)
	contract.Body.Close()
	if contract.StatusCode != http.StatusOK || !bytes.HasPrefix(text, []byte("openapi: 3.1.0")) {
		t.Errorf("GET /openapi.yaml: %s, %.40q; want the API's contract", contract.Status, text)
	}
	sample, err := http.Get(s.base + "/samples/lineart.png")
	if err != nil {
		t.Fatal(err)
	}
	sample.Body.Close()
	if sample.StatusCode != http.StatusOK || sample.Header.Get("Content-Type") != "image/png" {
		t.Errorf("GET /samples/lineart.png: %s %q, want the PNG", sample.Status, sample.Header.Get("Content-Type"))
	}
}

// TestServerTimeouts checks the server newServer builds against clients
// that are slow on purpose. The timeouts are shortened here so the test is
// quick; that the real ones are all set is checked first.
func TestServerTimeouts(t *testing.T) {
	readsBody := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) })
	srv := newServer(readsBody, time.Minute, slog.New(slog.DiscardHandler))
	if srv.ReadHeaderTimeout == 0 || srv.ReadTimeout == 0 || srv.WriteTimeout == 0 || srv.IdleTimeout == 0 || srv.MaxHeaderBytes == 0 {
		t.Fatalf("a timeout or limit is unset: %+v", srv)
	}
	srv.ReadHeaderTimeout, srv.ReadTimeout, srv.IdleTimeout = 200*time.Millisecond, 400*time.Millisecond, 200*time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	// closedWithin writes head (and body, slowly, if given) and reports how
	// long the server took to end the exchange, and what it said.
	closedWithin := func(t *testing.T, head string, slowBody bool) (time.Duration, string) {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		start := time.Now()
		io.WriteString(conn, head)
		if slowBody {
			go func() {
				for range 100 {
					if _, err := conn.Write([]byte("x")); err != nil {
						return
					}
					time.Sleep(100 * time.Millisecond)
				}
			}()
		}
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		said, _ := io.ReadAll(conn)
		return time.Since(start), string(said)
	}

	t.Run("HeadersNeverFinish", func(t *testing.T) {
		took, _ := closedWithin(t, "POST /api/v1/upscale HTTP/1.1\r\nHost: x\r\n", false)
		if took > 5*time.Second {
			t.Errorf("connection held %v with a header timeout of %v", took, srv.ReadHeaderTimeout)
		}
	})
	t.Run("BodyDrips", func(t *testing.T) {
		took, _ := closedWithin(t, "POST /api/v1/upscale HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n", true)
		if took > 5*time.Second {
			t.Errorf("connection held %v with a read timeout of %v", took, srv.ReadTimeout)
		}
	})
	t.Run("HugeHeaders", func(t *testing.T) {
		_, said := closedWithin(t, "GET / HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("a", 200<<10)+"\r\n\r\n", false)
		if !strings.HasPrefix(said, "HTTP/1.1 431") {
			t.Errorf("answer %.60q, want 431 Request Header Fields Too Large", said)
		}
	})
	t.Run("IdleKeepAlive", func(t *testing.T) {
		took, said := closedWithin(t, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", false)
		if !strings.HasPrefix(said, "HTTP/1.1 200") || took > 5*time.Second {
			t.Errorf("after %v: %.40q; want a 200 and then the idle connection closed", took, said)
		}
	})
}

// keyCacheTTL is TestRestartKeepsState's -key-cache-ttl, shorter than the
// default so that the test waits less for a revocation to take.
const keyCacheTTL = time.Second

// TestRestartKeepsState runs the server on a -data directory, changes its
// state from the admin subcommands while it serves, restarts it, and finds
// keys, balances and unexpired links as they were.
func TestRestartKeepsState(t *testing.T) {
	t.Parallel() // waits for the key cache to expire
	bin := buildStandalone(t)
	data := t.TempDir()
	origin := newButterflyOrigin(t)
	admin := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(bin, append(args, "-data", data)...).CombinedOutput()
		if err != nil {
			t.Fatalf("standalone %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	first := startStandalone(t, bin, "-data", data)
	link := upscaleVia(t, first.base, first.key, origin+"/a.png", &first.stderr)
	admin("credits", "grant", "-account", "demo", "-amount", "5", "-ref", "invoice-1") // while the server runs
	newKey := strings.TrimSpace(admin("keys", "create", "-account", "demo", "-name", "billing script"))
	first.stop(t)

	second := startStandalone(t, bin, "-data", data, "-key-cache-ttl", keyCacheTTL.String())
	if second.key != first.key {
		t.Errorf("demo key changed across the restart: %q, then %q", first.key, second.key)
	}
	// The link names the first server's port; the second listens elsewhere.
	resp, err := http.Get(strings.Replace(link, first.base, second.base, 1))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("link made before the restart: status %d", resp.StatusCode)
	}
	if upscaleVia(t, second.base, newKey, origin+"/a.png", &second.stderr) == "" {
		t.Error("the key made by 'keys create' does not work")
	}
	// keys list shows the key by its ID, hint and name, used now, never
	// the key; keys revoke by that ID stops it.
	listed := admin("keys", "list", "-account", "demo")
	row := regexp.MustCompile(`(?m)^` + upscale.KeyID(newKey) + ` +` + regexp.QuoteMeta(upscale.KeyHint(newKey)) + ` +billing script +\S+ \S+ +\S+ \S+ +- *$`)
	if !row.MatchString(listed) || strings.Contains(listed, newKey) || len(strings.Split(strings.TrimSpace(listed), "\n")) != 3 {
		t.Errorf("keys list says:\n%s\nwant a header, the demo key and the named key, used, not revoked, without the key itself", listed)
	}
	usage := admin("usage", "-account", "demo")
	for _, want := range []string{"free_pool    used 2", "left: free_pool 8, share_bonus 0, credit 5"} {
		if !strings.Contains(usage, want) {
			t.Errorf("usage says:\n%s\nwant it to contain %q", usage, want)
		}
	}
	// Revoked by another process, by the ID keys list shows, the key stops
	// working once the server's cached answer expires: within
	// -key-cache-ttl (keyCacheTTL here, 5 s by default). The body lacks an
	// imageUrl, so a key still cached gets 400 and nothing is charged.
	admin("keys", "revoke", "-account", "demo", "-id", upscale.KeyID(newKey))
	revoked := time.Now()
	for {
		req, _ := http.NewRequest(http.MethodPost, second.base+"/api/v1/upscale", strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer "+newKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusUnauthorized {
			break
		}
		if time.Since(revoked) > keyCacheTTL+10*time.Second {
			t.Fatalf("revoked key still gets %s %v after the revocation", resp.Status, time.Since(revoked))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if listed := admin("keys", "list", "-account", "demo"); !regexp.MustCompile(`(?m)^` + upscale.KeyID(newKey) + ` .*:\d\d *$`).MatchString(listed) {
		t.Errorf("keys list after the revocation says:\n%s\nwant the key revoked (a time in its last column)", listed)
	}
	second.stop(t)

	if out, err := exec.Command(bin, "credits", "grant", "-account", "nobody", "-amount", "1", "-data", data).CombinedOutput(); err == nil || !strings.Contains(string(out), "nobody") {
		t.Errorf("granting to an unknown account: %v, %s; want an error naming it", err, out)
	}
}

// TestSeedIsIdempotent: seeding again from the same file changes nothing,
// neither balances spent or granted since, nor revoked keys.
func TestSeedIsIdempotent(t *testing.T) {
	ctx := context.Background()
	cfg, err := loadConfig("config.example.json")
	if err != nil {
		t.Fatal(err)
	}
	store, err := sqlstore.Open(ctx, filepath.Join(t.TempDir(), "upscale.db"), sqlstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if err := cfg.seed(ctx, store); err != nil {
		t.Fatal(err)
	}
	acct := cfg.Accounts[0].ID
	store.GrantCredits(ctx, acct, 7, "test")
	r, _ := store.Reserve(ctx, acct, false)
	store.Commit(ctx, r.ID)
	before, _ := store.Balance(ctx, acct)
	revoked := cfg.Keys[0].Key // an operator revokes a key the file lists
	if err := store.RevokeKey(ctx, revoked); err != nil {
		t.Fatal(err)
	}
	if err := cfg.seed(ctx, store); err != nil {
		t.Fatalf("seeding again: %v", err)
	}
	if after, _ := store.Balance(ctx, acct); after != before {
		t.Errorf("balance %+v after seeding again, was %+v", after, before)
	}
	if _, err := store.Authenticate(ctx, revoked); !errors.Is(err, upscale.ErrUnauthorized) {
		t.Errorf("revoked key after seeding again: %v; want it still revoked", err)
	}
}

// TestMain runs the tests in a scratch directory of their own, then stops
// the servers they started and removes it.
func TestMain(m *testing.M) {
	var err error
	if scratch, err = os.MkdirTemp("", "upscale-standalone-test-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	testservers.Stop()
	os.RemoveAll(scratch)
	os.Exit(code)
}

// TestTwoReplicas runs two standalone processes on one PostgreSQL database
// and one S3 bucket, as a host with a load balancer would, and sends 200
// requests at once, alternating between them, on the demo account's 10
// free images: exactly 10 must succeed, with links either replica's
// clients can follow.
func TestTwoReplicas(t *testing.T) {
	bin := buildStandalone(t)
	stores := newSharedStores(t)
	origin := newButterflyOrigin(t)

	// A queue with room for every request: the test holds the ledger to
	// its count, not admission.
	shared := append(stores.flags, "-queue-length", "200")
	var replicas []*standalone
	for range 2 { // separate -data: nothing on local disk is shared
		replicas = append(replicas, startStandalone(t, bin, append(shared, "-data", t.TempDir())...))
	}

	statuses := make(chan int, 200)
	links := make(chan string, 200)
	var wg sync.WaitGroup
	for i := range 200 {
		r := replicas[i%2]
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, r.base+"/api/v1/upscale", strings.NewReader(`{"imageUrl": "`+origin+`/b.png", "scale": 2}`))
			req.Header.Set("Authorization", "Bearer "+r.key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			statuses <- resp.StatusCode
			var got struct{ URL string }
			if json.NewDecoder(resp.Body).Decode(&got); resp.StatusCode == http.StatusOK {
				links <- got.URL
			}
		})
	}
	wg.Wait()
	close(statuses)
	close(links)
	count := map[int]int{}
	for s := range statuses {
		count[s]++
	}
	if count[http.StatusOK] != 10 || count[http.StatusTooManyRequests] != 190 {
		t.Fatalf("statuses %v; want exactly 10×200 and 190×429\nreplica 1:\n%s\nreplica 2:\n%s", count, replicas[0].stderr.String(), replicas[1].stderr.String())
	}
	for link := range links {
		resp, err := http.Get(link)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.DecodeConfig(resp.Body)
		resp.Body.Close()
		if err != nil || img.Width != 512 || stores.objectOf(link) == "" {
			t.Errorf("link %s: %d×%d, %v; want a 512-pixel-wide PNG from the bucket", link, img.Width, img.Height, err)
		}
	}
	checkUsage(t, bin, stores.admin(t), 10, 0)
	for _, r := range replicas {
		r.stop(t)
	}
}

// TestWorkerBesideTheAPI: an API process that runs no jobs
// (-job-workers -1) takes a job, and a worker process on the same -data
// runs it from the queue in the SQLite file; the API serves its result.
func TestWorkerBesideTheAPI(t *testing.T) {
	bin := buildStandalone(t)
	data := t.TempDir()
	origin := newButterflyOrigin(t)
	api := startStandalone(t, bin, "-data", data, "-job-workers", "-1")
	secret, err := exec.Command(bin, "webhook-secret", "rotate", "-account", "demo", "-data", data).Output()
	if err != nil {
		t.Fatal(err)
	}
	hooks := make(chan *http.Request, 4)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		hooks <- r
	}))
	defer receiver.Close()

	req, _ := http.NewRequest(http.MethodPost, api.base+"/api/v1/upscale",
		strings.NewReader(`{"imageUrl": "`+origin+`/b.png", "scale": 2, "webhookUrl": "`+receiver.URL+`/hooks"}`))
	req.Header.Set("Authorization", "Bearer "+api.key)
	req.Header.Set("Prefer", "respond-async")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	location := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusAccepted || location == "" {
		t.Fatalf("submit: %d, Location %q; want 202 and the job's resource\n%s", resp.StatusCode, location, api.stderr.String())
	}
	job := func() upscale.Job {
		req, _ := http.NewRequest(http.MethodGet, api.base+location, nil)
		req.Header.Set("Authorization", "Bearer "+api.key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var j upscale.Job
		json.NewDecoder(resp.Body).Decode(&j)
		return j
	}
	time.Sleep(500 * time.Millisecond)
	if j := job(); j.Status != upscale.JobQueued {
		t.Fatalf("with no worker running: %s, want queued", j.Status)
	}

	w := startWorker(t, bin, "-data", data, "-public-url", api.base, "-allow-private-sources", "-metrics-addr", "127.0.0.1:0")
	var j upscale.Job
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if j = job(); j.Status.Done() {
			break
		}
	}
	if j.Status != upscale.JobSucceeded || j.Result == nil || !strings.HasPrefix(j.Result.URL, api.base+"/outputs/") {
		t.Fatalf("job %+v, want succeeded with a result the API serves\nworker:\n%s", j, w.stderr.String())
	}
	if size := upscaletest.ResultPNG(t, j.Result.URL).Bounds().Size(); size.X != 512 {
		t.Errorf("result %v, want 512 wide", size)
	}
	select {
	case hook := <-hooks:
		body, _ := io.ReadAll(hook.Body)
		event, err := client.VerifyWebhook(strings.TrimSpace(string(secret)), hook.Header, body, time.Now())
		if err != nil || event.Type != "upscale.job.succeeded" || event.Data.ID != j.ID || event.Data.Result == nil || event.Data.Result.URL != j.Result.URL {
			t.Errorf("webhook %s: %+v, %v; want the job's success, signed with the secret", body, event, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no webhook after 30 s\nworker:\n%s", w.stderr.String())
	}
	// The worker's own metrics say what it ran.
	checkMetrics(t, w.metrics, `upscale_job_duration_seconds_count{phase="run",status="succeeded"} 1`, `upscale_step_duration_seconds_count{step="engine"} 1`)
	w.stop(t)
	api.stop(t)
	if err := exec.Command(bin, "worker", "-data", data).Run(); err == nil {
		t.Error("a worker without -public-url or -s3-bucket started")
	}
}

func TestS3FlagsNeedABucket(t *testing.T) {
	for _, args := range [][]string{{"-s3-endpoint", "http://127.0.0.1:9000"}, {"-s3-region", "eu-west-1"}} {
		if _, err := parseFlags(args, io.Discard); err == nil || !strings.Contains(err.Error(), "-s3-bucket") {
			t.Errorf("parseFlags(%q) = %v; want an error naming -s3-bucket", args, err)
		}
	}
	o, err := parseFlags([]string{"-s3-bucket", "results", "-s3-endpoint", "http://127.0.0.1:9000"}, io.Discard)
	if err != nil || o.s3Bucket != "results" {
		t.Errorf("parseFlags with a bucket = %+v, %v", o, err)
	}
}

func TestEngineFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-engine", "magic"}, "-engine"},
		{[]string{"-onnxruntime-lib", "/opt/ort.so"}, "-engine onnx"},
		{[]string{"-onnx-precision", "fp32"}, "-engine onnx"},
		{[]string{"-onnx-runtime", "onnxruntime"}, "-engine onnx"},
		{[]string{"-engine", "onnx", "-onnx-runtime", "tensorflow"}, "-onnx-runtime"},
		{[]string{"-engine", "onnx", "-onnx-runtime", "onednn", "-onnxruntime-lib", "/opt/ort.so"}, "-onnx-runtime auto or onnxruntime"},
		{[]string{"-engine-timeout", "2m", "-job-run-timeout", "1m"}, "-job-run-timeout"},
		{[]string{"-engine-timeout", "10s", "-job-run-timeout", "25s"}, "-job-run-timeout"},
		{[]string{"-signups", "maybe"}, "-signups"},
		{[]string{"-smtp-url", "smtp://127.0.0.1:25"}, "-mail-from"},
	} {
		if _, err := parseFlags(tc.args, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseFlags(%q) = %v; want an error naming %s", tc.args, err, tc.want)
		}
	}
	o, err := parseFlags([]string{"-engine", "onnx"}, io.Discard)
	if err != nil || o.engine != "onnx" {
		t.Errorf("parseFlags(-engine onnx) = %+v, %v", o, err)
	}
	// A run has the queue's default time, whatever a request's engine has:
	// a job's learned passes use it.
	o, err = parseFlags([]string{"-engine-timeout", "30s"}, io.Discard)
	if err != nil || o.jobRunTimeout != upscale.DefaultRunTimeout {
		t.Errorf("parseFlags(-engine-timeout 30s): -job-run-timeout %v, %v; want %v", o.jobRunTimeout, err, upscale.DefaultRunTimeout)
	}
	o, err = parseFlags([]string{"-engine", "onnx", "-onnx-precision", "fp32"}, io.Discard)
	if err != nil || o.onnxPrecision != "fp32" {
		t.Errorf("parseFlags(-engine onnx -onnx-precision fp32) = %+v, %v", o, err)
	}
	// Before ONNX Runtime is loaded from its usual place below: a process
	// loads it once.
	discard := slog.New(slog.DiscardHandler)
	if _, _, err := (options{engine: "onnx", onnxRuntime: "onnxruntime", onnxRuntimeLib: filepath.Join(t.TempDir(), "missing.so")}).openEngine(context.Background(), fileConfig{}, discard); err == nil || !strings.Contains(err.Error(), "make deps") {
		t.Errorf("-engine onnx without the library: %v; want an error that says to run make deps", err)
	}
	// A precision the runtime does not offer is refused with the list of
	// those it does, which depends on the CPU but always holds fp32.
	for _, tc := range []struct{ runtime, precision string }{{"onednn", "fp16"}, {"onnxruntime", "bf16"}} {
		o, err := parseFlags([]string{"-engine", "onnx", "-onnx-runtime", tc.runtime, "-onnx-precision", tc.precision}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := o.openEngine(context.Background(), fileConfig{}, discard); err == nil || !strings.Contains(err.Error(), tc.runtime+" offers") || !strings.Contains(err.Error(), "fp32") {
			t.Errorf("-onnx-runtime %s -onnx-precision %s: %v; want an error naming what %s offers", tc.runtime, tc.precision, err, tc.runtime)
		}
	}
}

// TestOnnxEngine: -engine onnx with no other flag measures every runtime
// and precision this CPU offers, logs each and the choice, serves an
// upscale with the fastest (the library where make deps puts it), and
// names it in /metrics and in the Upscale-Engine header.
func TestOnnxEngine(t *testing.T) {
	bin := buildStandalone(t)
	origin := newButterflyOrigin(t)
	srv := startStandalone(t, bin, "-data", t.TempDir(), "-engine", "onnx", "-metrics-addr", "127.0.0.1:0")
	link := upscaleVia(t, srv.base, srv.key, origin+"/butterfly.png", &srv.stderr)
	if size := upscaletest.ResultPNG(t, link).Bounds().Size(); size.X != 512 || size.Y != 512 {
		t.Errorf("result is %v, want 512x512", size)
	}
	resp, err := http.Get(srv.metrics)
	if err != nil {
		t.Fatal(err)
	}
	exposition, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	srv.stop(t)
	log := srv.stderr.String()
	chose := regexp.MustCompile(`engine: chose the fastest" runtime=(\w+) precision=(\w+)`).FindStringSubmatch(log)
	if chose == nil || strings.Count(log, "engine: measured") < 3 {
		t.Fatalf("the log names no measured choice of at least three candidates:\n%s", log)
	}
	if info := fmt.Sprintf(`upscale_engine_info{engine="onnx",precision="%s",runtime="%s"} 1`, chose[2], chose[1]); !strings.Contains(string(exposition), info) {
		t.Errorf("/metrics lacks %s", info)
	}
}

// newButterflyOrigin serves Set5's butterfly (256×256 PNG) at every
// path, for the servers to fetch, and returns its URL.
func newButterflyOrigin(t *testing.T) string {
	t.Helper()
	butterfly := quality.SetFile(t, "Set5/butterfly.png")
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(butterfly) }))
	t.Cleanup(origin.Close)
	return origin.URL
}

// checkUsage runs the usage subcommand on the database the storage flags
// name and checks the demo account's free images used and left.
func checkUsage(t *testing.T, bin string, storage []string, used, left int) {
	t.Helper()
	out, err := exec.Command(bin, append([]string{"usage", "-account", "demo"}, storage...)...).CombinedOutput()
	want := []string{fmt.Sprintf("free_pool    used %d\n", used), fmt.Sprintf("left: free_pool %d,", left)}
	if err != nil || !strings.Contains(string(out), want[0]) || !strings.Contains(string(out), want[1]) {
		t.Errorf("usage: %v\n%s\nwant %d free images used and %d left", err, out, used, left)
	}
}

// checkMetrics checks that the metrics at url hold every one of want.
func checkMetrics(t *testing.T, url string, want ...string) {
	t.Helper()
	for _, w := range missingMetrics(t, url, want) {
		t.Errorf("metrics at %s lack %s", url, w)
	}
}

// missingMetrics returns those of want that the exposition at url does
// not contain.
func missingMetrics(t *testing.T, url string, want []string) []string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	exposition, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return slices.DeleteFunc(slices.Clone(want), func(w string) bool { return strings.Contains(string(exposition), w) })
}

// TestDemoImagesFlag: without -demo-images, the demo account has 100
// images a month, room to try the service.
func TestDemoImagesFlag(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	if err != nil || o.demoImages != 100 {
		t.Errorf("parseFlags() = %d demo images, %v; want 100", o.demoImages, err)
	}
	if cfg := demoConfig("upk_demo_x", int64(o.demoImages)); cfg.Accounts[0].Plan != "demo" || cfg.Plans["demo"].MonthlyImages != 100 || cfg.Plans["free"].MonthlyImages != 10 {
		t.Errorf("the demo config: %+v", cfg)
	}
}
