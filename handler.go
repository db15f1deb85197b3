package upscale

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/url"
	"path"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/upscalekit/upscale/internal/membudget"
)

// Handler serves the upscale API: POST Config.Path, the synchronous
// form and, with Prefer: respond-async, the job form's submission; and
// GET and DELETE Config.Path/jobs/{id}, a job's resource. The host mounts
// it at a path and that path's jobs/ subtree (Config.Path, or its own,
// under a prefix it strips or not: a path the host routes here is read as
// Config.Path's own, or as a job's when it ends in /jobs/{id}), or puts
// Middleware, which answers Config.Path, its jobs and the result links,
// in front of its own handler.
//
// A store that reports ErrUnavailable is given a second's rest: meanwhile
// new requests that need it are refused with 503 backend_unavailable and a
// Retry-After, before anything is reserved or fetched, and then one request
// tries it again.
type Handler struct {
	cfg       Config
	routes    *http.ServeMux // the API's resources under Config.Path; see routeTable
	fetcher   *fetcher
	wording   *strings.Replacer // Config.Wording's, for problem details
	admission *admission
	budget    *membudget.Budget
	// One breaker per store role, even when one value plays two roles:
	// its roles fail together anyway.
	keys, ledger, blobs, idempotency *breaker
	draining                         atomic.Bool // set by Drain
	inFlight, jobWaiters             atomic.Int64
	jobs                             *jobForm // nil when the stores cannot hold jobs
	jobDepth                         jobDepth

	noReadDeadline sync.Once // logs, once, that uploads cannot have their read deadline

	idleMu    sync.Mutex
	idleTimer *time.Timer // runs releaseIfIdle; nil until the first request ends
}

// New validates cfg, fills its defaults and returns a Handler. It starts
// nothing: the job form's workers start with StartJobs.
func New(cfg Config) (*Handler, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	fetcher, err := newFetcher(cfg.Fetch)
	if err != nil {
		return nil, err
	}
	h := &Handler{
		cfg:         cfg,
		fetcher:     fetcher,
		wording:     cfg.Wording.replacer(),
		admission:   newAdmission(cfg.Capacity, cfg.EngineTimeout),
		budget:      membudget.New(cfg.Capacity.MemoryBudget, needsMoreMemory),
		keys:        &breaker{now: cfg.Now},
		ledger:      &breaker{now: cfg.Now},
		blobs:       &breaker{now: cfg.Now},
		idempotency: &breaker{now: cfg.Now},
		jobs:        jobFormFor(cfg),
	}
	h.routes = h.routeTable()
	cfg.Metrics.Attach(h.Load)
	return h, nil
}

// needsMoreMemory is the refusal of an image whose work could never fit in
// the memory budget, whatever else ran.
func needsMoreMemory(need, total int64) error {
	return Explain(ErrImageTooLarge, msgNeedsMoreMemory, Megabytes(need), Megabytes(total))
}

// routeTable declares the API's resources, the one place that says which
// path takes which method: POST Config.Path, and GET and DELETE
// Config.Path/jobs/{id}. A path asked with a method it does not take is
// 405 with its Allow. Every request reaches one of them: a path the host
// routes here from elsewhere is read as one of these (onRoutes).
func (h *Handler) routeTable() *http.ServeMux {
	mux := http.NewServeMux()
	path, job := h.cfg.Path, h.cfg.Path+"/jobs/{id}"
	mux.HandleFunc("POST "+path, h.route(h.servePost))
	mux.HandleFunc("GET "+job, h.route(h.serveJob))
	mux.HandleFunc("DELETE "+job, h.route(h.serveJob))
	mux.HandleFunc(path, h.route(h.refuseMethod(http.MethodPost)))
	mux.HandleFunc(job, h.route(h.refuseMethod("GET, DELETE")))
	return mux
}

// onRoutes returns r as the route table reads it. A host may mount the
// Handler at another path than Config.Path, or strip a prefix off it, and
// routes here only what it means for the API: a path other than the
// table's is read as Config.Path's own, or as a job's when it ends in
// "/jobs/{id}" and either its method is not POST or the ID is one (it
// begins with "job_", as JobQueue.Submit's do). So a mount path that holds
// "jobs" itself is no job, and a POST to a job is 405. A job's Location is
// the path the caller sent, whatever the table read (jobLocation).
func (h *Handler) onRoutes(r *http.Request) *http.Request {
	if h.isRoute(r.URL.Path) {
		return r
	}
	read := h.cfg.Path
	dir, id := path.Split(r.URL.Path)
	if strings.HasSuffix(dir, "/jobs/") && id != "" && (r.Method != http.MethodPost || strings.HasPrefix(id, "job_")) {
		read += "/jobs/" + id
	}
	mapped := new(http.Request)
	*mapped = *r
	mapped.URL = new(url.URL)
	*mapped.URL = *r.URL
	mapped.URL.Path, mapped.URL.RawPath = read, ""
	return mapped
}

