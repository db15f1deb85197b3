package upscale_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/upscaletest"
)

const (
	keyFree = "upk_test_free_0123456789abcdef"
	keyPro  = "upk_test_pro_0123456789abcdef"
	// freeTierBytes is the test's free-tier file limit: smallPNG is under
	// it, bigPNG over it.
	freeTierBytes = 2000
)

var (
	freePlan = upscale.Plan{Name: "free", MonthlyImages: 3, MaxFileBytes: 1 << 20}
	proPlan  = upscale.Plan{Name: "pro", Paid: true, MonthlyImages: 3, MaxFileBytes: 1 << 20}
	tinyPlan = upscale.Plan{Name: "tiny", MonthlyImages: 3, MaxFileBytes: 1000}
)

// env is a Handler wired to in-memory stores and a loopback origin that
// serves test images.
type env struct {
	t       *testing.T
	handler *upscale.Handler
	keys    *upscale.MemoryKeyStore
	ledger  *upscale.MemoryLedger
	blobs   *upscale.MemoryBlobStore
	clock   *upscaletest.Clock
	origin  *httptest.Server
	hits    atomic.Int64 // requests the origin received
	flaky   atomic.Int64 // requests for /flaky-once.png
	lastHdr atomic.Value // http.Header of the origin's last request
}

func newEnv(t *testing.T, configure ...func(*upscale.Config)) *env {
	t.Helper()
	e := &env{t: t, keys: upscale.NewMemoryKeyStore(), clock: upscaletest.NewClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))}
	e.ledger = upscale.NewMemoryLedger(upscale.LedgerOptions{Now: e.clock.Now})
	e.blobs = newMemoryBlobs(t, upscale.MemoryBlobStoreOptions{Now: e.clock.Now})
	e.origin = httptest.NewServer(http.HandlerFunc(e.serveOrigin))
	t.Cleanup(e.origin.Close)
	ctx := context.Background()
	e.keys.AddKey(ctx, keyFree, "free")
	e.keys.AddKey(ctx, keyPro, "pro")
	e.putAccount(upscale.Account{ID: "free", Plan: freePlan})
	e.putAccount(upscale.Account{ID: "pro", Plan: proPlan})
	cfg := upscale.Config{
		Keys:                 e.keys,
		Ledger:               e.ledger,
		Upscaler:             upscaletest.PixelUpscaler{},
		Blobs:                e.blobs,
		FreeTierMaxFileBytes: freeTierBytes,
		Fetch:                upscale.FetchPolicy{AllowPrivateNetworks: true}, // the origin is on loopback
		Capacity: upscale.Capacity{
			AccountShare: 1000, // the capacity tests fill the places from one account; TestAccountShare sets its own
			IdleRelease:  -1,   // no timer to outlive a test; TestIdleRelease sets its own
		},
		Logger: slog.New(slog.DiscardHandler),
		Now:    e.clock.Now,
	}
	for _, c := range configure {
		c(&cfg)
	}
	h, err := upscale.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.StartJobs(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.StopJobs(context.Background()); err != nil {
			t.Errorf("StopJobs: %v", err)
		}
	})
	e.handler = h
	return e
}

var (
	smallPNG = mustPNG(upscaletest.TestImage(16, 12))
	bigPNG   = mustPNG(noise(48, 48)) // incompressible: well over freeTierBytes
)

func (e *env) serveOrigin(w http.ResponseWriter, r *http.Request) {
	e.hits.Add(1)
	e.lastHdr.Store(r.Header.Clone())
	switch r.URL.Path {
	case "/small.png", "/a.png", "/ok.png":
		w.Write(smallPNG)
	case "/big.png":
		w.Write(bigPNG)
	case "/text":
		io.WriteString(w, "this is not an image")
	case "/unavailable.png":
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
	case "/flaky-once.png":
		if e.flaky.Add(1) == 1 {
			http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
			return
		}
		w.Write(smallPNG)
	case "/slow.png":
		time.Sleep(300 * time.Millisecond)
		w.Write(smallPNG)
	case "/redirect-loop":
		http.Redirect(w, r, "/redirect-loop", http.StatusFound)
	case "/redirect-ftp":
		http.Redirect(w, r, "ftp://example.com/a.png", http.StatusFound)
	case "/redirect":
		if r.URL.Query().Has("close") { // make the client dial (and resolve) again for the next hop
			w.Header().Set("Connection", "close")
		}
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
	case "/redirect-small":
		http.Redirect(w, r, "/small.png", http.StatusFound)
	default:
		http.NotFound(w, r)
	}
}

func (e *env) url(path string) string { return e.origin.URL + path }

func (e *env) putAccount(a upscale.Account) {
	e.t.Helper()
	if err := e.ledger.PutAccount(context.Background(), a); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) balance(account string) upscale.Balance {
	e.t.Helper()
	b, err := e.ledger.Balance(context.Background(), account)
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

// post sends body to the handler with key (none when empty).
func (e *env) post(key, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/api/v1/upscale", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	if key != "" {
		r.Header.Set("Authorization", "Bearer "+key)
	}
	return e.serve(r)
}

// serve runs r through the handler, and holds every answer of every test
// to the API's contract, api/openapi.yaml.
func (e *env) serve(r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	e.handler.ServeHTTP(w, r)
	checkAnswer(e.t, r, w)
	return w
}

func body(url string, fields ...string) string {
	s := fmt.Sprintf(`{"imageUrl": %q`, url)
	for _, f := range fields {
		s += ", " + f
	}
	return s + "}"
}

// checkProblem asserts an application/problem+json error with status and code.
func checkProblem(t *testing.T, w *httptest.ResponseRecorder, status int, code string) upscale.Problem {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status %d, want %d; body %s", w.Code, status, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	var p upscale.Problem
	dec := json.NewDecoder(w.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("problem body: %v", err)
	}
	if p.Code != code || p.Status != status || p.Title == "" || p.Detail == "" || !strings.HasSuffix(p.Type, code) {
		t.Errorf("problem %+v, want code %q, status %d, a title, a detail and a type naming the code", p, code, status)
	}
	return p
}

