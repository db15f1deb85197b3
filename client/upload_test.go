package client_test

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/png"
	"io"
	"math/rand/v2"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/client"
	"github.com/upscalekit/upscale/upscaletest"
)

// attempt is what the API was sent by one attempt of a call.
type attempt struct {
	key, contentType string
	body             []byte
}

// recorder records each POST to the API's path, passing it on.
type recorder struct {
	mu   sync.Mutex
	seen []attempt
}

func (rec *recorder) wrap(api http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/api/v1/upscale" {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			rec.mu.Lock()
			rec.seen = append(rec.seen, attempt{r.Header.Get("Idempotency-Key"), r.Header.Get("Content-Type"), body})
			rec.mu.Unlock()
		}
		api.ServeHTTP(w, r)
	})
}

// attempts returns the attempts recorded so far.
func (rec *recorder) attempts() []attempt {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return slices.Clone(rec.seen)
}

// TestUpscaleFile: against the real handler, an upload is enlarged; 502,
// 502, 200 is three attempts of the same bytes under one Idempotency-Key,
// and one charge.
func TestUpscaleFile(t *testing.T) {
	ctx := context.Background()
	var rec recorder
	api := newRealAPI(t, upscale.Config{Upscaler: &flakyEngine{}}, rec.wrap)
	c := &client.Client{BaseURL: api.url, Key: key}

	resp, err := c.UpscaleFile(ctx, bytes.NewReader(upscaletest.TestImagePNG(t, 8, 8)), client.Request{Scale: 2, Format: "png"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Via != "free_pool" || resp.URL == "" || resp.Engine != "repeat;scale=2" {
		t.Errorf("response %+v, want a link paid by free_pool, made by repeat;scale=2", resp)
	}
	seen := rec.attempts()
	if len(seen) != 3 || seen[0].key == "" || seen[1].key != seen[0].key || seen[2].key != seen[0].key {
		t.Fatalf("%d attempts; want three with one Idempotency-Key", len(seen))
	}
	for i, a := range seen[1:] {
		if a.contentType != seen[0].contentType || !bytes.Equal(a.body, seen[0].body) {
			t.Errorf("attempt %d sent other bytes than the first", i+2)
		}
	}
	if media, _, _ := mime.ParseMediaType(seen[0].contentType); media != "multipart/form-data" {
		t.Errorf("Content-Type %q, want multipart/form-data", seen[0].contentType)
	}
	if b, _ := api.ledger.Balance(ctx, "acme"); b.Free != 4 {
		t.Errorf("free pool %d after the call, want 4: charged once", b.Free)
	}
}

// noisePNG is a w×h PNG of noise, which does not compress: about 4·w·h
// bytes.
func noisePNG(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	r := rand.New(rand.NewPCG(1, 2))
	for i := range img.Pix {
		img.Pix[i] = byte(r.Uint32())
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestUpscaleFileTooLarge: a file past the plan's size is a 400
// image_too_large, one past the free tier on a free plan a 403
// paid_plan_required; neither is retried or charged.
func TestUpscaleFileTooLarge(t *testing.T) {
	for _, tc := range []struct {
		name     string
		freeTier int64
		file     []byte
		status   int
		code     string
	}{
		{"ErrImageTooLarge", 0, noisePNG(t, 600, 600), http.StatusBadRequest, "image_too_large"},             // past the plan's 1 MB
		{"ErrPaidPlanRequired", 64 << 10, noisePNG(t, 200, 200), http.StatusForbidden, "paid_plan_required"}, // past a 64 KB free tier
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			var rec recorder
			api := newRealAPI(t, upscale.Config{Upscaler: upscaletest.PixelUpscaler{}, FreeTierMaxFileBytes: tc.freeTier}, rec.wrap)
			c := &client.Client{BaseURL: api.url, Key: key}
			_, err := c.UpscaleFile(ctx, bytes.NewReader(tc.file), client.Request{})
			if apiErr, ok := errors.AsType[*client.Error](err); !ok || apiErr.Status != tc.status || apiErr.Code != tc.code {
				t.Errorf("a %d-byte file: %v; want %d %s", len(tc.file), err, tc.status, tc.code)
			}
			if n := len(rec.attempts()); n != 1 {
				t.Errorf("%d attempts, want 1", n)
			}
			if b, _ := api.ledger.Balance(ctx, "acme"); b.Free != 5 {
				t.Errorf("free pool %d after the refusal, want 5: nothing charged", b.Free)
			}
		})
	}
}

// TestUpscaleFileWithImageURL: an upload that names an address too is
// refused before anything is sent.
func TestUpscaleFileWithImageURL(t *testing.T) {
	srv, n := scripted(t, ok(false))
	c := &client.Client{BaseURL: srv.URL, Key: key}
	if _, err := c.UpscaleFile(context.Background(), strings.NewReader("png"), client.Request{ImageURL: "https://x.test/a.png"}); err == nil {
		t.Error("UpscaleFile with an ImageURL succeeded")
	}
	if _, err := c.SubmitFile(context.Background(), strings.NewReader("png"), client.Request{ImageURL: "https://x.test/a.png"}); err == nil {
		t.Error("SubmitFile with an ImageURL succeeded")
	}
	if n.Load() != 0 {
		t.Errorf("%d requests sent, want none", n.Load())
	}
}

// TestSubmitFile: against the real handler, an upload submitted as a job
// (its lost answer retried into the same job) succeeds, charged once.
func TestSubmitFile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a job that never ends fails the test, not the run
	defer cancel()
	var rec recorder
	var lost atomic.Bool // the first answer, as a broken connection would
	api := newRealAPI(t, upscale.Config{Upscaler: upscaletest.PixelUpscaler{}, JobWorkers: 1}, func(api http.Handler) http.Handler {
		record := rec.wrap(api)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && lost.CompareAndSwap(false, true) {
				record.ServeHTTP(discard{}, r)
				http.Error(w, "bad gateway", http.StatusBadGateway)
				return
			}
			record.ServeHTTP(w, r)
		})
	})
	if err := api.handler.StartJobs(ctx); err != nil {
		t.Fatal(err)
	}
	defer api.handler.StopJobs(ctx)
	c := &client.Client{BaseURL: api.url, Key: key}

	job, err := c.SubmitFile(ctx, bytes.NewReader(upscaletest.TestImagePNG(t, 8, 8)), client.Request{Scale: 4})
	if err != nil || job.ID == "" {
		t.Fatalf("SubmitFile = %+v, %v; want the job", job, err)
	}
	if seen := rec.attempts(); len(seen) != 2 || seen[1].key != seen[0].key || !bytes.Equal(seen[1].body, seen[0].body) {
		t.Errorf("%d attempts; want two of the same bytes under one Idempotency-Key", len(seen))
	}
	done, err := c.Wait(ctx, job.ID)
	if err != nil || done.Status != "succeeded" || done.Result == nil || done.Result.Via != "free_pool" {
		t.Fatalf("Wait = %+v, %v; want it succeeded", done, err)
	}
	if b, _ := api.ledger.Balance(ctx, "acme"); b.Free != 4 {
		t.Errorf("free pool %d, want 4: one job charged once", b.Free)
	}
}