// isRoute reports whether p is a path of the route table: Config.Path, or
// one job's under it.
func (h *Handler) isRoute(p string) bool {
	id, isJob := strings.CutPrefix(p, h.cfg.Path+"/jobs/")
	return p == h.cfg.Path || (isJob && id != "" && !strings.Contains(id, "/"))
}

// served is what ServeHTTP counts of a request, as its route says:
// "ok", a problem's code, and so on (Metrics.RequestDone), and the pool
// charged.
type served struct {
	code      string
	pool      Pool
	requestID string
	started   time.Time // when ServeHTTP began
}

type servedKey struct{}

// route adapts serve, which says how its request went, to the route
// table.
func (h *Handler) route(serve func(w http.ResponseWriter, r *http.Request) (code string, pool Pool)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s := servedOf(r)
		s.code, s.pool = serve(w, r)
	}
}

// refuseMethod answers 405 for a known path asked with a method it does
// not take.
func (h *Handler) refuseMethod(allow string) func(http.ResponseWriter, *http.Request) (string, Pool) {
	return func(w http.ResponseWriter, r *http.Request) (string, Pool) {
		w.Header().Set("Allow", allow)
		return h.fail(w, r, errMethodNotAllowed), ""
	}
}

// Middleware returns next with the API in front of it: a request for
// Config.Path or one of its jobs goes to the Handler and,
// when the BlobStore serves its own links (a LinkServer), a request under
// its LinkPath goes to the BlobStore. Every other request reaches next as
// it came.
func (h *Handler) Middleware(next http.Handler) http.Handler {
	links, servesLinks := h.cfg.Blobs.(LinkServer)
	var linkPath string
	if servesLinks {
		linkPath = links.LinkPath()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case h.isRoute(r.URL.Path):
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
	load := Load{
		InFlight: int(h.inFlight.Load()), JobWaiters: int(h.jobWaiters.Load()), Queued: queued, InEngine: inEngine, QueueCapacity: h.admission.capacity(),
		MemoryInUse: h.budget.InUse(), MemoryBudget: h.budget.Total(),
		JobsQueued: -1, JobsRunning: -1,
	}
	if h.jobs == nil { // no job form: no queue to count
		return load
	}
	if jobs, ok := h.jobDepth.count(h.cfg.Jobs, h.cfg.Now()); ok {
		load.JobsQueued, load.JobsRunning, load.JobsQueuedPixels = jobs.Queued, jobs.Running, jobs.QueuedPixels
		if !jobs.OldestQueued.IsZero() {
			load.OldestQueuedJob = max(h.cfg.Now().Sub(jobs.OldestQueued), 0)
		}
	}
	return load
}

// Response is the body of a successful upscale request.
type Response struct {
	// URL is the temporary link to the enlarged image.
	URL string `json:"url"`
	// ResizedTo is the result's size when it is not the source's times
	// the scale asked for: the engine fitted it, the largest it makes with
	// the source's aspect ratio (Image.Fitted). Null otherwise.
	ResizedTo *Size `json:"resizedTo"`
	// Via names the pool that paid.
	Via Pool `json:"via"`

	linkExpires time.Time // kept with an Idempotency-Key's answer
	engine      string    // the Upscale-Engine header (Image.Engine)
	// sourceBytes and resultBytes are the source's and the result's
	// sizes, for the account's history (Call).
	sourceBytes, resultBytes int64
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
	s := &served{code: "ok", requestID: requestID(w, r), started: start}
	r = h.onRoutes(r).WithContext(context.WithValue(r.Context(), servedKey{}, s))
	defer func() { h.cfg.Metrics.RequestDone(s.code, s.pool, time.Since(start)) }()
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v) // net/http's own way to abort a response
			}
			s.code = h.fail(w, r, panicError(v))
		}
	}()
	h.routes.ServeHTTP(w, r)
}

