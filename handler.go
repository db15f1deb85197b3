package upscale

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures a Handler. The four stores are required; every other
// field's zero value means the default given beside it.
type Config struct {
	Keys     KeyStore    // resolves API keys to accounts; required
	Ledger   QuotaLedger // charges accounts; required
	Upscaler Upscaler    // enlarges images, e.g. engine/vips; required
	Blobs    BlobStore   // keeps results behind expiring links; required

	// Idempotency keeps the answers of requests sent with an
	// Idempotency-Key header, so that a retry of a request whose answer
	// was lost gets that answer again and is not charged twice (see
	// IdempotencyStore). Nil means a MemoryIdempotencyStore, which holds
	// for one process only: replicas share sqlstore.Store instead.
	Idempotency IdempotencyStore
	// IdempotencyTTL is how long a key and its answer are kept. Zero means
	// 24 hours.
	IdempotencyTTL time.Duration
	// RateLimiter limits how often each API key may call, on top of its
	// account's quota; refusals are 429 rate_limited with a Retry-After.
	// MemoryRateLimiter limits within one process. Nil means no limit.
	RateLimiter RateLimiter
	// Path is where Middleware answers the API. Zero means
	// "/api/v1/upscale". A host that mounts the Handler itself chooses
	// the path with its router instead.
	Path string
	// LinkTTL is how long a result's link works. Zero means one hour. New
	// refuses one longer than the BlobStore's links can last
	// (ExpiryLimiter).
	LinkTTL time.Duration
	// EngineTimeout bounds the Upscaler's work on one request, queueing
	// included; past it the caller gets 504. Zero means 60 seconds.
	EngineTimeout time.Duration
	// FetchTimeout bounds the whole download of a source image, redirects
	// included; past it the caller gets 400 source_unreachable. Zero means
	// 20 seconds.
	FetchTimeout time.Duration
	// EngineConcurrency is how many requests the handler lets the Upscaler
	// work on at once. Zero means the Upscaler's own Concurrency when it is
	// a ConcurrentUpscaler, else the number of CPUs.
	EngineConcurrency int
	// QueueLength is how many more requests may be admitted beyond those in
	// the engine: fetching their source or waiting for the engine. A request
	// that finds the queue full, or whose expected wait for the engine
	// already passes EngineTimeout, is refused at once with 503
	// overloaded and a Retry-After, before anything is reserved or fetched.
	// Zero means 4 × EngineConcurrency.
	QueueLength int
	// AccountShare is how many of the EngineConcurrency + QueueLength
	// places the requests of one account (all its keys together) may hold
	// at once, so that one account's slow sources or floods cannot refuse
	// other accounts. A request beyond it is refused with 429 rate_limited
	// and a Retry-After, before anything is reserved or fetched. Zero
	// means half of the places, at least one.
	AccountShare int
	// MemoryBudget bounds the memory requests hold at once: source bytes
	// while downloading and held, and the engine's working memory as its
	// MemoryEstimator reads it from the source's header. A request waits
	// for its share within its deadlines (FetchTimeout for the download,
	// EngineTimeout for the engine) or is refused with 503 overloaded; one
	// that needs more than the whole budget is image_too_large. Zero means
	// 1 GiB. The process needs a constant on top (the Go runtime, libvips'
	// caches and threads, connection buffers; see README, "Memory").
	MemoryBudget int64
	// IdleRelease is how long the handler waits, once no request is in
	// flight, before it gives memory back to the system: a garbage
	// collection that returns the Go heap's free pages
	// (debug.FreeOSMemory), and the Upscaler's own ReleaseMemory when it
	// is a MemoryReleaser. Without it a burst of large images leaves the
	// process holding its peak (README, "Memory"). Zero means 5 seconds;
	// negative turns it off, for hosts that manage memory themselves.
	IdleRelease time.Duration
	// SettleTimeout bounds how long the handler keeps trying to commit the
	// charge of a finished image, or to give back an unused unit, while the
	// ledger is unavailable, retrying with backoff. A result whose charge
	// cannot be committed in that time is deleted, never given away. Zero
	// means 15 seconds.
	SettleTimeout time.Duration
	// FreeTierMaxFileBytes is the largest source file a request may have
	// without needing paid capability. Zero means 5 MiB. A plan whose
	// MaxFileBytes is zero accepts files up to this size.
	FreeTierMaxFileBytes int64
	// AllowedPorts are the ports source URLs may use. Nil means 80 and 443.
	AllowedPorts []uint16
	// AllowedNetworks are address ranges sources may come from although the
	// address policy refuses them, such as an internal image server's
	// 10.20.0.0/16, or 64:ff9b::/96 on an IPv6-only network with NAT64 (the
	// IPv4 address inside a NAT64 address is still checked). Nil means none.
	AllowedNetworks []netip.Prefix
	// AllowedHosts are host names whose addresses are not checked at all,
	// such as "images.internal". Compared without case or trailing dot; a
	// redirect to any other host is checked as usual. Nil means none.
	AllowedHosts []string
	// AllowPrivateNetworks lifts the address policy (loopback, private,
	// link-local and reserved addresses, and the port list) for sources.
	// It is for local development and tests: never set it on a server that
	// takes URLs from callers it does not trust.
	AllowPrivateNetworks bool
	// BuiltinSources are images the handler holds itself: an imageUrl
	// equal to a key (an absolute http or https URL, compared once both
	// are parsed) is read from here, with no connection made, so the
	// address policy has nothing to decide and the policy for every other
	// URL stays as it is. The plan's file size limit still applies. The
	// standalone bundles its demo images this way, under its own address,
	// so its demo works on a machine without internet access. Nil means
	// none.
	BuiltinSources map[string][]byte
	// TLSClientConfig is used for https sources. Nil means Go's defaults
	// with the system's root certificates; set RootCAs to trust a private
	// CA, for instance for AllowedHosts.
	TLSClientConfig *tls.Config
	// Resolver looks up source host names. Nil means net.DefaultResolver.
	// Every address it returns is checked; one forbidden address refuses
	// the whole name.
	Resolver Resolver
	// Dial connects to a source's checked ip:port. Nil means a net.Dialer.
	// It exists so tests can reach fake origins without a network; the
	// address policy is applied before Dial is called.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// Metrics receives request counts, step durations and sizes, and reads
	// the handler's load; see package prommetrics. Nil means none.
	Metrics Metrics
	// Logger receives every failure in full. Nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
}

