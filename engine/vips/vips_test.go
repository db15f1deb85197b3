package vips_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/engine/vips"
	"github.com/upscalekit/upscale/upscaletest"
)

// TestConformance: the public Engine keeps the Upscaler contract; its
// implementation's own tests are in engine/internal/libvips.
func TestConformance(t *testing.T) {
	e := vips.New(vips.Options{})
	newUpscaler := func(t *testing.T) upscale.Upscaler { return e }
	upscaletest.TestUpscaler(t, newUpscaler)
	upscaletest.TestUpscalerFormats(t, newUpscaler)
}

// TestHostileFilesUncharged: files that lie about their size (HEIC, AVIF,
// grids of them, a grid whose tile reaches far past it, a GIF whose
// frames' data ends early, an AVIF that lists its image twice), sent to the handler as a request or as a job,
// by URL or uploaded, are answered 400 unsupported_image from their
// headers: nothing is charged, no job is queued, and no memory stays
// granted for them.
func TestHostileFilesUncharged(t *testing.T) {
	files := map[string][]byte{}
	for _, name := range []string{"lying.heic", "lying.avif", "lying-grid-2x2.heic", "lying-grid-63x64.heic", "overhanging-grid-1x1.heic", "short-frames.gif", "duplicate-item.avif"} {
		data, err := os.ReadFile("../internal/libvips/testdata/hostile/" + name)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = data
	}
	s := newServer(t, files)
	for name := range files {
		for _, prefer := range []string{"", "respond-async"} {
			for _, send := range []func(string, string) *httptest.ResponseRecorder{s.fetched, s.uploaded} {
				w := send(name, prefer)
				if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), `"unsupported_image"`) {
					t.Errorf("%s (Prefer %q): %d %s; want 400 unsupported_image", name, prefer, w.Code, w.Body)
				}
			}
		}
	}
	balance, err := s.ledger.Balance(context.Background(), "acct")
	if err != nil || balance.Free != 100 {
		t.Errorf("balance %+v, %v after the hostile files; want all 100 free images", balance, err)
	}
	if load := s.handler.Load(); load.MemoryInUse != 0 || load.JobsQueued != 0 {
		t.Errorf("load %+v after the hostile files; want no memory granted and no job queued", load)
	}
}

// TestUploadedAsFetched: every source of the formats suite, uploaded, is
// enlarged into the same bytes as when it is fetched, in its own format
// and in each format asked.
func TestUploadedAsFetched(t *testing.T) {
	files := upscaletest.FormatSources(t)
	s := newServer(t, files)
	for name := range files {
		for _, format := range append([]upscale.Format{""}, upscale.Formats()...) {
			t.Run(name+"/"+string(format), func(t *testing.T) {
				fields := map[string]string{"scale": "2"}
				if format != "" {
					fields["format"] = string(format)
				}
				fetched, uploaded := s.send(name, "", fields, false), s.send(name, "", fields, true)
				if fetched.Code != uploaded.Code {
					t.Fatalf("fetched: %d %s; uploaded: %d %s", fetched.Code, fetched.Body, uploaded.Code, uploaded.Body)
				}
				// Transparency is never written as JPEG, nor an
				// animation in another format.
				refused := (strings.HasPrefix(name, "cutout") && format == upscale.FormatJPEG) ||
					(strings.HasPrefix(name, "motion") && format != "" && !strings.HasSuffix(name, "."+string(format)))
				if refused != (fetched.Code != http.StatusOK) {
					t.Fatalf("fetched: %d %s; want it refused: %v", fetched.Code, fetched.Body, refused)
				}
				if refused {
					if fetched.Body.String() != uploaded.Body.String() {
						t.Errorf("refused as %s fetched, as %s uploaded", fetched.Body, uploaded.Body)
					}
					return
				}
				if a, b := s.result(t, fetched), s.result(t, uploaded); !bytes.Equal(a, b) {
					t.Errorf("the results differ: %d bytes fetched, %d uploaded", len(a), len(b))
				}
			})
		}
	}
}

