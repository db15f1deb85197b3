package upscale_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/upscaletest"
)

// echoHost is a host's own handler: it answers with what it received.
func echoHost(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("X-Host", "yes")
	json.NewEncoder(w).Encode(map[string]string{
		"method": r.Method, "path": r.URL.RequestURI(), "header": r.Header.Get("X-Custom"), "body": string(body),
	})
}

// TestMiddleware: in front of a host's handler, the middleware answers the
// API's path and the result links, and hands every other request to the
// host unchanged: method, path, query, headers and body.
func TestMiddleware(t *testing.T) {
	for name, path := range map[string]string{"DefaultPath": "", "OwnPath": "/v2/enlarge"} {
		t.Run(name, func(t *testing.T) {
			var app http.Handler
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { app.ServeHTTP(w, r) }))
			defer srv.Close()
			e := newEnv(t, func(c *upscale.Config) {
				c.Path = path
				c.Blobs = newMemoryBlobsAt(t, srv.URL+"/results", c.Now)
			})
			app = e.handler.Middleware(http.HandlerFunc(echoHost))
			apiPath := path
			if apiPath == "" {
				apiPath = "/api/v1/upscale"
			}

			req, _ := http.NewRequest(http.MethodPost, srv.URL+apiPath, strings.NewReader(body(e.url("/small.png"))))
			req.Header.Set("Authorization", "Bearer "+keyFree)
			resp := do(t, req)
			var answer upscale.Response
			if err := json.Unmarshal(resp.body, &answer); resp.StatusCode != http.StatusOK || err != nil {
				t.Fatalf("API: %d %s", resp.StatusCode, resp.body)
			}
			if !strings.HasPrefix(answer.URL, srv.URL+"/results/") {
				t.Fatalf("link %q is not under the store's base URL", answer.URL)
			}
			get, _ := http.NewRequest(http.MethodGet, answer.URL, nil)
			if link := do(t, get); link.StatusCode != http.StatusOK || !bytes.HasPrefix(link.body, []byte("\x89PNG")) || link.Header.Get("X-Host") != "" {
				t.Errorf("result link: %d, %d bytes, X-Host %q; want the PNG from the store", link.StatusCode, len(link.body), link.Header.Get("X-Host"))
			}

			for _, target := range []string{"/", "/about?lang=de", apiPath + "/extra", "/resultsx/a.png"} {
				req, _ := http.NewRequest(http.MethodPut, srv.URL+target, strings.NewReader("host's body"))
				req.Header.Set("X-Custom", "kept")
				resp := do(t, req)
				var got map[string]string
				json.Unmarshal(resp.body, &got)
				want := map[string]string{"method": "PUT", "path": target, "header": "kept", "body": "host's body"}
				if resp.Header.Get("X-Host") != "yes" || len(got) != len(want) || got["method"] != want["method"] || got["path"] != want["path"] || got["header"] != want["header"] || got["body"] != want["body"] {
					t.Errorf("%s reached the host as %v (X-Host %q), want %v", target, got, resp.Header.Get("X-Host"), want)
				}
			}
		})
	}
}

type response struct {
	*http.Response
	body []byte
}

func do(t *testing.T, req *http.Request) response {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{resp, body}
}

// newMemoryBlobsAt returns a MemoryBlobStore whose links start with base;
// the test serves them.
func newMemoryBlobsAt(t *testing.T, base string, now func() time.Time) *upscale.MemoryBlobStore {
	t.Helper()
	s, err := upscale.NewMemoryBlobStore(upscale.MemoryBlobStoreOptions{BaseURL: base, Now: now})
	upscaletest.Opened(t, s, err)
	return s
}

// weekLinks is a BlobStore whose links last at most a week.
type weekLinks struct{ failingBlobs }

func (weekLinks) MaxLinkTTL() time.Duration { return 7 * 24 * time.Hour }

func TestNewRefusesLinkTTLTheStoreCannotHonour(t *testing.T) {
	cfg := upscale.Config{
		Keys: upscale.NewMemoryKeyStore(), Ledger: upscale.NewMemoryLedger(upscale.LedgerOptions{}),
		Upscaler: failingUpscaler{}, Blobs: weekLinks{},
	}
	cfg.LinkTTL = 7 * 24 * time.Hour
	if _, err := upscale.New(cfg); err != nil {
		t.Errorf("LinkTTL of exactly the store's limit refused: %v", err)
	}
	cfg.LinkTTL = 8 * 24 * time.Hour
	if _, err := upscale.New(cfg); err == nil || !strings.Contains(err.Error(), "168h") {
		t.Errorf("New with a LinkTTL of 8 days on a 7-day store: %v, want an error naming the limit", err)
	}
}