// Handler serves POST requests of the upscale API. The host mounts it at
// /api/v1/upscale (or wherever it likes: ServeHTTP does not look at the
// path), or puts Middleware, which answers Config.Path and the result
// links, in front of its own handler.
//
// A store that reports ErrUnavailable is given a second's rest: meanwhile
// new requests that need it are refused with 503 backend_unavailable and a
// Retry-After, before anything is reserved or fetched, and then one request
// tries it again.
type Handler struct {
	cfg       Config
	fetcher   *fetcher
	admission *admission
	budget    *budget
	// One breaker per store role, even when one value plays two roles:
	// its roles fail together anyway.
	keys, ledger, blobs, idempotency *breaker
	draining                         atomic.Bool // set by Drain
	inFlight                         atomic.Int64

	idleMu    sync.Mutex
	idleTimer *time.Timer // runs releaseIfIdle; nil until the first request ends
}

// New validates cfg, fills its defaults and returns a Handler.
func New(cfg Config) (*Handler, error) {
	switch {
	case cfg.Keys == nil:
		return nil, errors.New("upscale: Config.Keys is required")
	case cfg.Ledger == nil:
		return nil, errors.New("upscale: Config.Ledger is required")
	case cfg.Upscaler == nil:
		return nil, errors.New("upscale: Config.Upscaler is required")
	case cfg.Blobs == nil:
		return nil, errors.New("upscale: Config.Blobs is required")
	case cfg.IdempotencyTTL < 0 || cfg.LinkTTL < 0 || cfg.EngineTimeout < 0 || cfg.FetchTimeout < 0 || cfg.SettleTimeout < 0 || cfg.MemoryBudget < 0 || cfg.FreeTierMaxFileBytes < 0 || cfg.EngineConcurrency < 0 || cfg.QueueLength < 0 || cfg.AccountShare < 0:
		return nil, errors.New("upscale: Config durations, sizes and counts cannot be negative")
	}
	if cfg.EngineConcurrency == 0 {
		cfg.EngineConcurrency = runtime.NumCPU()
		if c, ok := cfg.Upscaler.(ConcurrentUpscaler); ok {
			cfg.EngineConcurrency = max(c.Concurrency(), 1)
		}
	}
	cfg.QueueLength = cmp.Or(cfg.QueueLength, 4*cfg.EngineConcurrency)
	cfg.AccountShare = cmp.Or(cfg.AccountShare, max((cfg.EngineConcurrency+cfg.QueueLength)/2, 1))
	cfg.Path = cmp.Or(cfg.Path, "/api/v1/upscale")
	cfg.IdempotencyTTL = cmp.Or(cfg.IdempotencyTTL, 24*time.Hour)
	cfg.LinkTTL = cmp.Or(cfg.LinkTTL, time.Hour)
	if limit, ok := cfg.Blobs.(ExpiryLimiter); ok && cfg.LinkTTL > limit.MaxLinkTTL() {
		return nil, fmt.Errorf("upscale: Config.LinkTTL is %v, but the BlobStore's links last at most %v", cfg.LinkTTL, limit.MaxLinkTTL())
	}
	cfg.EngineTimeout = cmp.Or(cfg.EngineTimeout, 60*time.Second)
	cfg.FetchTimeout = cmp.Or(cfg.FetchTimeout, 20*time.Second)
	cfg.SettleTimeout = cmp.Or(cfg.SettleTimeout, 15*time.Second)
	if ttl, ok := cfg.Ledger.(ReservationExpirer); ok && ttl.ReservationTTL() <= cfg.requestBound() {
		return nil, fmt.Errorf("upscale: the QuotaLedger's reservations last %v, not longer than a request may (%v: twice FetchTimeout, EngineTimeout and SettleTimeout); a reservation must outlive its request, or a result could be delivered uncharged", ttl.ReservationTTL(), cfg.requestBound())
	}
	cfg.MemoryBudget = cmp.Or(cfg.MemoryBudget, 1<<30)
	cfg.IdleRelease = cmp.Or(cfg.IdleRelease, 5*time.Second)
	cfg.FreeTierMaxFileBytes = cmp.Or(cfg.FreeTierMaxFileBytes, 5<<20)
	if cfg.AllowedPorts == nil {
		cfg.AllowedPorts = []uint16{80, 443}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Metrics == nil {
		cfg.Metrics = noMetrics{}
	}
	if cfg.Idempotency == nil {
		cfg.Idempotency = NewMemoryIdempotencyStore(cfg.Now)
	}
	fetcher, err := newFetcher(cfg)
	if err != nil {
		return nil, err
	}
	h := &Handler{
		cfg:         cfg,
		fetcher:     fetcher,
		admission:   newAdmission(cfg.EngineConcurrency, cfg.QueueLength, cfg.AccountShare, cfg.EngineTimeout),
		budget:      newBudget(cfg.MemoryBudget),
		keys:        &breaker{now: cfg.Now},
		ledger:      &breaker{now: cfg.Now},
		blobs:       &breaker{now: cfg.Now},
		idempotency: &breaker{now: cfg.Now},
	}
	cfg.Metrics.Attach(h.Load)
	return h, nil
}

// requestBound is longer than any request can take: its download, its
// engine time (queueing included) and the settlement of its charge, and
// as much again for the stores' calls between them. It is the lease of an
// Idempotency-Key's claim, and a reservation must outlive it.
func (c Config) requestBound() time.Duration {
	return 2 * (c.FetchTimeout + c.EngineTimeout + c.SettleTimeout)
}

// Middleware returns next with the API in front of it: a request for
// Config.Path goes to the Handler and, when the BlobStore serves its own
// links (a LinkServer), a request under its LinkPath goes to the
// BlobStore. Every other request reaches next as it came.
func (h *Handler) Middleware(next http.Handler) http.Handler {
	links, servesLinks := h.cfg.Blobs.(LinkServer)
	var linkPath string
	if servesLinks {
		linkPath = links.LinkPath()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == h.cfg.Path:
			h.ServeHTTP(w, r)
		case servesLinks && strings.HasPrefix(r.URL.Path, linkPath):
			links.ServeHTTP(w, r)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// Load returns what the handler is doing now.
func (h *Handler) Load() Load {
	queued, inEngine := h.admission.load()
	return Load{
		InFlight: int(h.inFlight.Load()), Queued: queued, InEngine: inEngine, QueueCapacity: h.admission.capacity(),
		MemoryInUse: h.budget.inUse.Load(), MemoryBudget: h.budget.total,
	}
}

// Response is the body of a successful upscale request.
type Response struct {
	// URL is the temporary link to the enlarged image.
	URL string `json:"url"`
	// ResizedTo is always null in this version of the API.
	ResizedTo *struct{} `json:"resizedTo"`
	// Via names the pool that paid.
	Via Pool `json:"via"`

	linkExpires time.Time // kept with an Idempotency-Key's answer
}

// CloseIdleConnections closes the idle connections to sources kept for
// reuse. A host calls it on shutdown; requests may still be served after it.
func (h *Handler) CloseIdleConnections() {
	h.fetcher.client.CloseIdleConnections()
}

// ServeHTTP implements http.Handler. A panic anywhere in a request, the
// stores and the Upscaler included, is answered 500 internal_error with
// the unit released, and the server goes on serving.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	h.inFlight.Add(1)
	defer func() {
		if h.inFlight.Add(-1) == 0 {
			h.releaseWhenIdle()
		}
	}()
	code, pool := "ok", Pool("")
	defer func() { h.cfg.Metrics.RequestDone(code, pool, time.Since(start)) }()
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v) // net/http's own way to abort a response
			}
			code = h.fail(w, r, panicError(v))
		}
	}()
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		code = h.fail(w, r, errMethodNotAllowed)
		return
	}
	var caller caller
	resp, replay, err := h.upscale(w, r, &caller)
	if caller.accountID != "" {
		// After upscale has given its admission place back: the balance
		// is read on nobody's place.
		h.setQuotaHeaders(r.Context(), w.Header(), caller, err)
	}
	switch {
	case err != nil:
		code = h.fail(w, r, err)
	case replay != nil:
		code = "replayed"
		w.Header().Set("Idempotent-Replayed", "true")
		writeJSON(w, replay.Status, replay.Body)
	default:
		pool = resp.Via
		writeJSON(w, http.StatusOK, jsonBody(resp))
	}
}

