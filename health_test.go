package upscale_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
)

// pingable is a Pinger whose server can be taken away.
type pingable struct{ down atomic.Bool }

func (p *pingable) Ping(context.Context) error {
	if p.down.Load() {
		return errDown
	}
	return nil
}

// pingingLedger is a MemoryLedger that is also a Pinger.
type pingingLedger struct {
	*upscale.MemoryLedger
	pingable
}

func getHealth(t *testing.T, h http.Handler) (status int, health map[string]any) {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if err := json.Unmarshal(w.Body.Bytes(), &health); err != nil {
		t.Fatalf("health body %q: %v", w.Body, err)
	}
	return w.Code, health
}

// TestReadiness: ready while every store answers; 503 naming the store
// while one does not, without its error text; ready again once it is
// back; 503 from Drain on, while liveness stays 200 throughout.
func TestReadiness(t *testing.T) {
	var ledger *pingingLedger
	e := newEnv(t, func(c *upscale.Config) {
		ledger = &pingingLedger{MemoryLedger: c.Ledger.(*upscale.MemoryLedger)}
		c.Ledger = ledger
	})
	ready, live := e.handler.ReadyHandler(), e.handler.LiveHandler()

	if status, health := getHealth(t, ready); status != http.StatusOK || health["status"] != "ready" {
		t.Errorf("readiness %d %v, want 200 ready", status, health)
	}
	ledger.down.Store(true)
	status, health := getHealth(t, ready)
	stores, _ := health["stores"].(map[string]any)
	if status != http.StatusServiceUnavailable || health["status"] != "unavailable" || stores["ledger"] != "unreachable" || stores["keys"] != "ok" {
		t.Errorf("readiness with the ledger down: %d %v, want 503 naming the ledger unreachable", status, health)
	}
	if status, _ := getHealth(t, live); status != http.StatusOK {
		t.Errorf("liveness with the ledger down: %d, want 200", status)
	}
	ledger.down.Store(false)
	if status, _ := getHealth(t, ready); status != http.StatusOK {
		t.Errorf("readiness with the ledger back: %d, want 200", status)
	}

	e.handler.Drain()
	if status, health := getHealth(t, ready); status != http.StatusServiceUnavailable || health["status"] != "draining" {
		t.Errorf("readiness while draining: %d %v, want 503 draining", status, health)
	}
	if status, _ := getHealth(t, live); status != http.StatusOK {
		t.Errorf("liveness while draining: %d, want 200", status)
	}
	checkOK(t, e.post(keyFree, body(e.url("/small.png"))), upscale.PoolFree) // a draining handler still serves
}

// pingingKeys is a MemoryKeyStore that is also a Pinger.
type pingingKeys struct {
	*upscale.MemoryKeyStore
	pingable
}

// TestReadinessThroughTheKeyCache: a CachedKeyStore passes readiness
// checks on to the key store behind it.
func TestReadinessThroughTheKeyCache(t *testing.T) {
	var keys *pingingKeys
	e := newEnv(t, func(c *upscale.Config) {
		keys = &pingingKeys{MemoryKeyStore: c.Keys.(*upscale.MemoryKeyStore)}
		cached := upscale.NewCachedKeyStore(keys, upscale.CachedKeyStoreOptions{})
		t.Cleanup(func() { cached.Close() })
		c.Keys = cached
	})
	keys.down.Store(true)
	status, health := getHealth(t, e.handler.ReadyHandler())
	if stores, _ := health["stores"].(map[string]any); status != http.StatusServiceUnavailable || stores["keys"] != "unreachable" {
		t.Errorf("readiness with the key store down behind its cache: %d %v, want 503 naming keys", status, health)
	}
}

// pingingIdempotency and pingingLimiter are the optional stores, as Pingers.
type pingingIdempotency struct {
	*upscale.MemoryIdempotencyStore
	pingable
}

type pingingLimiter struct {
	*upscale.MemoryRateLimiter
	pingable
}

// TestReadinessPingsEveryStore: the IdempotencyStore and the RateLimiter
// are pinged too, as the ReadyHandler promises; before, only the four
// required stores were.
func TestReadinessPingsEveryStore(t *testing.T) {
	idem := &pingingIdempotency{MemoryIdempotencyStore: upscale.NewMemoryIdempotencyStore(upscale.MemoryIdempotencyStoreOptions{})}
	limiter := &pingingLimiter{MemoryRateLimiter: upscale.NewMemoryRateLimiter(upscale.MemoryRateLimiterOptions{PerSecond: 10, Burst: 10})}
	e := newEnv(t, func(c *upscale.Config) { c.Idempotency, c.RateLimiter = idem, limiter })
	for role, down := range map[string]*atomic.Bool{"idempotency": &idem.down, "rate_limiter": &limiter.down} {
		down.Store(true)
		status, health := getHealth(t, e.handler.ReadyHandler())
		if stores, _ := health["stores"].(map[string]any); status != http.StatusServiceUnavailable || stores[role] != "unreachable" {
			t.Errorf("readiness with the %s down: %d %v, want 503 naming it unreachable", role, status, health)
		}
		down.Store(false)
	}
}

// zeroBurstLimiter refuses with a Burst of 0, as a host's own limiter may.
type zeroBurstLimiter struct{}

func (zeroBurstLimiter) Allow(context.Context, upscale.KeyDigest) (upscale.RateDecision, error) {
	return upscale.RateDecision{Allowed: false, Window: time.Second, RetryAfter: time.Second}, nil
}
