package upscale

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/patrickmn/go-cache"
	"github.com/upscalekit/upscale/internal/periodic"
)

// CachedKeyStoreOptions configures a CachedKeyStore.
type CachedKeyStoreOptions struct {
	// TTL is how long an answer is kept: a key's account, or that the key
	// is unknown or revoked. It bounds how long a key revoked elsewhere (by
	// another replica, or straight in the database) keeps working, and how
	// long a key added elsewhere is still refused after a failed try. Zero
	// or negative means 5 seconds.
	TTL time.Duration
	// MaxEntries bounds how many answers are kept, so that a flood of
	// random keys cannot grow the cache without end; beyond it answers
	// are not cached until expired ones are freed. Zero or negative means
	// 100,000 (about 15 MB).
	MaxEntries int
}

// CachedKeyStore is a KeyStore that keeps the answers of another one for
// a short while, so that a hot key costs its database one lookup per TTL
// instead of one per request, and a flood of unknown keys one per key per
// TTL. Only verdicts are kept: a failure of the wrapped store (an outage)
// is passed on and not cached. Keys are cached by their SHA-256 digest,
// never in the clear.
//
// A revocation made through the CachedKeyStore takes effect at once; one
// made elsewhere, within TTL. It is safe for concurrent use; Close stops
// the cleanup of expired answers.
type CachedKeyStore struct {
	keys       KeyStore
	answers    *cache.Cache
	maxEntries int
	cleanup    *periodic.Job

	// changes orders caching an answer against forgetting one: a lookup
	// that began before a change through this store must not cache the
	// answer from before it.
	changes    sync.Mutex
	generation uint64 // forgets so far; guarded by changes
}

var (
	_ KeyLister = (*CachedKeyStore)(nil)
	_ KeyAdmin  = (*CachedKeyStore)(nil)
	_ Pinger    = (*CachedKeyStore)(nil)
)

// cachedAnswer is a kept verdict: the account, or refused.
type cachedAnswer struct {
	accountID string
	refused   bool
}

// NewCachedKeyStore returns a CachedKeyStore in front of keys.
func NewCachedKeyStore(keys KeyStore, opts CachedKeyStoreOptions) *CachedKeyStore {
	if opts.TTL <= 0 {
		opts.TTL = 5 * time.Second // and never go-cache's "no expiry", which is negative
	}
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = 100_000
	}
	c := &CachedKeyStore{
		keys: keys,
		// No janitor of go-cache's own, which only the garbage collector
		// stops; Close stops this one.
		answers:    cache.New(opts.TTL, 0),
		maxEntries: opts.MaxEntries,
	}
	c.cleanup = periodic.Start(opts.TTL, c.answers.DeleteExpired)
	return c
}

// Authenticate implements KeyStore.
func (c *CachedKeyStore) Authenticate(ctx context.Context, key string) (string, error) {
	digest := DigestKey(key)
	id := string(digest[:])
	if v, ok := c.answers.Get(id); ok {
		if a := v.(cachedAnswer); !a.refused {
			return a.accountID, nil
		}
		return "", ErrUnauthorized
	}
	c.changes.Lock()
	generation := c.generation
	c.changes.Unlock()
	accountID, err := c.keys.Authenticate(ctx, key)
	refused := errors.Is(err, ErrUnauthorized)
	if err != nil && !refused {
		return "", err // an outage, not a verdict
	}
	c.changes.Lock()
	if c.generation == generation && c.answers.ItemCount() < c.maxEntries {
		c.answers.SetDefault(id, cachedAnswer{accountID: accountID, refused: refused})
	}
	c.changes.Unlock()
	return accountID, err
}

// AddKey implements KeyAdmin when the wrapped KeyStore is a KeyAdmin, and
// forgets what was cached of key, so the key works at once.
func (c *CachedKeyStore) AddKey(ctx context.Context, key, accountID string) error {
	admin, err := c.admin()
	if err != nil {
		return err
	}
	defer c.forget(key)
	return admin.AddKey(ctx, key, accountID)
}

// RevokeKey implements KeyAdmin when the wrapped KeyStore is a KeyAdmin,
// and forgets what was cached of key, so the revocation takes effect at
// once in this process.
func (c *CachedKeyStore) RevokeKey(ctx context.Context, key string) error {
	admin, err := c.admin()
	if err != nil {
		return err
	}
	defer c.forget(key)
	return admin.RevokeKey(ctx, key)
}

// AddNamedKey implements KeyLister when the wrapped KeyStore is a
// KeyLister, and forgets what was cached of key, so the key works at once.
func (c *CachedKeyStore) AddNamedKey(ctx context.Context, key, accountID, name string) (KeyInfo, error) {
	lister, err := c.lister()
	if err != nil {
		return KeyInfo{}, err
	}
	defer c.forget(key)
	return lister.AddNamedKey(ctx, key, accountID, name)
}

// ListKeys implements KeyLister when the wrapped KeyStore is a KeyLister.
// It is not cached: the page that lists keys sees every change at once.
func (c *CachedKeyStore) ListKeys(ctx context.Context, accountID string) ([]KeyInfo, error) {
	lister, err := c.lister()
	if err != nil {
		return nil, err
	}
	return lister.ListKeys(ctx, accountID)
}

// RevokeKeyID implements KeyLister when the wrapped KeyStore is a
// KeyLister, and forgets what was cached of the key, so the revocation
// takes effect at once in this process.
func (c *CachedKeyStore) RevokeKeyID(ctx context.Context, accountID, id string) error {
	lister, err := c.lister()
	if err != nil {
		return err
	}
	defer c.change(func(answers *cache.Cache) {
		for digest := range answers.Items() {
			if hex.EncodeToString([]byte(digest[:8])) == id {
				answers.Delete(digest)
			}
		}
	})
	return lister.RevokeKeyID(ctx, accountID, id)
}

func (c *CachedKeyStore) lister() (KeyLister, error) {
	lister, ok := c.keys.(KeyLister)
	if !ok {
		return nil, fmt.Errorf("upscale: the cached %T keeps no KeyInfo (it is not a KeyLister)", c.keys)
	}
	return lister, nil
}

func (c *CachedKeyStore) admin() (KeyAdmin, error) {
	admin, ok := c.keys.(KeyAdmin)
	if !ok {
		return nil, fmt.Errorf("upscale: the cached %T has no AddKey and RevokeKey", c.keys)
	}
	return admin, nil
}

// forget drops what is cached of key, once the change to it is made.
func (c *CachedKeyStore) forget(key string) {
	digest := DigestKey(key)
	c.change(func(answers *cache.Cache) { answers.Delete(string(digest[:])) })
}

// change runs drop on the cached answers, and keeps lookups that began
// before from caching their older answer.
func (c *CachedKeyStore) change(drop func(answers *cache.Cache)) {
	c.changes.Lock()
	defer c.changes.Unlock()
	c.generation++
	drop(c.answers)
}

// Ping implements Pinger by pinging the wrapped KeyStore, if it is a
// Pinger, so that ReadyHandler still sees the key store's server through
// the cache. A wrapped store without Ping has nothing to ask.
func (c *CachedKeyStore) Ping(ctx context.Context) error {
	if p, ok := c.keys.(Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

// Close stops the cleanup of expired answers; calling it again does
// nothing. Expired answers are never used, but after Close their memory
// stays held.
func (c *CachedKeyStore) Close() error {
	c.cleanup.Stop()
	return nil
}