// jsonBody is v as the handler sends it: the same bytes every time, so
// that a replayed answer is the answer.
func jsonBody(v any) []byte {
	body, _ := json.Marshal(v) // a Response or a Problem: nothing that fails
	return append(body, '\n')
}

// writeJSON sends an answer: a success as JSON, a failure as a problem.
func writeJSON(w http.ResponseWriter, status int, body []byte) {
	hdr := w.Header()
	hdr.Set("Content-Type", "application/json")
	if status >= 400 {
		hdr.Set("Content-Type", "application/problem+json")
	}
	hdr.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(body)
}

// releaseWhenIdle gives memory back once IdleRelease has passed with no
// request in flight; each request that ends idle starts the wait again.
func (h *Handler) releaseWhenIdle() {
	if h.cfg.IdleRelease < 0 {
		return
	}
	h.idleMu.Lock()
	defer h.idleMu.Unlock()
	if h.idleTimer == nil {
		h.idleTimer = time.AfterFunc(h.cfg.IdleRelease, h.releaseIfIdle)
		return
	}
	h.idleTimer.Reset(h.cfg.IdleRelease)
}

func (h *Handler) releaseIfIdle() {
	if h.inFlight.Load() != 0 {
		return // the request that ends it will start the wait again
	}
	debug.FreeOSMemory()
	if r, ok := h.cfg.Upscaler.(MemoryReleaser); ok {
		r.ReleaseMemory()
	}
}