// checkOK asserts a success paid by via and returns the decoded image.
func checkOK(t *testing.T, w *httptest.ResponseRecorder, via upscale.Pool) image.Image {
	t.Helper()
	if w.Code != http.StatusOK {
		t.Fatalf("status %d, want 200; body %s", w.Code, w.Body)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(w.Body.Bytes(), &fields); err != nil {
		t.Fatal(err)
	}
	if len(fields) != 3 || string(fields["resizedTo"]) != "null" || string(fields["via"]) != `"`+string(via)+`"` {
		t.Fatalf("body %s: want exactly url, resizedTo null and via %q", w.Body, via)
	}
	var link string
	json.Unmarshal(fields["url"], &link)
	return upscaletest.ResultPNG(t, link)
}

func TestUpscaleOK(t *testing.T) {
	e := newEnv(t)
	roomy := upscale.Plan{Name: "roomy", MonthlyImages: 100, MaxFileBytes: 1 << 20}
	e.putAccount(upscale.Account{ID: "free", Plan: roomy})
	for _, tc := range []struct {
		name   string
		fields []string
		scale  int
	}{
		{"DefaultScale", nil, 2},
		{"Scale4", []string{`"scale": 4`}, 4},
		{"ScaleAsFloat", []string{`"scale": 2.0`}, 2},
		{"AllFields", []string{`"scale": 2`, `"imageType": "anime"`, `"denoise": "none"`}, 2},
		{"NullsAreDefaults", []string{`"scale": null`, `"imageType": null`, `"denoise": null`}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := e.post(keyFree, body(e.url("/small.png"), tc.fields...))
			img := checkOK(t, w, upscale.PoolFree)
			if got, want := img.Bounds().Size(), image.Pt(16*tc.scale, 12*tc.scale); got != want {
				t.Errorf("result %v, want %v", got, want)
			}
			if got, want := w.Header().Get("Upscale-Engine"), fmt.Sprintf("repeat;scale=%d", tc.scale); got != want {
				t.Errorf("Upscale-Engine %q, want the engine's %q", got, want)
			}
		})
	}
	t.Run("BearerCaseInsensitive", func(t *testing.T) {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body(e.url("/small.png"))))
		r.Header.Set("Authorization", "bEaReR "+keyPro)
		checkOK(t, e.serve(r), upscale.PoolFree)
	})
	t.Run("Redirect", func(t *testing.T) {
		checkOK(t, e.post(keyPro, body(e.url("/redirect-small"))), upscale.PoolFree)
	})
}

func TestCallerHeadersNotForwarded(t *testing.T) {
	e := newEnv(t)
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body(e.url("/small.png"))))
	r.Header.Set("Authorization", "Bearer "+keyFree)
	r.Header.Set("Cookie", "session=secret")
	r.Header.Set("X-Forwarded-For", "10.1.2.3")
	r.Header.Set("User-Agent", "caller-agent")
	checkOK(t, e.serve(r), upscale.PoolFree)
	got := e.lastHdr.Load().(http.Header)
	for _, name := range []string{"Authorization", "Cookie", "X-Forwarded-For"} {
		if v := got.Get(name); v != "" {
			t.Errorf("origin received %s: %q", name, v)
		}
	}
	if ua := got.Get("User-Agent"); !strings.HasPrefix(ua, "upscale") {
		t.Errorf("origin saw User-Agent %q, want the service's own", ua)
	}
}

// recordingUpscaler remembers the options it was called with.
type recordingUpscaler struct {
	upscaletest.PixelUpscaler
	got chan upscale.Params
}

func (u recordingUpscaler) Upscale(ctx context.Context, src []byte, opts upscale.Params) (upscale.Image, error) {
	u.got <- opts
	return u.PixelUpscaler.Upscale(ctx, src, opts)
}

func TestParamsReachEngine(t *testing.T) {
	rec := recordingUpscaler{got: make(chan upscale.Params, 1)}
	e := newEnv(t, func(c *upscale.Config) { c.Upscaler = rec })
	for _, tc := range []struct {
		fields []string
		want   upscale.Params
	}{
		{nil, upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseMax}},
		{[]string{`"scale": 4`, `"imageType": "anime"`, `"denoise": "low"`}, upscale.Params{Scale: 4, ImageType: upscale.Anime, Denoise: upscale.DenoiseLow}},
	} {
		checkOK(t, e.post(keyPro, body(e.url("/small.png"), tc.fields...)), upscale.PoolFree)
		if got := <-rec.got; got != tc.want {
			t.Errorf("engine got %+v, want %+v", got, tc.want)
		}
	}
}

func TestMethodNotAllowed(t *testing.T) {
	e := newEnv(t)
	for _, method := range []string{http.MethodGet, http.MethodPut, http.MethodDelete, http.MethodHead} {
		w := e.serve(httptest.NewRequest(method, "/api/v1/upscale", nil))
		if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != "POST" {
			t.Errorf("%s: status %d, Allow %q; want 405 and POST", method, w.Code, w.Header().Get("Allow"))
		}
		if method != http.MethodHead {
			checkProblem(t, w, http.StatusMethodNotAllowed, "method_not_allowed")
		}
	}
}

