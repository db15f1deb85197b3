package upscale_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/upscaletest"
)

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
		{[]string{`"format": "webp"`, `"quality": 70`}, upscale.Params{Scale: 2, ImageType: upscale.Photo, Denoise: upscale.DenoiseMax, Format: upscale.FormatWebP, Quality: 70}},
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
		{"FormatUnknown", body(small, `"format": "gif"`), "invalid_request"},
		{"FormatCase", body(small, `"format": "JPEG"`), "invalid_request"},
		{"QualityZero", body(small, `"quality": 0`), "invalid_request"},
		{"QualityHigh", body(small, `"quality": 101`), "invalid_request"},
		{"QualityFraction", body(small, `"quality": 80.5`), "invalid_request"},
		{"QualityString", body(small, `"quality": "80"`), "invalid_request"},
		{"QualityForPNG", body(small, `"format": "png"`, `"quality": 80`), "invalid_request"},
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
	// The fetch deadline is 2 s (the handshake's 1 s) where a case must
	// fail for another reason first, however loaded the machine: at 100
	// ms, a handshake cut at 50 ms had to answer before the fetch's own
	// deadline. hasty's 100 ms is the Timeout case's, against a 300 ms
	// source.
	lenient := newEnv(t, func(c *upscale.Config) { c.Fetch.Timeout = 2 * time.Second })
	lenient.putAccount(upscale.Account{ID: "free", Plan: tinyPlan})
	hasty := newEnv(t, func(c *upscale.Config) { c.Fetch.Timeout = 100 * time.Millisecond })
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
		{"Timeout", hasty, hasty.url("/slow.png"), "source_unreachable"},
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
	if n := lenient.hits.Load(); n > 5+1+5 { // at most MaxRedirects+1 hops for the loop, one for each other case
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

// publishingUpscaler publishes two networks, ×2 and ×4, and remembers
// the options it was called with.
type publishingUpscaler struct{ recordingUpscaler }

func (publishingUpscaler) PublishedModels() []upscale.PublishedModel {
	return []upscale.PublishedModel{{Name: "sharp-x2", Scale: 2}, {Name: "sharp-x4", Scale: 4}}
}

// TestRequestModel: a request may name a network the Upscaler publishes
// (model), which reaches the engine, in a JSON body or a form; one it does
// not publish, one whose passes cannot make the scale asked, or a model
// on a server that publishes none, is 400 with a sentence naming what
// there is, before anything is reserved; the Idempotency-Key covers it.
func TestRequestModel(t *testing.T) {
	rec := publishingUpscaler{recordingUpscaler{got: make(chan upscale.Params, 1)}}
	e := newEnv(t, func(c *upscale.Config) { c.Upscaler = rec })
	checkOK(t, e.post(keyPro, body(e.url("/small.png"), `"scale": 4`, `"model": "sharp-x4"`)), upscale.PoolFree)
	if got := <-rec.got; got.Model != "sharp-x4" {
		t.Errorf("engine got model %q, want sharp-x4", got.Model)
	}
	checkOK(t, e.upload(keyPro, fileField(smallPNG), part{name: "model", value: "sharp-x2"}), upscale.PoolFree)
	if got := <-rec.got; got.Model != "sharp-x2" {
		t.Errorf("engine got model %q from a form, want sharp-x2", got.Model)
	}
	for _, tc := range []struct {
		name, body, detail string
	}{
		{"Unknown", body(e.url("/small.png"), `"model": "span"`), `"sharp-x2", "sharp-x4"`},
		{"WrongScale", body(e.url("/small.png"), `"scale": 8`, `"model": "sharp-x4"`), "×4 a pass: ask a scale it makes, 4, 16"},
		{"NotAString", body(e.url("/small.png"), `"model": 4`), "as a string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if p := checkProblem(t, e.post(keyFree, tc.body), 400, "invalid_request"); !strings.Contains(p.Detail, tc.detail) {
				t.Errorf("detail %q, want it to say %q", p.Detail, tc.detail)
			}
		})
	}
	plain := newEnv(t)
	if p := checkProblem(t, plain.post(keyFree, body(plain.url("/small.png"), `"model": "sharp-x2"`)), 400, "invalid_request"); !strings.Contains(p.Detail, "no networks to ask for") {
		t.Errorf("a model on a server that publishes none: %q", p.Detail)
	}
	if b := e.balance("free"); b.Free != 3 {
		t.Errorf("%d free images left after the refusals, want 3", b.Free)
	}

	send := func(model string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/api/v1/upscale", strings.NewReader(body(e.url("/small.png"), `"scale": 4`, `"model": "`+model+`"`)))
		r.Header.Set("Authorization", "Bearer "+keyFree)
		r.Header.Set("Idempotency-Key", "model-once")
		return e.serve(r)
	}
	checkOK(t, send("sharp-x2"), upscale.PoolFree)
	<-rec.got
	checkProblem(t, send("sharp-x4"), 422, "idempotency_key_reused")
}
