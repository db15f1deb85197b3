package upscale

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/patrickmn/go-cache"
)

// BlobStore keeps enlarged images for a while and hands out links to them.
type BlobStore interface {
	// Put stores data, of the given content type, under key until expires
	// and returns an absolute URL from which anyone holding it can download
	// the data until expires, and not long after. Keys are unique; the
	// handler makes them from random letters, digits and a file extension.
	// A failed Put leaves nothing behind that a link could reach.
	Put(ctx context.Context, key string, data []byte, contentType string, expires time.Time) (url string, err error)
	// Delete removes what Put stored under key, so that its link stops
	// working; expires is the value given to Put, for stores that file
	// items by expiry. Deleting a key that is not there is not an error.
	// The handler deletes a result it stored but could not charge for.
	Delete(ctx context.Context, key string, expires time.Time) error
}

// MemoryBlobStoreOptions configures a MemoryBlobStore.
type MemoryBlobStoreOptions struct {
	// BaseURL is the absolute URL under which the host mounts the store as
	// an http.Handler; links are BaseURL/<key>?token=... Required.
	BaseURL string
	// Secret signs the links; see NewLinkSigner. Nil means a random secret.
	Secret []byte
	// Now is the clock that decides link expiry. Zero means time.Now.
	Now func() time.Time
	// CleanupInterval is how often expired items are freed even if nobody
	// asks for them. Zero means one minute.
	CleanupInterval time.Duration
}

// MemoryBlobStore is a BlobStore held in process memory with per-item
// expiry; it is also the http.Handler that serves its links. Items live in
// one process, so it suits a single replica and tests. It is safe for
// concurrent use.
type MemoryBlobStore struct {
	signer *LinkSigner
	items  *cache.Cache
	now    func() time.Time
	http.Handler
}

type memoryBlob struct {
	data        []byte
	contentType string
}

var _ BlobStore = (*MemoryBlobStore)(nil)

// NewMemoryBlobStore returns an empty MemoryBlobStore.
func NewMemoryBlobStore(opts MemoryBlobStoreOptions) (*MemoryBlobStore, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.CleanupInterval == 0 {
		opts.CleanupInterval = time.Minute
	}
	signer, err := NewLinkSigner(opts.BaseURL, opts.Secret, opts.Now)
	if err != nil {
		return nil, err
	}
	s := &MemoryBlobStore{
		signer: signer,
		items:  cache.New(cache.NoExpiration, opts.CleanupInterval),
		now:    opts.Now,
	}
	s.Handler = signer.Handler(s.open)
	return s, nil
}

// Put implements BlobStore.
func (s *MemoryBlobStore) Put(_ context.Context, key string, data []byte, contentType string, expires time.Time) (string, error) {
	ttl := expires.Sub(s.now())
	if ttl <= 0 {
		return "", fmt.Errorf("put %q: expiry %v is not in the future", key, expires)
	}
	link, err := s.signer.URL(key, expires)
	if err != nil {
		return "", err
	}
	// The cache frees the bytes once ttl has passed; the link stops working
	// at the same moment because its token expires.
	s.items.Set(key, memoryBlob{data: data, contentType: contentType}, ttl)
	return link, nil
}

// Delete implements BlobStore.
func (s *MemoryBlobStore) Delete(_ context.Context, key string, _ time.Time) error {
	s.items.Delete(key)
	return nil
}

// Len returns how many items the store holds, expired ones not yet freed
// included.
func (s *MemoryBlobStore) Len() int { return s.items.ItemCount() }

func (s *MemoryBlobStore) open(_ context.Context, key string) (io.ReadSeekCloser, string, error) {
	v, ok := s.items.Get(key)
	if !ok {
		return nil, "", fmt.Errorf("blob %q: %w", key, ErrNotFound)
	}
	b := v.(memoryBlob)
	return memoryContent{bytes.NewReader(b.data)}, b.contentType, nil
}

// memoryContent serves an item's bytes in place; there is nothing to close.
type memoryContent struct{ *bytes.Reader }

func (memoryContent) Close() error { return nil }