func TestUnauthorized(t *testing.T) {
	e := newEnv(t)
	revoked := "upk_test_revoked_0123456789"
	e.keys.AddKey(context.Background(), revoked, "free")
	e.keys.RevokeKey(context.Background(), revoked)
	valid := body(e.url("/small.png"))
	cases := map[string]func(r *http.Request){
		"Missing":     func(r *http.Request) {},
		"Empty":       func(r *http.Request) { r.Header.Set("Authorization", "") },
		"BasicScheme": func(r *http.Request) { r.Header.Set("Authorization", "Basic "+keyFree) },
		"NoKey":       func(r *http.Request) { r.Header.Set("Authorization", "Bearer") },
		"TooShort":    func(r *http.Request) { r.Header.Set("Authorization", "Bearer abc") },
		"TwoSpaces":   func(r *http.Request) { r.Header.Set("Authorization", "Bearer  "+keyFree) },
		"Unknown":     func(r *http.Request) { r.Header.Set("Authorization", "Bearer upk_test_unknown_0123456789") },
		"Revoked":     func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+revoked) },
		"TwoHeaders": func(r *http.Request) {
			r.Header.Add("Authorization", "Bearer "+keyFree)
			r.Header.Add("Authorization", "Bearer "+keyFree)
		},
		"Huge": func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+strings.Repeat("k", 64<<10)) },
	}
	var first []byte
	for name, setAuth := range cases {
		t.Run(name, func(t *testing.T) {
			for _, b := range []string{valid, "not json"} { // the key is checked before the body
				r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(b))
				setAuth(r)
				w := e.serve(r)
				raw := w.Body.Bytes()
				checkProblem(t, w, http.StatusUnauthorized, "unauthorized")
				if !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("WWW-Authenticate %q, want a Bearer challenge", w.Header().Get("WWW-Authenticate"))
				}
				if first == nil {
					first = raw
				} else if !bytes.Equal(raw, first) {
					t.Errorf("body %s differs from %s: every refused key must get the same answer", raw, first)
				}
			}
		})
	}
	if e.hits.Load() != 0 {
		t.Errorf("origin was fetched %d times for unauthorized requests", e.hits.Load())
	}
	if b := e.balance("free"); b.Free != 3 {
		t.Errorf("free pool %d after refused requests, want 3", b.Free)
	}
}

func TestBadRequest(t *testing.T) {
	e := newEnv(t)
	small := e.url("/small.png")
	cases := []struct {
		name, body, code string
	}{
		{"Empty", ``, "invalid_request"},
		{"NotJSON", `imageUrl=x`, "invalid_request"},
		{"Array", `[{"imageUrl": "` + small + `"}]`, "invalid_request"},
		{"BareNull", `null`, "invalid_request"},
		{"Truncated", `{"imageUrl": "` + small + `"`, "invalid_request"},
		{"UnknownField", body(small, `"size": 2`), "invalid_request"},
		{"FieldCase", `{"IMAGEURL": "` + small + `"}`, "invalid_request"},
		{"DuplicateField", body(small, `"imageUrl": "`+small+`"`), "invalid_request"},
		{"TrailingData", body(small) + `{}`, "invalid_request"},
		{"InvalidUTF8", "{\"imageUrl\": \"" + small + "\xff\"}", "invalid_request"},
		{"TooLarge", body(small + "?" + strings.Repeat("a", 16<<10)), "invalid_request"},
		{"ScaleOutOfRange", body(small, `"scale": 1e400`), "invalid_request"},
		{"MissingURL", `{"scale": 2}`, "invalid_image_url"},
		{"NullURL", `{"imageUrl": null}`, "invalid_image_url"},
		{"EmptyURL", body(""), "invalid_image_url"},
		{"URLNotString", `{"imageUrl": 42}`, "invalid_image_url"},
		{"RelativeURL", body("/small.png"), "invalid_image_url"},
		{"SchemeRelative", body("//127.0.0.1/a.png"), "invalid_image_url"},
		{"FTP", body("ftp://example.com/a.png"), "invalid_image_url"},
		{"File", body("file:///etc/passwd"), "invalid_image_url"},
		{"Opaque", body("http:127.0.0.1"), "invalid_image_url"},
		{"UserInfo", body("http://user:pass@example.com/a.png"), "invalid_image_url"},
		{"URLTooLong", body("https://example.com/" + strings.Repeat("a", 2048)), "invalid_image_url"},
		{"ScaleString", body(small, `"scale": "2"`), "invalid_scale"},
		{"Scale3", body(small, `"scale": 3`), "invalid_scale"},
		{"ScaleFraction", body(small, `"scale": 2.5`), "invalid_scale"},
		{"ScaleZero", body(small, `"scale": 0`), "invalid_scale"},
		{"ScaleNegative", body(small, `"scale": -2`), "invalid_scale"},
		{"Scale32", body(small, `"scale": 32`), "invalid_scale"},
		{"ScaleBool", body(small, `"scale": true`), "invalid_scale"},
		{"ImageTypeCase", body(small, `"imageType": "Photo"`), "invalid_image_type"},
		{"ImageTypeUnknown", body(small, `"imageType": "cartoon"`), "invalid_image_type"},
		{"ImageTypeNumber", body(small, `"imageType": 1`), "invalid_image_type"},
		{"DenoiseCase", body(small, `"denoise": "MAX"`), "invalid_denoise"},
		{"DenoiseUnknown", body(small, `"denoise": "extreme"`), "invalid_denoise"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := checkProblem(t, e.post(keyFree, tc.body), http.StatusBadRequest, tc.code)
			if tc.code == "invalid_scale" && !strings.Contains(p.Detail, "2, 4, 8 or 16") {
				t.Errorf("detail %q does not list the scales", p.Detail)
			}
		})
	}
	if e.hits.Load() != 0 {
		t.Errorf("origin was fetched %d times for invalid requests", e.hits.Load())
	}
	if b := e.balance("free"); b.Free != 3 {
		t.Errorf("free pool %d after invalid requests, want 3", b.Free)
	}
}

