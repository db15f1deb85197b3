package upscale

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"time"

	"github.com/patrickmn/go-cache"
	"github.com/upscalekit/upscale/internal/link"
	"github.com/upscalekit/upscale/internal/periodic"
)

// MemoryBlobStoreOptions configures a MemoryBlobStore.
type MemoryBlobStoreOptions struct {
	// BaseURL is the absolute URL under which the store serves its links:
	// links are BaseURL/<key>?token=... Required.
	BaseURL string
	// Secret signs the links (an HS256 JWT naming the key and the expiry),
	// at least 32 bytes; replicas that serve each other's links share it.
	// Nil means a random secret, valid for this process only.
	Secret []byte
	// Now is the clock that decides link expiry. Zero means time.Now.
	Now func() time.Time
	// SweepInterval is how often expired items are freed even if nobody
	// asks for them. Zero means one minute; negative turns the sweeper off,
	// and an expired item's memory is then freed only when it is asked for.
	SweepInterval time.Duration
}

// MemoryBlobStore is a BlobStore held in process memory with per-item
// expiry; it is also the http.Handler that serves its links (a
// LinkServer). Items live in one process, so it suits a single replica and
// tests. It is safe for concurrent use. Close stops its cleanup.
type MemoryBlobStore struct {
	signer *link.Signer
	items  *cache.Cache
	now    func() time.Time
	links  http.Handler // serves the signed links; unexported so nobody can swap it

	cleanup *periodic.Job
}

type memoryBlob struct {
	data        []byte
	contentType string
	expires     time.Time // by the store's clock; the cache frees it by the wall clock's
}

var (
	_ LinkServer = (*MemoryBlobStore)(nil)
	_ BlobReader = (*MemoryBlobStore)(nil)
)

// NewMemoryBlobStore returns an empty MemoryBlobStore.
func NewMemoryBlobStore(opts MemoryBlobStoreOptions) (*MemoryBlobStore, error) {
	opts.Now = clock(opts.Now)
	if opts.SweepInterval == 0 {
		opts.SweepInterval = time.Minute
	}
	signer, err := link.New(opts.BaseURL, opts.Secret, opts.Now)
	if err != nil {
		return nil, fmt.Errorf("upscale: %w", err)
	}
	s := &MemoryBlobStore{
		signer: signer,
		// No janitor of go-cache's own: it could only be stopped by the
		// garbage collector. Close stops this one.
		items: cache.New(cache.NoExpiration, 0),
		now:   opts.Now,
	}
	s.links = signer.Handler(s.open)
	s.cleanup = periodic.Start(opts.SweepInterval, s.items.DeleteExpired)
	return s, nil
}

// Put implements BlobStore.
func (s *MemoryBlobStore) Put(ctx context.Context, key string, data []byte, contentType string, expires time.Time) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("put %q: %w", key, err)
	}
	ttl := expires.Sub(s.now())
	if ttl <= 0 {
		return "", fmt.Errorf("put %q: expiry %v is not in the future", key, expires)
	}
	url, err := s.signer.URL(key, expires)
	if err != nil {
		return "", err
	}
	// The cache frees the bytes once ttl has passed; the link stops working
	// at the same moment because its token expires.
	s.items.Set(key, memoryBlob{data: data, contentType: contentType, expires: expires}, ttl)
	return url, nil
}

// Delete implements BlobStore.
func (s *MemoryBlobStore) Delete(ctx context.Context, key string, _ time.Time) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete %q: %w", key, err)
	}
	s.items.Delete(key)
	return nil
}

// Get implements BlobReader: a copy of the stored bytes.
func (s *MemoryBlobStore) Get(ctx context.Context, key string, _ time.Time) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("get %q: %w", key, err)
	}
	v, ok := s.items.Get(key)
	if !ok || !s.now().Before(v.(memoryBlob).expires) {
		return nil, fmt.Errorf("blob %q: %w", key, ErrNotFound)
	}
	return bytes.Clone(v.(memoryBlob).data), nil
}

// LinkPath implements LinkServer: the path of MemoryBlobStoreOptions.BaseURL.
func (s *MemoryBlobStore) LinkPath() string { return s.signer.Path() }

// ServeHTTP serves the links Put returned: the item while its link is
// valid, 404 otherwise. It implements LinkServer.
func (s *MemoryBlobStore) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.links.ServeHTTP(w, r) }

// Len returns how many items the store holds, expired ones not yet freed
// included.
func (s *MemoryBlobStore) Len() int { return s.items.ItemCount() }

// Close stops the cleanup of expired items; calling it again does nothing.
// Expired items are never served, but after Close their memory stays held.
func (s *MemoryBlobStore) Close() error {
	s.cleanup.Stop()
	return nil
}

func (s *MemoryBlobStore) open(_ context.Context, key string) (io.ReadSeekCloser, string, error) {
	v, ok := s.items.Get(key)
	if !ok {
		return nil, "", fmt.Errorf("blob %q: %w", key, fs.ErrNotExist)
	}
	b := v.(memoryBlob)
	return memoryContent{bytes.NewReader(b.data)}, b.contentType, nil
}

// memoryContent serves an item's bytes in place; there is nothing to close.
type memoryContent struct{ *bytes.Reader }

func (memoryContent) Close() error { return nil }
