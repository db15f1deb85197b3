package upscale

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"
)

// Pinger is a store that can say whether its server answers. ReadyHandler
// pings every store that implements it; sqlstore and s3store do, and the
// in-memory stores need not.
type Pinger interface {
	// Ping returns nil when the store's server answers, and an error
	// wrapping ErrUnavailable when it cannot be reached.
	Ping(ctx context.Context) error
}

// readyTimeout bounds a readiness check: a store slower than this to answer
// a ping is as good as down for a load balancer.
const readyTimeout = 2 * time.Second

// LiveHandler answers 200 as long as the process serves HTTP at all. Mount
// it where the orchestrator's liveness probe looks (the standalone uses
// /livez): it says nothing about the stores, so an outage of a database
// does not get every replica restarted.
func (h *Handler) LiveHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeHealth(w, http.StatusOK, health{Status: "live"})
	})
}

// ReadyHandler answers 200 when the handler can take requests: every store
// that is a Pinger (the four, the IdempotencyStore, the RateLimiter, and
// the JobQueue and WebhookQueue where the job form is on)
// answered within two seconds, the engine is not stuck
// (every slot held by an Upscaler call that outlived its request), and
// Drain has not been called. Otherwise it answers 503, with the state of
// each store and of the engine (never an error message, which may name
// hosts). Being busy is not being unready: a replica at capacity refuses
// what it cannot take in milliseconds, and is ready again when it can.
// Mount it where the load balancer's health check looks (the standalone
// uses /readyz).
func (h *Handler) ReadyHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.draining.Load() {
			writeHealth(w, http.StatusServiceUnavailable, health{Status: "draining"})
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		stores := map[string]any{"keys": h.cfg.Keys, "ledger": h.cfg.Ledger, "blobs": h.cfg.Blobs, "idempotency": h.cfg.Idempotency}
		if h.cfg.RateLimiter != nil {
			stores["rate_limiter"] = h.cfg.RateLimiter
		}
		if h.jobs != nil {
			stores["jobs"], stores["webhooks"] = h.cfg.Jobs, h.cfg.Webhooks
		}
		result := health{Status: "ready", Engine: "ok", Stores: map[string]string{}}
		for role := range stores {
			result.Stores[role] = "ok"
		}
		if h.admission.stuck() {
			result.Status, result.Engine = "unavailable", "stuck"
		}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for role, store := range stores {
			p, ok := store.(Pinger)
			if !ok {
				continue
			}
			wg.Go(func() {
				err := p.Ping(ctx)
				if err == nil {
					return
				}
				h.cfg.Logger.Warn("upscale: readiness: store does not answer", "store", role, "err", err)
				mu.Lock()
				defer mu.Unlock()
				result.Stores[role], result.Status = "unreachable", "unavailable"
			})
		}
		wg.Wait()
		status := http.StatusOK
		if result.Status != "ready" {
			status = http.StatusServiceUnavailable
		}
		writeHealth(w, status, result)
	})
}

// Drain makes ReadyHandler answer 503 from now on, so that load balancers
// send new requests elsewhere, while this handler goes on serving the
// requests that still arrive. A host calls it when told to stop (SIGTERM),
// waits for its balancer to notice, then shuts its server down.
func (h *Handler) Drain() { h.draining.Store(true) }

type health struct {
	Status string            `json:"status"`
	Engine string            `json:"engine,omitempty"`
	Stores map[string]string `json:"stores,omitempty"`
}

func writeHealth(w http.ResponseWriter, status int, body health) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(body)
}