func TestSourceErrors(t *testing.T) {
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL + "/a.png"
	closed.Close()
	// A TLS source that accepts the connection and never answers the
	// handshake.
	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()
	go func() {
		for {
			conn, err := mute.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { conn.Close() })
		}
	}()
	strict := newEnv(t, func(c *upscale.Config) { c.Fetch.AllowPrivateNetworks = false })
	lenient := newEnv(t, func(c *upscale.Config) { c.Fetch.Timeout = 100 * time.Millisecond })
	lenient.putAccount(upscale.Account{ID: "free", Plan: tinyPlan})
	cases := []struct {
		name string
		e    *env
		url  string
		code string
	}{
		{"Loopback", strict, "http://127.0.0.1/a.png", "source_forbidden"},
		{"LoopbackOriginPort", strict, strict.url("/small.png"), "source_forbidden"},
		{"IPv6Loopback", strict, "http://[::1]/a.png", "source_forbidden"},
		{"Metadata", strict, "http://169.254.169.254/latest/meta-data/", "source_forbidden"},
		{"Private", strict, "http://10.0.0.1/a.png", "source_forbidden"},
		{"Unspecified", strict, "http://0.0.0.0/a.png", "source_forbidden"},
		{"MappedLoopback", strict, "http://[::ffff:127.0.0.1]/a.png", "source_forbidden"},
		{"Port22", strict, "http://example.com:22/a.png", "source_forbidden"},
		{"RedirectToFTP", lenient, lenient.url("/redirect-ftp"), "source_forbidden"},
		{"NotFound", lenient, lenient.url("/missing.png"), "source_unreachable"},
		{"OriginFailing", lenient, lenient.url("/unavailable.png"), "source_unavailable"},
		{"ConnectionRefused", lenient, closedURL, "source_unavailable"},
		{"TLSHandshakeHangs", lenient, "https://" + mute.Addr().String() + "/a.png", "source_unavailable"},
		{"RedirectLoop", lenient, lenient.url("/redirect-loop"), "source_unreachable"},
		{"Timeout", lenient, lenient.url("/slow.png"), "source_unreachable"},
		{"NotAnImage", lenient, lenient.url("/text"), "unsupported_image"},
		{"LargerThanPlan", lenient, lenient.url("/big.png"), "image_too_large"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.e.balance("free")
			checkProblem(t, tc.e.post(keyFree, body(tc.url)), sourceStatus(tc.code), tc.code)
			if after := tc.e.balance("free"); after != before {
				t.Errorf("balance %+v after a failed request, want %+v", after, before)
			}
		})
	}
	if n := strict.hits.Load(); n != 0 {
		t.Errorf("the strict handler reached the loopback origin %d times", n)
	}
	if n := lenient.hits.Load(); n > 5+1+6 { // at most MaxRedirects+1 hops for the loop, one for each other case
		t.Errorf("origin hit %d times", n)
	}
}

// sourceStatus is the status of a source failure's code: 502 for one that
// may pass, 400 for the rest.
func sourceStatus(code string) int {
	if code == "source_unavailable" {
		return http.StatusBadGateway
	}
	return http.StatusBadRequest
}

func TestWhoPays(t *testing.T) {
	t.Run("PoolOrder", func(t *testing.T) {
		e := newEnv(t)
		e.putAccount(upscale.Account{ID: "free", Plan: upscale.Plan{Name: "one", MonthlyImages: 1, MaxFileBytes: 1 << 20}, ShareBonus: 1, Credits: 1})
		for _, via := range []upscale.Pool{upscale.PoolFree, upscale.PoolShareBonus, upscale.PoolCredit} {
			checkOK(t, e.post(keyFree, body(e.url("/small.png"))), via)
		}
		hits := e.hits.Load()
		checkProblem(t, e.post(keyFree, body(e.url("/small.png"))), http.StatusTooManyRequests, "quota_exhausted")
		if e.hits.Load() != hits {
			t.Errorf("an exhausted account's image was fetched")
		}
	})
	t.Run("Unlimited", func(t *testing.T) {
		e := newEnv(t)
		e.putAccount(upscale.Account{ID: "pro", Plan: upscale.Plan{Name: "unlimited", Paid: true, Unlimited: true, MaxFileBytes: 1 << 20}})
		for range 3 {
			checkOK(t, e.post(keyPro, body(e.url("/big.png"), `"scale": 8`)), upscale.PoolUnlimited)
		}
	})
	t.Run("ScaleNeedsPaid", func(t *testing.T) {
		e := newEnv(t)
		for _, scale := range []string{`"scale": 8`, `"scale": 16`} {
			hits := e.hits.Load()
			p := checkProblem(t, e.post(keyFree, body(e.url("/small.png"), scale)), http.StatusForbidden, "paid_plan_required")
			if !strings.Contains(p.Detail, "8 and 16") {
				t.Errorf("detail %q does not name the scales that need paid capability", p.Detail)
			}
			if e.hits.Load() != hits {
				t.Errorf("%s: source fetched although the account cannot pay", scale)
			}
			checkOK(t, e.post(keyPro, body(e.url("/small.png"), scale)), upscale.PoolFree)
		}
		e.putAccount(upscale.Account{ID: "free", Plan: freePlan, Credits: 1})
		checkOK(t, e.post(keyFree, body(e.url("/small.png"), `"scale": 8`)), upscale.PoolCredit)
		if got, want := e.balance("free"), (upscale.Balance{Plan: freePlan, Free: 3}); got != want {
			t.Errorf("balance %+v, want %+v", got, want)
		}
	})
	t.Run("FileSizeNeedsPaid", func(t *testing.T) {
		e := newEnv(t)
		checkProblem(t, e.post(keyFree, body(e.url("/big.png"))), http.StatusForbidden, "paid_plan_required")
		if got, want := e.balance("free"), (upscale.Balance{Plan: freePlan, Free: 3}); got != want {
			t.Errorf("balance %+v after 403, want %+v", got, want)
		}
		checkOK(t, e.post(keyPro, body(e.url("/big.png"))), upscale.PoolFree)
		// A free account with credits pays for the big file with a credit,
		// and the free unit first reserved goes back.
		e.putAccount(upscale.Account{ID: "free", Plan: freePlan, Credits: 1})
		checkOK(t, e.post(keyFree, body(e.url("/big.png"))), upscale.PoolCredit)
		if got, want := e.balance("free"), (upscale.Balance{Plan: freePlan, Free: 3}); got != want {
			t.Errorf("balance %+v, want %+v", got, want)
		}
		// With credits gone but free images left: 403, nothing charged.
		checkProblem(t, e.post(keyFree, body(e.url("/big.png"))), http.StatusForbidden, "paid_plan_required")
	})
	t.Run("PaidPlanExhausted", func(t *testing.T) {
		e := newEnv(t)
		e.putAccount(upscale.Account{ID: "pro", Plan: upscale.Plan{Name: "pro0", Paid: true, MaxFileBytes: 1 << 20}})
		checkProblem(t, e.post(keyPro, body(e.url("/small.png"), `"scale": 16`)), http.StatusTooManyRequests, "quota_exhausted")
	})
}

