package link

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestNewRefusesBadBasesAndShortSecrets(t *testing.T) {
	for _, base := range []string{"", "/outputs", "ftp://example.com/x", "https://example.com/x?q=1", "https:///x"} {
		if _, err := New(base, nil, nil); err == nil {
			t.Errorf("New(%q) accepted a base that is not an absolute http(s) URL", base)
		}
	}
	if _, err := New("https://cdn.example.com/outputs", []byte("short"), nil); err == nil {
		t.Error("New accepted a 5-byte secret")
	}
}

func TestPath(t *testing.T) {
	for base, want := range map[string]string{
		"https://example.com":            "/",
		"https://example.com/outputs":    "/outputs/",
		"https://example.com/a/results/": "/a/results/",
	} {
		s, err := New(base, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Path(); got != want {
			t.Errorf("Path of %q = %q, want %q", base, got, want)
		}
	}
}

// TestHandler: a genuine link serves its item until it expires; a link
// whose token names another key, a forged token, an expired link and a
// missing item all get the same 404.
func TestHandler(t *testing.T) {
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	s, err := New("https://example.com/outputs", NewSecret(), clock)
	if err != nil {
		t.Fatal(err)
	}
	other, err := New("https://example.com/outputs", NewSecret(), clock)
	if err != nil {
		t.Fatal(err)
	}
	items := map[string][]byte{"a.png": []byte("PNG a"), "b.png": []byte("PNG b")}
	h := s.Handler(func(_ context.Context, key string) (io.ReadSeekCloser, string, error) {
		data, ok := items[key]
		if !ok {
			return nil, "", fmt.Errorf("item %q: %w", key, fs.ErrNotExist)
		}
		return nopCloser{bytes.NewReader(data)}, "image/png", nil
	})
	get := func(link string) *httptest.ResponseRecorder {
		u, err := url.Parse(link)
		if err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, u.RequestURI(), nil))
		return w
	}
	link := func(s *Signer, key string, expires time.Time) string {
		l, err := s.URL(key, expires)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	hour := now.Add(time.Hour)

	w := get(link(s, "a.png", hour))
	if w.Code != http.StatusOK || w.Body.String() != "PNG a" || w.Header().Get("Content-Type") != "image/png" {
		t.Fatalf("genuine link: %d %q %q", w.Code, w.Body, w.Header().Get("Content-Type"))
	}
	if got := w.Header().Get("Cache-Control"); got != "private, max-age=3600" {
		t.Errorf("Cache-Control %q, want private, max-age=3600", got)
	}
	renamed := strings.Replace(link(s, "a.png", hour), "/a.png?", "/b.png?", 1)
	for name, l := range map[string]string{
		"other key":    renamed,
		"forged":       link(other, "a.png", hour),
		"expired":      link(s, "a.png", now.Add(-time.Second)),
		"missing item": link(s, "c.png", hour),
		"no token":     "https://example.com/outputs/a.png",
	} {
		if w := get(l); w.Code != http.StatusNotFound {
			t.Errorf("%s: status %d, want 404", name, w.Code)
		}
	}
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/outputs/a.png", nil))
	if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != "GET, HEAD" {
		t.Errorf("POST: %d, Allow %q; want 405 with Allow: GET, HEAD", w.Code, w.Header().Get("Allow"))
	}
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }
