package upscale_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/upscaletest"
)

func TestCachedKeyStore(t *testing.T) {
	cached := func(t *testing.T) *upscale.CachedKeyStore {
		c := upscale.NewCachedKeyStore(upscale.NewMemoryKeyStore(), upscale.CachedKeyStoreOptions{})
		t.Cleanup(func() { c.Close() })
		return c
	}
	upscaletest.TestKeyStore(t, func(t *testing.T) upscale.KeyAdmin { return cached(t) })
	upscaletest.TestKeyLister(t, func(t *testing.T) upscale.KeyLister { return cached(t) })
}

const (
	cachedKey  = "upk_test_cached_0123456789"
	unknownKey = "upk_test_unknown_0123456789"
)

// newCached returns a CachedKeyStore in front of a flakyKeys, which counts
// the lookups that reach it and can fail them as an outage would.
func newCached(t *testing.T, opts upscale.CachedKeyStoreOptions) (*upscale.CachedKeyStore, *flakyKeys) {
	t.Helper()
	inner := &flakyKeys{MemoryKeyStore: upscale.NewMemoryKeyStore()}
	if err := inner.AddKey(context.Background(), cachedKey, "acme"); err != nil {
		t.Fatal(err)
	}
	c := upscale.NewCachedKeyStore(inner, opts)
	t.Cleanup(func() { c.Close() })
	return c, inner
}

// TestCachedKeyStoreSparesTheStore: a hot key and an unknown key each cost
// one lookup while their answer is kept; an outage is not an answer and is
// never kept.
func TestCachedKeyStoreSparesTheStore(t *testing.T) {
	ctx := context.Background()
	c, inner := newCached(t, upscale.CachedKeyStoreOptions{TTL: time.Hour})
	for range 100 {
		if got, err := c.Authenticate(ctx, cachedKey); err != nil || got != "acme" {
			t.Fatalf("Authenticate = %q, %v", got, err)
		}
		if _, err := c.Authenticate(ctx, unknownKey); !errors.Is(err, upscale.ErrUnauthorized) {
			t.Fatalf("unknown key: %v, want ErrUnauthorized", err)
		}
	}
	if got := inner.calls.Load(); got != 2 {
		t.Errorf("200 lookups of 2 keys reached the store %d times, want 2", got)
	}

	inner.down.Store(true)
	const other = "upk_test_other_0123456789"
	for range 3 {
		if _, err := c.Authenticate(ctx, other); !errors.Is(err, upscale.ErrUnavailable) {
			t.Fatalf("during an outage: %v, want ErrUnavailable", err)
		}
	}
	if got := inner.calls.Load(); got != 5 {
		t.Errorf("3 lookups during an outage reached the store %d times in all, want 5: outages must not be cached", got)
	}
}

// TestCachedKeyStoreRevocation: a revocation through the cache takes
// effect at once; one made straight in the store, within TTL.
func TestCachedKeyStoreRevocation(t *testing.T) {
	ctx := context.Background()
	const ttl = 2 * time.Second
	c, inner := newCached(t, upscale.CachedKeyStoreOptions{TTL: ttl})

	c.Authenticate(ctx, cachedKey)
	if err := c.RevokeKey(ctx, cachedKey); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Authenticate(ctx, cachedKey); !errors.Is(err, upscale.ErrUnauthorized) {
		t.Fatalf("right after RevokeKey through the cache: %v, want ErrUnauthorized", err)
	}

	const elsewhere = "upk_test_elsewhere_0123456789"
	inner.AddKey(ctx, elsewhere, "acme")
	c.Authenticate(ctx, elsewhere)
	revoked := time.Now()
	inner.RevokeKey(ctx, elsewhere)
	if got, err := c.Authenticate(ctx, elsewhere); err != nil || got != "acme" {
		t.Fatalf("right after a revocation elsewhere: %q, %v; the cached answer should still hold", got, err)
	}
	for {
		_, err := c.Authenticate(ctx, elsewhere)
		if errors.Is(err, upscale.ErrUnauthorized) {
			break
		}
		if time.Since(revoked) > ttl+5*time.Second {
			t.Fatalf("a key revoked elsewhere still works %v later, with a TTL of %v", time.Since(revoked), ttl)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCachedKeyStoreAddAfterRefusal: a key refused (and the refusal
// cached) works at once once it is added through the cache.
func TestCachedKeyStoreAddAfterRefusal(t *testing.T) {
	ctx := context.Background()
	c, _ := newCached(t, upscale.CachedKeyStoreOptions{TTL: time.Hour})
	c.Authenticate(ctx, unknownKey)
	if err := c.AddKey(ctx, unknownKey, "globex"); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Authenticate(ctx, unknownKey); err != nil || got != "globex" {
		t.Errorf("after AddKey: %q, %v; want globex", got, err)
	}
}

// gatedKeys holds lookups of one key until gate closes, with the answer
// the store gave when the lookup began.
type gatedKeys struct {
	*upscale.MemoryKeyStore
	entered, gate chan struct{}
}

func (k gatedKeys) Authenticate(ctx context.Context, key string) (string, error) {
	id, err := k.MemoryKeyStore.Authenticate(ctx, key)
	k.entered <- struct{}{}
	<-k.gate
	return id, err
}

// TestCachedKeyStoreRaceWithRevocation: a lookup that read the key before
// a revocation through the cache, and returns after it, does not cache
// its stale answer.
func TestCachedKeyStoreRaceWithRevocation(t *testing.T) {
	ctx := context.Background()
	inner := gatedKeys{MemoryKeyStore: upscale.NewMemoryKeyStore(), entered: make(chan struct{}, 1), gate: make(chan struct{})}
	inner.MemoryKeyStore.AddKey(ctx, cachedKey, "acme")
	c := upscale.NewCachedKeyStore(inner, upscale.CachedKeyStoreOptions{TTL: time.Hour})
	defer c.Close()

	stale := make(chan string)
	go func() {
		id, _ := c.Authenticate(ctx, cachedKey)
		stale <- id
	}()
	<-inner.entered // it has read the key as valid
	if err := c.RevokeKey(ctx, cachedKey); err != nil {
		t.Fatal(err)
	}
	close(inner.gate)
	if id := <-stale; id != "acme" {
		t.Fatalf("the racing lookup got %q, want the answer from before the revocation", id)
	}
	if _, err := c.Authenticate(ctx, cachedKey); !errors.Is(err, upscale.ErrUnauthorized) {
		t.Errorf("after the racing lookup returned: %v, want ErrUnauthorized: its stale answer was cached", err)
	}
}

// TestCachedKeyStoreBound: beyond MaxEntries, answers are not kept.
func TestCachedKeyStoreBound(t *testing.T) {
	ctx := context.Background()
	c, inner := newCached(t, upscale.CachedKeyStoreOptions{TTL: time.Hour, MaxEntries: 10})
	keys := make([]string, 20)
	for i := range keys {
		keys[i] = upscale.NewKey("upk_test_")
	}
	for range 2 {
		for _, k := range keys {
			c.Authenticate(ctx, k)
		}
	}
	if got := inner.calls.Load(); got != 30 {
		t.Errorf("two rounds of 20 unknown keys reached the store %d times, want 30: 10 kept, 10 looked up twice", got)
	}
}