// failingUpscaler returns err, after sleeping for delay (ignoring ctx, as a
// stuck engine would).
type failingUpscaler struct {
	err   error
	delay time.Duration
}

func (u failingUpscaler) Upscale(context.Context, []byte, upscale.Params) (upscale.Image, error) {
	time.Sleep(u.delay)
	return upscale.Image{}, u.err
}

type failingBlobs struct{}

func (failingBlobs) Put(context.Context, string, []byte, string, time.Time) (string, error) {
	return "", errors.New("disk full at /var/lib/upscale/blobs")
}

func (failingBlobs) Delete(context.Context, string, time.Time) error { return nil }

// timingOutBlobs is a BlobStore whose every Put passes its own deadline.
type timingOutBlobs struct{ failingBlobs }

func (timingOutBlobs) Put(ctx context.Context, _ string, _ []byte, _ string, _ time.Time) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	<-ctx.Done()
	return "", fmt.Errorf("put object: %w", ctx.Err())
}

func TestEngineAndStorageFailures(t *testing.T) {
	cases := []struct {
		name   string
		config func(*upscale.Config)
		status int
		code   string
	}{
		{"UpstreamError", func(c *upscale.Config) {
			c.Upscaler = failingUpscaler{err: fmt.Errorf("%w: model crashed", upscale.ErrUpstream)}
		}, 502, "upstream_error"},
		{"UpstreamTimeout", func(c *upscale.Config) {
			c.Upscaler = failingUpscaler{delay: 300 * time.Millisecond}
			c.EngineTimeout = 50 * time.Millisecond
		}, 504, "upstream_timeout"},
		{"EngineTooLarge", func(c *upscale.Config) { c.Upscaler = failingUpscaler{err: upscale.ErrImageTooLarge} }, 400, "image_too_large"},
		{"UnknownEngineError", func(c *upscale.Config) { c.Upscaler = failingUpscaler{err: errors.New("secret path /srv/model.bin")} }, 500, "internal_error"},
		{"StorageFailure", func(c *upscale.Config) { c.Blobs = failingBlobs{} }, 500, "internal_error"},
		// A store's timeout is not the engine's: only EngineTimeout is upstream_timeout.
		{"StorageTimeout", func(c *upscale.Config) { c.Blobs = timingOutBlobs{} }, 504, "timeout"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.config)
			p := checkProblem(t, e.post(keyFree, body(e.url("/small.png"))), tc.status, tc.code)
			if strings.Contains(p.Detail, "/srv") || strings.Contains(p.Detail, "/var") {
				t.Errorf("detail %q leaks an internal path", p.Detail)
			}
			if got, want := e.balance("free"), (upscale.Balance{Plan: freePlan, Free: 3}); got != want {
				t.Errorf("balance %+v after a failure, want %+v", got, want)
			}
		})
	}
}

// TestHostDeadline: a host's timeout middleware ends the request while
// the engine works. The caller gets a 504 problem that does not blame the
// engine, not an empty 200, and is charged nothing.
func TestHostDeadline(t *testing.T) {
	e := newEnv(t, func(c *upscale.Config) { c.Upscaler = slowUpscaler{took: time.Second} })
	withDeadline := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(r.Context(), 100*time.Millisecond)
			defer cancel()
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
	r := httptest.NewRequest(http.MethodPost, "/api/v1/upscale", strings.NewReader(body(e.url("/small.png"))))
	r.Header.Set("Authorization", "Bearer "+keyFree)
	w := httptest.NewRecorder()
	withDeadline(e.handler).ServeHTTP(w, r)
	checkAnswer(t, r, w)
	checkProblem(t, w, http.StatusGatewayTimeout, "timeout")
	if got, want := e.balance("free"), (upscale.Balance{Plan: freePlan, Free: 3}); got != want {
		t.Errorf("balance %+v after the deadline, want %+v", got, want)
	}
}

func TestLinkExpiry(t *testing.T) {
	e := newEnv(t, func(c *upscale.Config) { c.LinkTTL = 30 * time.Minute })
	w := e.post(keyFree, body(e.url("/small.png")))
	var resp upscale.Response
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil || resp.URL == "" {
		t.Fatalf("response %s: %v", w.Body, err)
	}
	status := func() int {
		r, err := http.Get(resp.URL)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		return r.StatusCode
	}
	e.clock.Advance(29 * time.Minute)
	if got := status(); got != http.StatusOK {
		t.Fatalf("link after 29 minutes: %d, want 200", got)
	}
	e.clock.Advance(2 * time.Minute)
	if got := status(); got != http.StatusNotFound {
		t.Errorf("link after 31 minutes: %d, want 404", got)
	}
}

func TestConcurrentRequestsSpendEachUnitOnce(t *testing.T) {
	const n = 200
	// A queue with room for every request: the test holds the ledger to
	// its count, not admission.
	e := newEnv(t, func(c *upscale.Config) { c.Capacity.QueueLength = n })
	e.putAccount(upscale.Account{ID: "free", Plan: upscale.Plan{Name: "two", MonthlyImages: 2, MaxFileBytes: 1 << 20}, ShareBonus: 1, Credits: 2})
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	for range n {
		wg.Go(func() {
			w := e.post(keyFree, body(e.url("/small.png")))
			mu.Lock()
			statuses[w.Code]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if statuses[200] != 5 || statuses[429] != n-5 || len(statuses) != 2 {
		t.Errorf("statuses %v, want 5×200 and %d×429", statuses, n-5)
	}
	if b := e.balance("free"); b.Free != 0 || b.ShareBonus != 0 || b.Credits != 0 {
		t.Errorf("balance %+v, want every pool at 0", b)
	}
}

func TestCallerGoneReleases(t *testing.T) {
	started := make(chan struct{})
	e := newEnv(t, func(c *upscale.Config) {
		c.Upscaler = blockingUpscaler{started}
	})
	ctx, cancel := context.WithCancel(context.Background())
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/", strings.NewReader(body(e.url("/small.png"))))
	r.Header.Set("Authorization", "Bearer "+keyFree)
	done := make(chan struct{})
	go func() { e.serve(r); close(done) }()
	<-started
	cancel()
	<-done
	if got := e.balance("free").Free; got != 3 {
		t.Errorf("free pool %d after the caller went away, want 3", got)
	}
}

type blockingUpscaler struct{ started chan struct{} }

func (u blockingUpscaler) Upscale(ctx context.Context, _ []byte, _ upscale.Params) (upscale.Image, error) {
	close(u.started)
	<-ctx.Done()
	return upscale.Image{}, ctx.Err()
}

func TestNewValidates(t *testing.T) {
	keys, ledger := upscale.NewMemoryKeyStore(), upscale.NewMemoryLedger(upscale.LedgerOptions{})
	blobs, _ := upscale.NewMemoryBlobStore(upscale.MemoryBlobStoreOptions{BaseURL: "http://localhost/o"})
	full := upscale.Config{Keys: keys, Ledger: ledger, Upscaler: upscaletest.PixelUpscaler{}, Blobs: blobs}
	if _, err := upscale.New(full); err != nil {
		t.Fatalf("New with every store: %v", err)
	}
	// Each mistake is named by its field, as a person fixing it looks for it.
	for field, c := range map[string]func(*upscale.Config){
		"Config.Keys":                       func(c *upscale.Config) { c.Keys = nil },
		"Config.Ledger":                     func(c *upscale.Config) { c.Ledger = nil },
		"Config.Upscaler":                   func(c *upscale.Config) { c.Upscaler = nil },
		"Config.Blobs":                      func(c *upscale.Config) { c.Blobs = nil },
		"Config.EngineTimeout":              func(c *upscale.Config) { c.EngineTimeout = -time.Second },
		"Config.IdempotencyTTL":             func(c *upscale.Config) { c.IdempotencyTTL = 25 * time.Hour }, // past CommitMemory
		"Config.Fetch.Timeout":              func(c *upscale.Config) { c.Fetch.Timeout = -time.Second },
		"Config.Capacity.QueueLength":       func(c *upscale.Config) { c.Capacity.QueueLength = -1 },
		"Config.Capacity.MemoryBudget":      func(c *upscale.Config) { c.Capacity.MemoryBudget = -1 },
		"Config.Capacity.EngineConcurrency": func(c *upscale.Config) { c.Capacity.EngineConcurrency = -1 },
		"Config.SettleTimeout": func(c *upscale.Config) {
			c.Ledger = upscale.NewMemoryLedger(upscale.LedgerOptions{ReservationTTL: time.Minute}) // shorter than a request
		},
	} {
		cfg := full
		c(&cfg)
		if _, err := upscale.New(cfg); err == nil || !(strings.Contains(err.Error(), field+" ") || strings.Contains(err.Error(), field+":")) {
			t.Errorf("New with a bad %s: %v; want an error naming it", field, err)
		}
	}
	// A backend written against an optional interface's earlier methods
	// compiles; New says so rather than let it lose what it gave. One
	// that has the new methods beside the old is what it should be.
	jobs := upscale.NewMemoryJobQueue(upscale.MemoryJobQueueOptions{})
	for _, c := range []struct {
		name, want string // want: what the error names; empty, no error
		set        func(*upscale.Config)
	}{
		{"SourceSize", "SourcePixels", func(c *upscale.Config) { c.Upscaler = sourceSizeUpscaler{c.Upscaler} }},
		{"SourceSize and SourcePixels", "", func(c *upscale.Config) {
			c.Upscaler = bothSizesUpscaler{}
		}},
		{"CountJobs of ints", "CountAccountJobs", func(c *upscale.Config) { c.Jobs = oldCountingQueue{jobs} }},
		{"CountJobs without CountAccountJobs", "CountAccountJobs", func(c *upscale.Config) { c.Jobs = halfCountingQueue{jobs} }},
	} {
		cfg := full
		c.set(&cfg)
		_, err := upscale.New(cfg)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("New with a backend that has %s: %v; want an error naming %q (none if empty)", c.name, err, c.want)
		}
	}
}

// sourceSizeUpscaler is a host's Upscaler written against SizeReader's
// earlier method.
type sourceSizeUpscaler struct{ upscale.Upscaler }

func (sourceSizeUpscaler) SourceSize([]byte) (width, height int, err error) { return 1, 1, nil }

// bothSizesUpscaler kept SourceSize beside SizeReader's SourcePixels.
type bothSizesUpscaler struct{ upscaletest.PixelUpscaler }

func (bothSizesUpscaler) SourceSize([]byte) (width, height int, err error) { return 1, 1, nil }

// oldCountingQueue is a host's JobQueue written against JobCounter's
// earlier method.
type oldCountingQueue struct{ upscale.JobQueue }

func (oldCountingQueue) CountJobs(context.Context) (queued, running int, err error) { return 0, 0, nil }

// halfCountingQueue is a host's JobQueue that changed CountJobs for the
// new JobCounter but has no CountAccountJobs.
type halfCountingQueue struct{ upscale.JobQueue }

func (halfCountingQueue) CountJobs(context.Context) (upscale.JobCounts, error) {
	return upscale.JobCounts{}, nil
}

func mustPNG(img image.Image) []byte {
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		panic(err)
	}
	return b.Bytes()
}

func noise(w, h int) image.Image {
	rng := rand.New(rand.NewPCG(1, 2))
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.SetNRGBA(x, y, color.NRGBA{uint8(rng.Uint32()), uint8(rng.Uint32()), uint8(rng.Uint32()), 255})
		}
	}
	return img
}

