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
	"net/http"
	"net/http/httptest"
	"strings"
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
		"Config.ChargeTimeout": func(c *upscale.Config) {
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

// slowUpscaler takes a fixed time for every image.
type slowUpscaler struct {
	upscaletest.PixelUpscaler
	took time.Duration
}

func (u slowUpscaler) Upscale(ctx context.Context, src []byte, opts upscale.Params) (upscale.Image, error) {
	time.Sleep(u.took)
	return u.PixelUpscaler.Upscale(ctx, src, opts)
}
