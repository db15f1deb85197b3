package upscale_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"hash"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/upscaletest"
)

// newDirBlobs opens a DirBlobStore on dir, served by a test server.
func newDirBlobs(t *testing.T, dir string, clock *upscaletest.Clock) *upscale.DirBlobStore {
	t.Helper()
	var store *upscale.DirBlobStore
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { store.ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	store, err := upscale.NewDirBlobStore(upscale.DirBlobStoreOptions{Dir: dir, BaseURL: srv.URL + "/outputs", Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}

func TestDirBlobStoreConformance(t *testing.T) {
	upscaletest.TestBlobStore(t, func(t *testing.T, clock *upscaletest.Clock) upscale.BlobStore {
		return newDirBlobs(t, t.TempDir(), clock)
	})
}

func TestDirBlobStoreSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	clock := upscaletest.NewClock(time.Now())
	first := newDirBlobs(t, dir, clock)
	link, err := first.Put(context.Background(), "abc.png", []byte("png bytes"), "image/png", clock.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	first.Close()

	// A new store on the same directory, behind a new server: the old
	// link's path and token are served by it.
	again := newDirBlobs(t, dir, clock)
	w := httptest.NewRecorder()
	again.ServeHTTP(w, httptest.NewRequest(http.MethodGet, link, nil))
	if w.Code != http.StatusOK || w.Body.String() != "png bytes" {
		t.Errorf("old link after restart: %d %q", w.Code, w.Body)
	}
	if info, err := os.Stat(filepath.Join(dir, ".link-secret")); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("link secret: %v, %v; want a file only its owner reads", info, err)
	}
}

func TestDirBlobStoreSweep(t *testing.T) {
	dir := t.TempDir()
	clock := upscaletest.NewClock(time.Now())
	s := newDirBlobs(t, dir, clock)
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

func TestDirBlobStoreKeys(t *testing.T) {
	s := newDirBlobs(t, t.TempDir(), upscaletest.NewClock(time.Now()))
	for _, key := range []string{"", "../escape.png", "a/b.png", ".hidden", "x.meta", "nul\x00.png"} {
		if _, err := s.Put(context.Background(), key, []byte("x"), "image/png", time.Now().Add(time.Hour)); err == nil {
			t.Errorf("Put(%q) succeeded", key)
		}
	}
}

func TestDirBlobStoreRefusesShortSecret(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, ".link-secret"), []byte("short"), 0o600)
	if _, err := upscale.NewDirBlobStore(upscale.DirBlobStoreOptions{Dir: dir, BaseURL: "http://x.test/outputs"}); err == nil {
		t.Fatal("a 5-byte link secret was accepted or replaced silently")
	}
	if got, _ := os.ReadFile(filepath.Join(dir, ".link-secret")); string(got) != "short" {
		t.Errorf("secret file now %q; it must be left for the operator to look at", got)
	}
}

// A download streams the file: serving a 32 MiB result allocates a small
// fraction of it, where reading the file whole would allocate all of it.
func TestDirBlobStoreStreamsDownloads(t *testing.T) {
	clock := upscaletest.NewClock(time.Now())
	store := newDirBlobs(t, t.TempDir(), clock)
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
