package dirstore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"hash"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/dirstore"
	"github.com/upscalekit/upscale/upscaletest"
)

// newStore opens a Store on dir, served by a test server.
func newStore(t *testing.T, dir string, clock *upscaletest.Clock) *dirstore.Store {
	t.Helper()
	var store *dirstore.Store
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { store.ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	store, err := dirstore.New(dirstore.Options{Dir: dir, BaseURL: srv.URL + "/outputs", Now: clock.Now})
	upscaletest.Opened(t, store, err)
	return store
}

func TestConformance(t *testing.T) {
	upscaletest.TestBlobStore(t, func(t *testing.T, clock *upscaletest.Clock) upscale.BlobStore {
		return newStore(t, t.TempDir(), clock)
	})
}

func TestSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	clock := upscaletest.NewClock(time.Now())
	first := newStore(t, dir, clock)
	link, err := first.Put(context.Background(), "abc.png", []byte("png bytes"), "image/png", clock.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	first.Close()

	// A new store on the same directory, behind a new server: the old
	// link's path and token are served by it.
	again := newStore(t, dir, clock)
	w := httptest.NewRecorder()
	again.ServeHTTP(w, httptest.NewRequest(http.MethodGet, link, nil))
	if w.Code != http.StatusOK || w.Body.String() != "png bytes" {
		t.Errorf("old link after restart: %d %q", w.Code, w.Body)
	}
	if info, err := os.Stat(filepath.Join(dir, ".link-secret")); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("link secret: %v, %v; want a file only its owner reads", info, err)
	}
}

func TestSweep(t *testing.T) {
	dir := t.TempDir()
	clock := upscaletest.NewClock(time.Now())
	s := newStore(t, dir, clock)
	ctx := context.Background()
	s.Put(ctx, "short.png", []byte("a"), "image/png", clock.Now().Add(time.Minute))
	s.Put(ctx, "long.png", []byte("b"), "image/png", clock.Now().Add(time.Hour))
	// The leftovers of a Put that crashed between its two renames, and
	// before its first one.
	os.WriteFile(filepath.Join(dir, "orphan.png"), []byte("c"), 0o600)
	os.WriteFile(filepath.Join(dir, ".tmp-123"), []byte("d"), 0o600)
	old := time.Now().Add(-time.Hour)
	os.Chtimes(filepath.Join(dir, "orphan.png"), old, old)
	os.Chtimes(filepath.Join(dir, ".tmp-123"), old, old)

	clock.Advance(2 * time.Minute)
	s.Sweep()
	var left []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		left = append(left, e.Name())
	}
	want := []string{".link-secret", "long.png", "long.png.meta"}
	if len(left) != len(want) {
		t.Fatalf("after sweeping: %v, want %v", left, want)
	}
	for i := range want {
		if left[i] != want[i] {
			t.Fatalf("after sweeping: %v, want %v", left, want)
		}
	}
}

// TestSweepLogsFailures: a sweep that cannot read its directory says so.
func TestSweepLogsFailures(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "results")
	var log bytes.Buffer
	s, err := dirstore.New(dirstore.Options{Dir: dir, BaseURL: "http://x.test/outputs", Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	s.Sweep()
	if !strings.Contains(log.String(), "level=ERROR") || !strings.Contains(log.String(), "results") {
		t.Errorf("log after a failed sweep: %q, want an error naming the directory", log.String())
	}
}

func TestLinkPath(t *testing.T) {
	s := newStore(t, t.TempDir(), upscaletest.NewClock(time.Now()))
	if got := s.LinkPath(); got != "/outputs/" {
		t.Errorf("LinkPath = %q, want /outputs/", got)
	}
}

func TestKeys(t *testing.T) {
	s := newStore(t, t.TempDir(), upscaletest.NewClock(time.Now()))
	for _, key := range []string{"", "../escape.png", "a/b.png", ".hidden", "x.meta", "nul\x00.png"} {
		if _, err := s.Put(context.Background(), key, []byte("x"), "image/png", time.Now().Add(time.Hour)); err == nil {
			t.Errorf("Put(%q) succeeded", key)
		}
	}
}

func TestRefusesShortSecret(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, ".link-secret"), []byte("short"), 0o600)
	if _, err := dirstore.New(dirstore.Options{Dir: dir, BaseURL: "http://x.test/outputs"}); err == nil {
		t.Fatal("a 5-byte link secret was accepted or replaced silently")
	}
	if got, _ := os.ReadFile(filepath.Join(dir, ".link-secret")); string(got) != "short" {
		t.Errorf("secret file now %q; it must be left for the operator to look at", got)
	}
}

// A download streams the file: serving a 32 MiB result allocates a small
// fraction of it, where reading the file whole would allocate all of it.
func TestStreamsDownloads(t *testing.T) {
	clock := upscaletest.NewClock(time.Now())
	store := newStore(t, t.TempDir(), clock)
	data := make([]byte, 32<<20)
	rand.NewChaCha8([32]byte{}).Read(data) // incompressible, like a real result
	want := sha256.Sum256(data)
	link, err := store.Put(context.Background(), "big.png", data, "image/png", clock.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	w := &hashingResponseWriter{header: http.Header{}, hash: sha256.New()}
	req := httptest.NewRequest(http.MethodGet, link, nil)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	store.ServeHTTP(w, req)
	runtime.ReadMemStats(&after)

	if w.status != http.StatusOK || w.written != len(data) || !bytes.Equal(w.hash.Sum(nil), want[:]) {
		t.Fatalf("download: status %d, %d of %d bytes, or different bytes", w.status, w.written, len(data))
	}
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > 4<<20 {
		t.Errorf("serving a 32 MiB result allocated %d MiB; it should stream from the file", allocated>>20)
	}
}

// hashingResponseWriter keeps a response's status, length and hash, not
// its bytes, so that the test measures only what the server allocates.
type hashingResponseWriter struct {
	header  http.Header
	status  int
	written int
	hash    hash.Hash
}

func (w *hashingResponseWriter) Header() http.Header { return w.header }

func (w *hashingResponseWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *hashingResponseWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.written += len(p)
	return w.hash.Write(p)
}