// requestID names a request in the handler's log: the X-Request-Id a
// proxy in front gave it, or the one a middleware of the host's set on
// its answer (as examples/gorilla does), when it is a short token; else a
// new one, sent in the answer's X-Request-Id, so that a caller can quote
// it.
func requestID(w http.ResponseWriter, r *http.Request) string {
	for _, id := range []string{r.Header.Get("X-Request-Id"), w.Header().Get("X-Request-Id")} {
		if isRequestID(id) {
			return id
		}
	}
	id := strings.ToLower(rand.Text()[:16])
	w.Header().Set("X-Request-Id", id)
	return id
}

// isRequestID reports whether id is 1 to 128 letters, digits and . _ : -,
// as request IDs are; anything else a caller sent is not logged.
func isRequestID(id string) bool {
	return len(id) > 0 && len(id) <= 128 && strings.IndexFunc(id, func(c rune) bool {
		return !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.ContainsRune("._:-", c))
	}) < 0
}

// servedOf is what ServeHTTP counts of r.
func servedOf(r *http.Request) *served {
	return r.Context().Value(servedKey{}).(*served)
}

// servePost answers POST Config.Path: a job's submission when the caller
// prefers respond-async and the job form is on, else the request run as
// it is sent.
func (h *Handler) servePost(w http.ResponseWriter, r *http.Request) (code string, pool Pool) {
	if prefer := preferences(r.Header); prefer.async && h.jobs != nil {
		return h.serveSubmit(w, r, prefer)
	}
	start := time.Now()
	var caller caller
	resp, replay, err := h.upscale(w, r, &caller)
	if caller.accountID != "" {
		// After upscale has given its admission place back: the balance
		// is read on nobody's place.
		h.setQuotaHeaders(answerContext(r, err), w.Header(), caller, err)
	}
	if replay == nil {
		h.recordRequest(r, caller, false, start, resp, err)
	}
	switch {
	case err != nil:
		return h.fail(w, r, err), ""
	case replay != nil:
		w.Header().Set("Idempotent-Replayed", "true")
		writeJSON(w, replay.Status, replay.Body)
		return "replayed", ""
	}
	if resp.engine != "" {
		// Not kept with an Idempotency-Key's answer: a replay says
		// what was delivered, not how.
		w.Header().Set("Upscale-Engine", resp.engine)
	}
	writeJSON(w, http.StatusOK, jsonBody(resp))
	return "ok", resp.Via
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
	if h.cfg.Capacity.IdleRelease < 0 {
		return
	}
	h.idleMu.Lock()
	defer h.idleMu.Unlock()
	if h.idleTimer == nil {
		h.idleTimer = time.AfterFunc(h.cfg.Capacity.IdleRelease, h.releaseIfIdle)
		return
	}
	h.idleTimer.Reset(h.cfg.Capacity.IdleRelease)
}

func (h *Handler) releaseIfIdle() {
	if h.inFlight.Load() != 0 {
		return // the request that ends it will start the wait again
	}
	if r, ok := h.cfg.Upscaler.(MemoryReleaser); ok {
		r.ReleaseMemory()
	}
	debug.FreeOSMemory()
}

// upscale admits, authenticates and validates one request, then runs it:
// once per Idempotency-Key when the caller sent one, in which case it may
// return the key's kept answer instead. It fills in who the caller is.
func (h *Handler) upscale(w http.ResponseWriter, r *http.Request, who *caller) (Response, *IdempotentAnswer, error) {
	req, leave, err := h.admitRequest(w, r, who, requestLane)
	defer leave()
	if err != nil {
		return Response{}, nil, err
	}
	if req.webhook != nil {
		if preferences(r.Header).async {
			return Response{}, nil, Explain(ErrInvalidWebhookURL, msgWebhookNoJobs)
		}
		return Response{}, nil, Explain(ErrInvalidWebhookURL, msgWebhookNeedsJob)
	}
	ctx := r.Context()
	onceKey, sent, err := idempotencyKey(r.Header.Values("Idempotency-Key"))
	if err != nil {
		return Response{}, nil, err
	}
	if sent {
		return h.runOnce(ctx, who.accountID, onceKey, req)
	}
	resp, err := h.run(ctx, who.accountID, req, nil)
	return resp, nil, err
}

// Size is an image's size in pixels.
type Size struct {
	Width  int `json:"width"`
	Height int `json:"height"`
}