// caller is who a request turned out to come from, once its key and its
// account's share of the places have been checked.
type caller struct {
	accountID string
	burst     *RateDecision // the key's RateLimiter decision, if there is a RateLimiter
}

// upscale admits, authenticates and validates one request, then runs it:
// once per Idempotency-Key when the caller sent one, in which case it may
// return the key's kept answer instead. It fills in who the caller is.
func (h *Handler) upscale(w http.ResponseWriter, r *http.Request, who *caller) (Response, *IdempotentAnswer, error) {
	ctx := r.Context()
	if err := h.admission.refusing(); err != nil {
		return Response{}, nil, err
	}
	key, ok := bearerKey(r.Header)
	if !ok {
		return Response{}, nil, ErrUnauthorized
	}
	// The body is read before a place is taken, so that a caller sending
	// it slowly holds none, and judged after the key, so that a refused
	// key gets the same answer whatever it sent.
	req, invalid := decodeRequest(w, r)
	if err := h.blobs.refusing(); err != nil {
		return Response{}, nil, err // the result could not be stored anyway
	}
	// The key's lookup is work for the KeyStore's server, so it comes
	// after admission: a burst of callers costs it at most as many
	// lookups at once as there are places, and the rest are refused
	// before any reservation or download. A key that holds its share of
	// the places already is refused before it takes one.
	digest := DigestKey(key)
	leaveKeyShare, err := h.admission.takeShare(sharer{key: digest})
	if err != nil {
		return Response{}, nil, err
	}
	defer leaveKeyShare()
	leave, err := h.admission.admit()
	if err != nil {
		return Response{}, nil, err
	}
	defer leave()
	var accountID string
	err = h.keys.call(func() (err error) {
		accountID, err = h.cfg.Keys.Authenticate(ctx, key)
		return err
	})
	if errors.Is(err, ErrUnauthorized) {
		return Response{}, nil, ErrUnauthorized // one body for every refused key, whatever the store said
	}
	if err != nil {
		return Response{}, nil, err
	}
	leaveShare, err := h.admission.takeShare(sharer{account: accountID})
	if err != nil {
		return Response{}, nil, err
	}
	defer leaveShare()
	who.accountID = accountID
	if h.cfg.RateLimiter != nil {
		d, err := h.cfg.RateLimiter.Allow(ctx, digest)
		if err != nil {
			return Response{}, nil, err
		}
		who.burst = &d
		if !d.Allowed {
			return Response{}, nil, &retryAfterError{
				err:   Explain(ErrRateLimited, "This API key may send %d requests at once and one more every %v; wait for the Retry-After. Nothing was charged.", d.Burst, d.Window/time.Duration(max(d.Burst, 1))),
				after: d.RetryAfter,
			}
		}
	}
	if invalid != nil {
		return Response{}, nil, invalid
	}
	onceKey, sent, err := idempotencyKey(r.Header.Values("Idempotency-Key"))
	if err != nil {
		return Response{}, nil, err
	}
	if sent {
		return h.runOnce(ctx, accountID, onceKey, req)
	}
	resp, err := h.run(ctx, accountID, req, nil)
	return resp, nil, err
}