// TestOverloaded: with the engine's one slot taken and the one queue place
// filled, a request is refused at once with 503 overloaded and a
// Retry-After; its source is not fetched and nothing is reserved. The
// others finish, and once they have, a request gets through again.
func TestOverloaded(t *testing.T) {
	u := upscaletest.GatedUpscaler{Entered: make(chan struct{}, 3), Gate: make(chan struct{})}
	e := newEnv(t, func(c *upscale.Config) {
		c.Upscaler = u
		c.Capacity.EngineConcurrency = 1
		c.Capacity.QueueLength = 1
	})
	results := make(chan *httptest.ResponseRecorder, 2)
	go func() { results <- e.post(keyFree, body(e.url("/small.png"))) }()
	<-u.Entered // the first is in the engine
	go func() { results <- e.post(keyFree, body(e.url("/small.png"))) }()
	for e.hits.Load() < 2 { // the second has fetched its source and waits for the engine
		time.Sleep(time.Millisecond)
	}
	free := e.balance("free").Free

	w := e.post(keyFree, body(e.url("/small.png")))
	checkProblem(t, w, http.StatusServiceUnavailable, "overloaded")
	if ra := w.Header().Get("Retry-After"); ra == "" || ra == "0" {
		t.Errorf("Retry-After %q, want a number of seconds", ra)
	}
	if got := e.hits.Load(); got != 2 {
		t.Errorf("the origin was asked %d times, want 2: the refused request must not fetch", got)
	}
	if got := e.balance("free").Free; got != free {
		t.Errorf("free pool %d after the refusal, want %d: nothing may be reserved", got, free)
	}

	close(u.Gate)
	for range 2 {
		checkOK(t, <-results, upscale.PoolFree)
	}
	checkOK(t, e.post(keyPro, body(e.url("/small.png"))), upscale.PoolFree)
}

// gatedKeyStore holds every key lookup until gate closes, and counts the
// lookups under way.
type gatedKeyStore struct {
	upscale.KeyStore
	entered      chan struct{}
	gate         chan struct{}
	now, highest atomic.Int32
}

func (k *gatedKeyStore) Authenticate(ctx context.Context, key string) (string, error) {
	n := k.now.Add(1)
	defer k.now.Add(-1)
	for old := k.highest.Load(); n > old && !k.highest.CompareAndSwap(old, n); old = k.highest.Load() {
	}
	k.entered <- struct{}{}
	<-k.gate
	return k.KeyStore.Authenticate(ctx, key)
}

// TestBurstBoundsKeyLookups: ten requests arriving at once, with room for
// two, cost the KeyStore two lookups at once; the other eight are refused
// as overloaded without a lookup.
func TestBurstBoundsKeyLookups(t *testing.T) {
	var keys *gatedKeyStore
	e := newEnv(t, func(c *upscale.Config) {
		keys = &gatedKeyStore{KeyStore: c.Keys, entered: make(chan struct{}, 10), gate: make(chan struct{})}
		c.Keys = keys
		c.Capacity.EngineConcurrency = 1
		c.Capacity.QueueLength = 1
	})
	results := make(chan *httptest.ResponseRecorder, 10)
	for range 10 {
		go func() { results <- e.post(keyPro, body(e.url("/small.png"))) }()
	}
	release := sync.OnceFunc(func() { close(keys.gate) })
	t.Cleanup(release)
	<-keys.entered
	<-keys.entered
	for range 8 {
		select {
		case w := <-results:
			checkProblem(t, w, http.StatusServiceUnavailable, "overloaded")
		case <-time.After(10 * time.Second):
			t.Fatalf("%d key lookups under way and no refusal: every request went to the KeyStore", keys.now.Load())
		}
	}
	release()
	for range 2 {
		checkOK(t, <-results, upscale.PoolFree)
	}
	if got := keys.highest.Load(); got != 2 {
		t.Errorf("%d key lookups at once, want 2: one per place", got)
	}
}

// firstReadSignal is a request body that says when it is first read, and
// then sends nothing until the test ends.
type firstReadSignal struct {
	read chan struct{}
	once sync.Once
	stop <-chan struct{}
}

func (b *firstReadSignal) Read(p []byte) (int, error) {
	b.once.Do(func() { close(b.read) })
	<-b.stop
	return 0, io.ErrUnexpectedEOF
}

// TestSlowBodiesHoldNoPlace: callers that never finish sending their body
// do not take the places of those that do.
func TestSlowBodiesHoldNoPlace(t *testing.T) {
	e := newEnv(t, func(c *upscale.Config) {
		c.Capacity.EngineConcurrency = 1
		c.Capacity.QueueLength = 1
	})
	stop := make(chan struct{})
	var stalled sync.WaitGroup
	for range 2 {
		b := &firstReadSignal{read: make(chan struct{}), stop: stop}
		r := httptest.NewRequest(http.MethodPost, "/api/v1/upscale", b)
		r.Header.Set("Authorization", "Bearer "+keyPro)
		stalled.Go(func() { e.serve(r) })
		<-b.read
	}
	checkOK(t, e.post(keyPro, body(e.url("/small.png"))), upscale.PoolFree)
	close(stop)
	stalled.Wait()
}

// slowUpscaler takes a fixed time for every image.
type slowUpscaler struct {
	upscaletest.PixelUpscaler
	took time.Duration
}

func (u slowUpscaler) Upscale(ctx context.Context, src []byte, opts upscale.Params) (upscale.Image, error) {
	time.Sleep(u.took)
	return u.PixelUpscaler.Upscale(ctx, src, opts)
}