// discard is a ResponseWriter that drops the answer, as a broken
// connection loses it.
type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(p []byte) (int, error) { return len(p), nil }
func (discard) WriteHeader(int)             {}

// part is one part of a form as a server reads it.
type part struct {
	name, filename, value string
}

// readForm returns the parts of a multipart form.
func readForm(t *testing.T, contentType string, body []byte) []part {
	t.Helper()
	_, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		t.Fatal(err)
	}
	r := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	var parts []part
	for {
		p, err := r.NextPart()
		if err == io.EOF {
			return parts
		}
		if err != nil {
			t.Fatal(err)
		}
		value, _ := io.ReadAll(p)
		parts = append(parts, part{p.FormName(), p.FileName(), string(value)})
	}
}

// TestWriteForm: the fields set go as text parts, in decimal, the zero
// ones not at all; the file goes last, named after the file's base name,
// stripped of what could end its header line.
func TestWriteForm(t *testing.T) {
	for _, tc := range []struct{ filename, want string }{
		{"cat.png", "cat.png"},
		{"/home/me/Pictures/cat.png", "cat.png"},
		{`C:\Users\me\cat.png`, "cat.png"},
		{"a\r\nX-Evil: 1\r\n\r\n.png", "aX-Evil: 1.png"},
		{`say "cheese".png`, `say "cheese".png`},
		{"", "image"},
		{"dir/", "image"},
		{strings.Repeat("é", 200), strings.Repeat("é", 127)},
	} {
		var b bytes.Buffer
		w := multipart.NewWriter(&b)
		req := client.Request{Scale: 16, Denoise: "low", Quality: 80, Format: "webp"}
		if err := req.WriteForm(w, tc.filename, strings.NewReader("the bytes")); err != nil {
			t.Fatal(err)
		}
		w.Close()
		want := []part{{"scale", "", "16"}, {"denoise", "", "low"}, {"format", "", "webp"}, {"quality", "", "80"}, {"image", tc.want, "the bytes"}}
		if got := readForm(t, w.FormDataContentType(), b.Bytes()); !slices.Equal(got, want) {
			t.Errorf("the form for a file named %q:\n%q\nwant\n%q", tc.filename, got, want)
		}
	}
}

// TestUpscaleFileNamesTheFile: an *os.File is uploaded under its name.
func TestUpscaleFileNamesTheFile(t *testing.T) {
	var rec recorder
	api := newRealAPI(t, upscale.Config{Upscaler: upscaletest.PixelUpscaler{}}, rec.wrap)
	path := filepath.Join(t.TempDir(), "cat.png")
	if err := os.WriteFile(path, upscaletest.TestImagePNG(t, 8, 8), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := (&client.Client{BaseURL: api.url, Key: key}).UpscaleFile(context.Background(), f, client.Request{ImageType: "anime"}); err != nil {
		t.Fatal(err)
	}
	seen := rec.attempts()
	parts := readForm(t, seen[0].contentType, seen[0].body)
	if len(parts) != 2 || parts[0] != (part{"imageType", "", "anime"}) || parts[1].name != "image" || parts[1].filename != "cat.png" {
		t.Errorf("the form's parts %q; want imageType, then the file named cat.png", parts)
	}
}