// run charges one unit for req: reserve, fetch, enlarge, store, commit.
// The unit is released on every path that does not reach the commit.
// prepare, when not nil, is given the answer and the reservation that pays
// for it before the commit; if it fails, the request stops uncharged. Once
// it has succeeded, a commit whose outcome stays unknown (the ledger
// unavailable for SettleTimeout) leaves result and reservation as they are
// and returns errChargeUnsettled: whoever prepared them settles them.
func (h *Handler) run(ctx context.Context, accountID string, req request, prepare func(context.Context, Response, Reservation) error) (Response, error) {
	// Reserving before fetching means an exhausted account costs us no
	// download; a file that turns out to need paid capability is re-checked
	// below.
	hold, err := h.reserve(ctx, accountID, ScaleNeedsPaidPlan(req.Scale))
	if err != nil {
		return Response{}, err
	}
	settled := false
	defer func() {
		if !settled {
			h.release(ctx, hold)
		}
	}()

	memory := h.budget.newGrant()
	defer memory.done()
	maxBytes := cmp.Or(hold.Plan.MaxFileBytes, h.cfg.FreeTierMaxFileBytes)
	fetchStart := time.Now()
	src, err := h.fetcher.fetch(ctx, req.source, maxBytes, func(ctx context.Context, n int64) error {
		return memory.grow(ctx, n, h.admission.busy)
	})
	h.cfg.Metrics.StepDone(StepFetch, time.Since(fetchStart))
	if err != nil {
		return Response{}, err
	}
	memory.shrinkTo(int64(cap(src)))
	if needsPaid := int64(len(src)) > h.cfg.FreeTierMaxFileBytes; !hold.Covers(needsPaid) {
		paid, err := h.reserve(ctx, accountID, true)
		if err != nil {
			return Response{}, err
		}
		h.release(ctx, hold)
		hold = paid
	}

	img, err := h.enlarge(ctx, src, req.Params, memory)
	if err != nil {
		return Response{}, err
	}
	h.cfg.Metrics.ImageDone(len(src), len(img.Data))
	blobKey := strings.ToLower(rand.Text()) + extension(img.ContentType)
	expires := h.cfg.Now().Add(h.cfg.LinkTTL)
	var link string
	storeStart := time.Now()
	err = h.blobs.call(func() (err error) {
		link, err = h.cfg.Blobs.Put(ctx, blobKey, img.Data, img.ContentType, expires)
		return err
	})
	h.cfg.Metrics.StepDone(StepStore, time.Since(storeStart))
	if err != nil {
		return Response{}, fmt.Errorf("store result: %w", err)
	}
	resp := Response{URL: link, Via: hold.Pool, linkExpires: expires}
	if prepare != nil {
		if err := prepare(ctx, resp, hold); err != nil {
			h.deleteResult(ctx, blobKey, expires)
			return Response{}, err
		}
	}
	if err := h.commit(ctx, hold.ID); err != nil {
		if prepare != nil && errors.Is(err, ErrUnavailable) {
			settled = true
			return Response{}, fmt.Errorf("commit reservation: %w: %w", errChargeUnsettled, err)
		}
		h.deleteResult(ctx, blobKey, expires)
		return Response{}, fmt.Errorf("commit reservation: %w", err)
	}
	settled = true
	return resp, nil
}

