package upscale

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/upscalekit/upscale/internal/netguard"
)

var badRequestSentinels = []error{ErrInvalidRequest, ErrInvalidImageURL, ErrInvalidScale, ErrInvalidImageType, ErrInvalidDenoise}

func isBadRequest(err error) bool {
	return slices.ContainsFunc(badRequestSentinels, func(s error) bool { return errors.Is(err, s) })
}

// FuzzDecodeRequest: any body is either refused with a 400 sentinel or gives
// a request whose every field is valid, and which reads back the same when
// written out again.
func FuzzDecodeRequest(f *testing.F) {
	for _, seed := range []string{
		`{"imageUrl": "https://example.com/a.png"}`,
		`{"imageUrl": "https://example.com/a.png", "scale": 4, "imageType": "anime", "denoise": "low"}`,
		`{"imageUrl": "http://8.8.8.8/a.jpg", "scale": 2.0, "imageType": null, "denoise": null}`,
		`{"imageUrl": "https://example.com/a.png", "scale": 1e400}`,
		`{"imageUrl": "https://example.com/a.png", "imageUrl": "http://127.0.0.1/"}`,
		`{"IMAGEURL": "https://example.com/a.png"}`,
		`{"imageUrl": "https://example.com/a.png"} {}`,
		"{\"imageUrl\": \"https://example.com/\xff.png\"}",
		`null`, `[]`, `{}`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeRequest(httptest.NewRecorder(), httptest.NewRequest("POST", "/", bytes.NewReader(body)))
		if err != nil {
			if !isBadRequest(err) {
				t.Fatalf("refused with %v, which is not a 400 sentinel", err)
			}
			return
		}
		checkValidRequest(t, req)
		again, err := json.Marshal(map[string]any{"imageUrl": req.source.String(), "scale": req.Scale, "imageType": req.ImageType, "denoise": req.Denoise})
		if err != nil {
			t.Fatal(err)
		}
		back, err := decodeRequest(httptest.NewRecorder(), httptest.NewRequest("POST", "/", bytes.NewReader(again)))
		if err != nil || back.source.String() != req.source.String() || back.Params != req.Params {
			t.Fatalf("%s read back as %+v, %v; want %+v", again, back, err, req)
		}
	})
}

func checkValidRequest(t *testing.T, req request) {
	t.Helper()
	u := req.source
	switch {
	case !slices.Contains(Scales(), req.Scale), !slices.Contains(imageTypes, req.ImageType), !slices.Contains(denoiseLevels, req.Denoise):
		t.Fatalf("accepted options %+v", req.Params)
	case u.Scheme != "http" && u.Scheme != "https", u.Hostname() == "", u.User != nil, u.Fragment != "":
		t.Fatalf("accepted imageUrl %q", u)
	case netguard.HostSyntaxProblem(u.Hostname()) != "":
		t.Fatalf("accepted host %q", u.Hostname())
	}
}

// FuzzImageURL: an imageUrl is refused with a 400 sentinel or accepted as
// an http(s) URL with an ASCII, unambiguous host and no credentials; the
// fetcher's own URL check then either passes it on an allowed port or
// refuses it as source_forbidden, and nothing else.
func FuzzImageURL(f *testing.F) {
	seeds, err := os.Open("testdata/hostile_urls.txt")
	if err != nil {
		f.Fatal(err)
	}
	defer seeds.Close()
	for sc := bufio.NewScanner(seeds); sc.Scan(); {
		if line := sc.Text(); line != "" && !strings.HasPrefix(line, "#") {
			f.Add(strings.Split(line, "\t")[0])
		}
	}
	fetch, err := newFetcher(FetchPolicy{AllowedPorts: []uint16{80, 443}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		raw, _ := json.Marshal(s)
		u, err := parseImageURL(raw)
		if err != nil {
			if !isBadRequest(err) {
				t.Fatalf("%q refused with %v, which is not a 400 sentinel", s, err)
			}
			return
		}
		checkValidRequest(t, request{source: u, Params: Params{Scale: 2, ImageType: Photo, Denoise: DenoiseMax}})
		err = fetch.checkURL(u, false)
		switch {
		case err == nil && u.Port() != "" && u.Port() != "80" && u.Port() != "443":
			t.Fatalf("%q passed on port %q", s, u.Port())
		case err != nil && !errors.Is(err, ErrSourceForbidden) && !errors.Is(err, ErrInvalidImageURL):
			t.Fatalf("%q: fetcher refused with %v", s, err)
		}
	})
}