// server is a Handler on engine/vips with in-memory stores, an account of
// 100 images with a key, and an origin serving files by name.
type server struct {
	handler *upscale.Handler
	ledger  *upscale.MemoryLedger
	blobs   *upscale.MemoryBlobStore
	origin  *httptest.Server
	files   map[string][]byte
}

const serverKey = "upk_test_vips_0123456789"

func newServer(t *testing.T, files map[string][]byte) *server {
	t.Helper()
	s := &server{files: files}
	s.origin = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(files[strings.TrimPrefix(r.URL.Path, "/")]) }))
	t.Cleanup(s.origin.Close)
	ctx := context.Background()
	keys := upscale.NewMemoryKeyStore()
	keys.AddKey(ctx, serverKey, "acct")
	s.ledger = upscale.NewMemoryLedger(upscale.LedgerOptions{})
	s.ledger.PutAccount(ctx, upscale.Account{ID: "acct", Plan: upscale.Plan{Name: "roomy", MonthlyImages: 100, MaxFileBytes: 1 << 20}})
	var err error
	if s.blobs, err = upscale.NewMemoryBlobStore(upscale.MemoryBlobStoreOptions{BaseURL: "http://results.test/r"}); err != nil {
		t.Fatal(err)
	}
	s.handler, err = upscale.New(upscale.Config{
		Keys: keys, Ledger: s.ledger, Upscaler: vips.New(vips.Options{}), Blobs: s.blobs,
		Jobs:   upscale.NewMemoryJobQueue(upscale.MemoryJobQueueOptions{}),
		Fetch:  upscale.FetchPolicy{AllowPrivateNetworks: true},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// fetched sends file name by its URL, uploaded sends it itself; prefer
// is the Prefer header's value, if any.
func (s *server) fetched(name, prefer string) *httptest.ResponseRecorder {
	return s.send(name, prefer, map[string]string{"scale": "2"}, false)
}

func (s *server) uploaded(name, prefer string) *httptest.ResponseRecorder {
	return s.send(name, prefer, map[string]string{"scale": "2"}, true)
}

// send asks for file name with fields, as a JSON body naming it or as an
// upload of it.
func (s *server) send(name, prefer string, fields map[string]string, upload bool) *httptest.ResponseRecorder {
	var body bytes.Buffer
	contentType := "application/json"
	if upload {
		form := multipart.NewWriter(&body)
		file, _ := form.CreateFormFile("image", name)
		file.Write(s.files[name])
		for k, v := range fields {
			form.WriteField(k, v)
		}
		form.Close()
		contentType = form.FormDataContentType()
	} else {
		doc := map[string]any{"imageUrl": s.origin.URL + "/" + name}
		for k, v := range fields {
			doc[k] = v
			if n, err := strconv.Atoi(v); err == nil {
				doc[k] = n
			}
		}
		json.NewEncoder(&body).Encode(doc)
	}
	r := httptest.NewRequest("POST", "/api/v1/upscale", &body)
	r.Header.Set("Authorization", "Bearer "+serverKey)
	r.Header.Set("Content-Type", contentType)
	if prefer != "" {
		r.Header.Set("Prefer", prefer)
	}
	w := httptest.NewRecorder()
	s.handler.ServeHTTP(w, r)
	return w
}

// result is the stored bytes of a success's result.
func (s *server) result(t *testing.T, w *httptest.ResponseRecorder) []byte {
	t.Helper()
	var resp upscale.Response
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
		t.Fatal(err)
	}
	got := httptest.NewRecorder()
	s.blobs.ServeHTTP(got, httptest.NewRequest("GET", resp.URL, nil))
	if got.Code != http.StatusOK {
		t.Fatalf("the result's link %s: %d", resp.URL, got.Code)
	}
	return got.Body.Bytes()
}