// errChargeUnsettled marks a prepared request whose commit could not be
// confirmed either way; it is answered as the ledger's unavailability.
var errChargeUnsettled = errors.New("charge left to settle")

func (h *Handler) reserve(ctx context.Context, accountID string, needsPaid bool) (hold Reservation, err error) {
	err = h.ledger.call(func() (err error) {
		hold, err = h.cfg.Ledger.Reserve(ctx, accountID, needsPaid)
		return err
	})
	if errors.Is(err, ErrQuotaExhausted) {
		return hold, h.quotaExhausted(ctx, accountID, err)
	}
	return hold, err
}

// commit charges a reservation, retrying while the ledger is
// unavailable. Commit is idempotent, so a retry after an attempt whose
// answer was lost charges nothing more; ErrNotFound means the unit was
// given back (the reservation expired), never that it was charged.
func (h *Handler) commit(ctx context.Context, reservationID string) error {
	return h.settle(ctx, h.ledger, func(ctx context.Context) error {
		return h.cfg.Ledger.Commit(ctx, reservationID)
	})
}

// release gives a unit back even when the caller has gone away: the
// request's context may be cancelled, the money is still owed back.
func (h *Handler) release(ctx context.Context, hold Reservation) {
	err := h.settle(context.WithoutCancel(ctx), h.ledger, func(ctx context.Context) error {
		return h.cfg.Ledger.Release(ctx, hold.ID)
	})

	if err != nil {
		h.cfg.Logger.Error("upscale: release reservation; the ledger gives the unit back when the reservation expires", "reservation", hold.ID, "account", hold.AccountID, "err", err)
	}
}

// settle runs the last word on something already held (a unit's commit
// or release, an Idempotency-Key's answer), retrying with backoff for up
// to SettleTimeout while the store behind store reports ErrUnavailable.
// It is called whatever that breaker says: the thing is already held.
func (h *Handler) settle(ctx context.Context, store *breaker, op func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.SettleTimeout)
	defer cancel()
	backoff := 50 * time.Millisecond
	for {
		err := store.record(op(ctx))
		if !errors.Is(err, ErrUnavailable) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// deleteResult removes a result that will not be paid for, so that no link
// to it exists once the request has failed. It is best effort: a result
// left behind expires with its link.
func (h *Handler) deleteResult(ctx context.Context, blobKey string, expires time.Time) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := h.blobs.record(h.cfg.Blobs.Delete(ctx, blobKey, expires)); err != nil {
		h.cfg.Logger.Error("upscale: delete uncharged result; it stays until its link expires", "key", blobKey, "err", err)
	}
}

// enlarge runs the Upscaler under EngineTimeout, once the engine's
// working memory is granted and one of its slots is free. It answers at
// the deadline even if the Upscaler does not, so a stuck engine cannot hold
// the request; the slot and the memory stay taken until the Upscaler
// returns.
func (h *Handler) enlarge(ctx context.Context, src []byte, params Params, memory *grant) (Image, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, h.cfg.EngineTimeout, ErrUpstreamTimeout)
	defer cancel()
	img, err := h.runEngine(ctx, src, params, memory)
	if errors.Is(err, context.DeadlineExceeded) && errors.Is(context.Cause(ctx), ErrUpstreamTimeout) {
		return Image{}, ErrUpstreamTimeout // the engine's own deadline, not the request's
	}
	return img, err
}