// FuzzUpload: any multipart body is either refused with a 400 sentinel
// (or the plan's image_too_large) or gives a valid request whose file is
// the part "image" as sent; either way no memory stays granted.
func FuzzUpload(f *testing.F) {
	for _, seed := range []string{
		"--b\r\nContent-Disposition: form-data; name=\"image\"; filename=\"a.png\"\r\n\r\nPNG\r\n--b\r\nContent-Disposition: form-data; name=\"scale\"\r\n\r\n4\r\n--b--\r\n",
		"--b\r\nContent-Disposition: form-data; name=\"imageUrl\"\r\n\r\nhttps://example.com/a.png\r\n--b--\r\n",
		"--b\r\nContent-Disposition: form-data; name=\"image\"\r\n\r\nPNG\r\n--b\r\nContent-Disposition: form-data; name=\"image\"\r\n\r\nPNG\r\n--b--\r\n",
		"--b\r\nContent-Disposition: form-data; name=\"image\"\r\n\r\nPNG\r\n--b",
		"--b\r\nContent-Disposition: form-data; name=\"quality\"\r\n\r\n101\r\n--b--\r\n",
		"--b--\r\n", "",
	} {
		f.Add([]byte(seed))
	}
	ledger := NewMemoryLedger(LedgerOptions{})
	ledger.PutAccount(context.Background(), Account{ID: "acct", Plan: Plan{Name: "free", MonthlyImages: 1, MaxFileBytes: 1 << 10}})
	blobs, _ := NewMemoryBlobStore(MemoryBlobStoreOptions{BaseURL: "http://results.test/r"})
	h, err := New(Config{Keys: NewMemoryKeyStore(), Ledger: ledger, Upscaler: refusingEngine{}, Blobs: blobs, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r := httptest.NewRequest("POST", "/", bytes.NewReader(body))
		r.Header.Set("Content-Type", "multipart/form-data; boundary=b")
		req, err := h.receiveUpload(r.Context(), httptest.NewRecorder(), r, "acct", "b")
		if err != nil {
			if !isBadRequest(err) && !errors.Is(err, ErrImageTooLarge) {
				t.Fatalf("refused with %v, which is not a 400 sentinel", err)
			}
			if h.budget.InUse() != 0 {
				t.Fatalf("%d bytes granted after a refusal", h.budget.InUse())
			}
			return
		}
		switch {
		case !slices.Contains(Scales(), req.Scale), !slices.Contains(imageTypes, req.ImageType), !slices.Contains(denoiseLevels, req.Denoise):
			t.Fatalf("accepted options %+v", req.Params)
		case (req.upload == nil) == (req.source == nil):
			t.Fatalf("accepted a request with upload %v and imageUrl %v: want exactly one", req.upload != nil, req.source)
		case req.upload != nil && (len(req.upload.data) == 0 || len(req.upload.data) > 1<<10 || !bytes.Contains(body, req.upload.data)):
			t.Fatalf("accepted a file of %d bytes that is not one the body holds within the plan's limit", len(req.upload.data))
		}
		if req.upload != nil {
			req.upload.memory.Done()
		}
		if h.budget.InUse() != 0 {
			t.Fatalf("%d bytes granted once the request let go", h.budget.InUse())
		}
	})
}

// refusingEngine is an Upscaler that FuzzUpload never calls.
type refusingEngine struct{}

func (refusingEngine) Upscale(context.Context, []byte, Params) (Image, error) {
	return Image{}, ErrUnsupportedImage
}