// TestOverloadedByExpectedWait: once the engine is known to take 150 ms an
// image, a request behind one other on a single slot expects to finish
// after about 300 ms, past a 200 ms engine deadline, and is refused at
// once instead of failing with 504 after waiting.
func TestOverloadedByExpectedWait(t *testing.T) {
	e := newEnv(t, func(c *upscale.Config) {
		c.Upscaler = slowUpscaler{took: 150 * time.Millisecond}
		c.Capacity.EngineConcurrency = 1
		c.EngineTimeout = 200 * time.Millisecond
	})
	checkOK(t, e.post(keyPro, body(e.url("/small.png"))), upscale.PoolFree) // times the engine
	first := make(chan *httptest.ResponseRecorder, 1)
	go func() { first <- e.post(keyPro, body(e.url("/slow.png"))) }() // admitted, fetching for 300 ms
	for e.hits.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	w := e.post(keyFree, body(e.url("/small.png")))
	checkProblem(t, w, http.StatusServiceUnavailable, "overloaded")
	if got := e.hits.Load(); got != 2 {
		t.Errorf("the origin was asked %d times, want 2", got)
	}
	checkOK(t, <-first, upscale.PoolFree)
}

// TestBuiltinSources: an imageUrl that names a built-in image is read
// from memory, even on a loopback address the policy refuses; every other
// URL on that address is still refused, and the size rules hold.
func TestBuiltinSources(t *testing.T) {
	const sample = "http://127.0.0.1:8080/samples/photo.png"
	e := newEnv(t, func(c *upscale.Config) {
		c.Fetch.AllowPrivateNetworks = false
		c.Fetch.BuiltinSources = map[string][]byte{sample: smallPNG, "http://127.0.0.1:8080/samples/big.png": bigPNG}
	})
	checkOK(t, e.post(keyFree, body("HTTP://127.0.0.1:8080/samples/photo.png#top")), upscale.PoolFree)
	checkProblem(t, e.post(keyFree, body("http://127.0.0.1:8080/samples/other.png")), http.StatusBadRequest, "source_forbidden")
	// Above the free tier, as if fetched.
	checkProblem(t, e.post(keyFree, body("http://127.0.0.1:8080/samples/big.png")), http.StatusForbidden, "paid_plan_required")
	if got := e.hits.Load(); got != 0 {
		t.Errorf("the origin was asked %d times, want 0", got)
	}

	_, err := upscale.New(upscale.Config{
		Keys: e.keys, Ledger: e.ledger, Upscaler: upscaletest.PixelUpscaler{}, Blobs: e.blobs,
		Fetch: upscale.FetchPolicy{BuiltinSources: map[string][]byte{"/samples/photo.png": smallPNG}},
	})
	if err == nil {
		t.Error("New accepted a built-in source whose key is not an absolute URL")
	}
}

// TestForAccount: a request whose context names a signed-in account
// (ForAccount) runs without a key, charged to that account, with the
// quota's headers; one with neither a key nor an account is refused.
func TestForAccount(t *testing.T) {
	e := newEnv(t)
	before := e.balance("free").Free
	r := httptest.NewRequest("POST", "/api/v1/upscale", strings.NewReader(body(e.url("/small.png"))))
	w := e.serve(r.WithContext(upscale.ForAccount(r.Context(), "free")))
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"via":"free_pool"`) || w.Header().Get("RateLimit") == "" {
		t.Fatalf("a request for a signed-in account: %d %s; want 200 from its free pool, with RateLimit", w.Code, w.Body)
	}
	if after := e.balance("free").Free; after != before-1 {
		t.Errorf("free images %d, then %d; want one charged", before, after)
	}
	r = httptest.NewRequest("POST", "/api/v1/upscale", strings.NewReader(body(e.url("/small.png"))))
	if w := e.serve(r.WithContext(upscale.ForAccount(r.Context(), ""))); w.Code != http.StatusUnauthorized {
		t.Errorf("no key and an empty account: %d, want 401", w.Code)
	}
}

// TestResizedTo: a result past the engine's largest is fitted, not
// refused: 200, charged one unit, with resizedTo the delivered size, in
// the request's answer and in a job's result; a result that fits keeps
// resizedTo null (checkOK).
func TestResizedTo(t *testing.T) {
	// small.png is 16×12: ×4 would be 64×48, 3072 pixels; 1000 fit 36×27.
	e := newEnv(t, func(c *upscale.Config) { c.Upscaler = upscaletest.PixelUpscaler{MaxOutputPixels: 1000} })
	checkOK(t, e.post(keyFree, body(e.url("/small.png"))), upscale.PoolFree) // ×2: 768 pixels
	w := e.post(keyPro, `{"imageUrl": "`+e.url("/small.png")+`", "scale": 4}`)
	var resp upscale.Response
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil || w.Code != http.StatusOK {
		t.Fatalf("×4: %d %s", w.Code, w.Body)
	}
	if resp.ResizedTo == nil || *resp.ResizedTo != (upscale.Size{Width: 36, Height: 27}) {
		t.Fatalf("×4: resizedTo %+v, want 36×27, the size delivered", resp.ResizedTo)
	}
	if size := upscaletest.ResultPNG(t, resp.URL).Bounds().Size(); size != image.Pt(36, 27) {
		t.Errorf("the result is %v, want 36×27", size)
	}
	location, _ := e.submit(keyPro, `{"imageUrl": "`+e.url("/small.png")+`", "scale": 4}`)
	if j := e.waitJob(location, keyPro); j.Status != upscale.JobSucceeded || j.Result.ResizedTo == nil || *j.Result.ResizedTo != (upscale.Size{Width: 36, Height: 27}) {
		t.Errorf("the job: %s, result %+v; want succeeded, resized to 36×27", j.Status, j.Result)
	}
	if b := e.balance("free"); b.Free != 2 {
		t.Errorf("%d free images left, want 2: one unit for the request", b.Free)
	}
}