// runEngine waits for the engine and runs the Upscaler, until ctx ends.
func (h *Handler) runEngine(ctx context.Context, src []byte, params Params, memory *grant) (Image, error) {
	queueStart := time.Now()
	slot, err := h.waitForEngine(ctx, src, params, memory)
	h.cfg.Metrics.StepDone(StepQueue, time.Since(queueStart))
	if err != nil {
		return Image{}, err
	}
	type result struct {
		img Image
		err error
	}
	done := make(chan result, 1) // buffered: a late Upscaler must not block forever
	memory.share()
	go func() {
		engineStart := time.Now()
		defer func() { h.cfg.Metrics.StepDone(StepEngine, time.Since(engineStart)) }()
		defer memory.done()
		defer slot.done()
		defer func() {
			if v := recover(); v != nil { // on this goroutine a panic would end the process
				done <- result{err: panicError(v)}
			}
		}()
		img, err := h.cfg.Upscaler.Upscale(ctx, src, params)
		done <- result{img, err}
	}()
	select {
	case res := <-done:
		return res.img, res.err
	case <-ctx.Done():
		slot.abandon()
		return Image{}, ctx.Err()
	}
}

// waitForEngine grants the engine's working memory for src, then takes
// one of the engine's slots. The work the slot is timed by is that
// memory: both engines' memory, like their time, grows with the output's
// pixels and the learned passes. An Upscaler that estimates nothing is
// timed by its source's bytes.
func (h *Handler) waitForEngine(ctx context.Context, src []byte, params Params, memory *grant) (*slot, error) {
	work := int64(len(src))
	if estimator, ok := h.cfg.Upscaler.(MemoryEstimator); ok {
		need, err := estimator.EstimateMemory(src, params)
		if err != nil {
			return nil, err
		}
		if err := memory.grow(ctx, need, h.admission.busy); err != nil {
			return nil, err
		}
		work = need
	}
	return h.admission.engineSlot(ctx, float64(work))
}

func extension(contentType string) string {
	switch contentType {
	case "image/jpeg":
		return ".jpg"
	case "image/png":
		return ".png"
	case "image/webp":
		return ".webp"
	}
	return ""
}

var errMethodNotAllowed = errors.New("method not allowed")

// panicError turns a recovered panic into an error that keeps the stack for
// the log; the caller sees internal_error.
func panicError(v any) error {
	return fmt.Errorf("panic: %v\n%s", v, debug.Stack())
}

// problems maps errors to HTTP status, machine code and the detail shown
// when the error carries no explanation of its own (see Explain). It is the
// only place that decides what a caller sees; the first matching row wins.
var problems = []struct {
	err    error
	status int
	code   string
	detail string
}{
	{errMethodNotAllowed, http.StatusMethodNotAllowed, "method_not_allowed", "Use POST with a JSON body."},
	{ErrUnauthorized, http.StatusUnauthorized, "unauthorized", "Send a valid API key as \"Authorization: Bearer <key>\"; keys are issued on the account dashboard."},
	{ErrInvalidRequest, http.StatusBadRequest, "invalid_request", "The request body must be one JSON object with imageUrl and optional scale, imageType and denoise."},
	{ErrInvalidImageURL, http.StatusBadRequest, "invalid_image_url", "imageUrl must be an absolute http or https URL of an image."},
	{ErrInvalidScale, http.StatusBadRequest, "invalid_scale", "scale must be " + scaleList(false) + "."},
	{ErrInvalidImageType, http.StatusBadRequest, "invalid_image_type", "imageType must be \"photo\" or \"anime\"."},
	{ErrInvalidDenoise, http.StatusBadRequest, "invalid_denoise", "denoise must be \"none\", \"low\", \"mid\", \"high\" or \"max\"."},
	{ErrSourceForbidden, http.StatusBadRequest, "source_forbidden", "The image URL leads to an address or port this service does not fetch from; use a public http or https URL."},
	{ErrSourceUnreachable, http.StatusBadRequest, "source_unreachable", "The image could not be downloaded from its URL; check that it is publicly reachable."},
	{ErrSourceUnavailable, http.StatusBadGateway, "source_unavailable", "The image's server failed to deliver it for now; try again later. Nothing was charged."},
	{ErrUnsupportedImage, http.StatusBadRequest, "unsupported_image", "The file is not a JPEG, PNG or WebP image that can be decoded."},
	{ErrImageTooLarge, http.StatusBadRequest, "image_too_large", "The image is too large for this service or your plan; send a smaller one."},
	{ErrPaidPlanRequired, http.StatusForbidden, "paid_plan_required", "Scales " + scaleList(true) + ", and files above the free tier's size, need a paid plan or credits."},
	{ErrQuotaExhausted, http.StatusTooManyRequests, "quota_exhausted", "This account has no images left; buy credits or subscribe to the unlimited plan."},
	{ErrRateLimited, http.StatusTooManyRequests, "rate_limited", "This API key sends requests faster than it may; wait for the Retry-After. Nothing was charged."},
	{ErrIdempotencyInFlight, http.StatusConflict, "idempotency_in_flight", "A request with this Idempotency-Key is still running; send it again after the Retry-After to get its answer."},
	{ErrIdempotencyKeyReused, http.StatusUnprocessableEntity, "idempotency_key_reused", "This Idempotency-Key was used for a different request; send a new request with a new key."},
	{ErrResultExpired, http.StatusGone, "result_expired", "This request was carried out and charged already, and its result's link has expired; send it with a new Idempotency-Key to enlarge the image again."},
	{ErrOverloaded, http.StatusServiceUnavailable, "overloaded", "The service is working at capacity; try again in a few seconds."},
	{ErrUnavailable, http.StatusServiceUnavailable, "backend_unavailable", "A service this API depends on cannot be reached at the moment; nothing was charged. Try again in a few seconds."},
	{ErrUpstream, http.StatusBadGateway, "upstream_error", "The upscaling engine failed on this image; retrying is safe."},
	{ErrUpstreamTimeout, http.StatusGatewayTimeout, "upstream_timeout", "The upscaling engine did not finish in time; retrying is safe."},
	{context.DeadlineExceeded, http.StatusGatewayTimeout, "timeout", "The request did not finish in the time it was allowed; nothing was charged. Retrying is safe."},
}

// ProblemCodes returns every machine code a problem answer of the handler
// may carry, internal_error included: the list a contract or a client
// switches on.
func ProblemCodes() []string {
	codes := []string{"internal_error"}
	for _, row := range problems {
		if !slices.Contains(codes, row.code) {
			codes = append(codes, row.code)
		}
	}
	return codes
}

// Problem is the application/problem+json body (RFC 9457) of every error.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	// Code is the stable machine-readable name of the error.
	Code string `json:"code"`
}

func problemFor(err error) Problem {
	p := Problem{
		Status: http.StatusInternalServerError,
		Code:   "internal_error",
		Detail: "Something went wrong on our side; try again later.",
	}
	for _, row := range problems {
		if errors.Is(err, row.err) {
			p.Status, p.Code, p.Detail = row.status, row.code, row.detail
			break
		}
	}
	if ce, ok := errors.AsType[*callerError](err); ok && p.Status != http.StatusInternalServerError {
		p.Detail = ce.detail
	}
	p.Type = "urn:upscale:error:" + p.Code
	p.Title = http.StatusText(p.Status)
	return p
}

// fail answers err as a problem and returns its code, or "caller_gone"
// when there is nobody left to answer.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) (code string) {
	// Only a caller that went away gets nothing; a deadline the host set
	// on the request (a timeout middleware) still gets its answer.
	if errors.Is(r.Context().Err(), context.Canceled) {
		h.cfg.Logger.Debug("upscale: caller went away", "err", err)
		return "caller_gone"
	}
	p := problemFor(err)
	level := slog.LevelInfo
	switch {
	case p.Status == http.StatusServiceUnavailable:
		level = slog.LevelWarn // a refusal by design, in bulk under load
	case p.Status >= 500:
		level = slog.LevelError
	}
	h.cfg.Logger.Log(r.Context(), level, "upscale: request failed", "status", p.Status, "code", p.Code, "err", err)
	hdr := w.Header()
	if p.Status == http.StatusUnauthorized {
		hdr.Set("WWW-Authenticate", `Bearer realm="upscale"`)
	}
	if ra, ok := errors.AsType[*retryAfterError](err); ok {
		hdr.Set("Retry-After", strconv.FormatInt(seconds(ra.after), 10))
	}
	writeJSON(w, p.Status, jsonBody(p))
	return p.Code
}
