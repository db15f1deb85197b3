package upscale_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/api"
	"github.com/upscalekit/upscale/upscaletest"
)

// loadContract loads api/openapi.yaml and validates it, once.
var loadContract = sync.OnceValues(func() (*openapi3.T, error) {
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
	if err != nil {
		return nil, err
	}
	return doc, doc.Validate(context.Background())
})

// contract is api/openapi.yaml, loaded and validated.
func contract(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := loadContract()
	if err != nil {
		t.Fatalf("api/openapi.yaml: %v", err)
	}
	return doc
}

// checkAnswer validates an answer of the handler against the contract.
// Every method but POST gets the answer the document gives for GET.
func checkAnswer(t *testing.T, r *http.Request, w *httptest.ResponseRecorder) {
	t.Helper()
	if errors.Is(r.Context().Err(), context.Canceled) {
		return // the caller went away: there is no answer
	}
	route, params := routeOf(contract(t), r)
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: r, Route: route, PathParams: params},
		Status:                 w.Code,
		Header:                 w.Header(),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true},
	}
	out.SetBodyBytes(bytes.Clone(w.Body.Bytes()))
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		t.Errorf("answer %d %s does not match api/openapi.yaml: %v", w.Code, w.Body, err)
	}
}

// routeOf is the document's operation for r: the job resource's for a
// path of a job, the upscale endpoint's otherwise; a method the document
// has no operation for gets the one that answers 405 (GET's on the
// endpoint, PUT's on a job).
func routeOf(doc *openapi3.T, r *http.Request) (*routers.Route, map[string]string) {
	path, params, wrong := "/api/v1/upscale", map[string]string{}, http.MethodGet
	if id, ok := strings.CutPrefix(r.URL.Path, "/api/v1/upscale/jobs/"); ok {
		path, params["id"], wrong = "/api/v1/upscale/jobs/{id}", id, http.MethodPut
	}
	item := doc.Paths.Find(path)
	op := item.GetOperation(r.Method)
	if op == nil {
		op = item.GetOperation(wrong)
	}
	return &routers.Route{Spec: doc, Path: path, PathItem: item, Method: r.Method, Operation: op}, params
}

// documentedCodes are the problem codes the document lists.
func documentedCodes(doc *openapi3.T) []string {
	var codes []string
	for _, v := range doc.Components.Schemas["Problem"].Value.Properties["code"].Value.Enum {
		codes = append(codes, v.(string))
	}
	return codes
}

// exchange is one request to the handler and its answer.
type exchange struct {
	request  *http.Request
	body     string
	response *httptest.ResponseRecorder
}

func send(h http.Handler, method, key, idempotencyKey, body string) exchange {
	return sendTo(h, method, "/api/v1/upscale", key, http.Header{"Idempotency-Key": {idempotencyKey}}, body)
}

// sendTo sends a request to path with key and the non-empty headers of
// header, a JSON body unless header has a Content-Type.
func sendTo(h http.Handler, method, path, key string, header http.Header, body string) exchange {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	if key != "" {
		r.Header.Set("Authorization", "Bearer "+key)
	}
	for name, values := range header {
		for i, v := range slices.DeleteFunc(slices.Clone(values), func(v string) bool { return v == "" }) {
			if i == 0 {
				r.Header.Del(name)
			}
			r.Header.Add(name, v)
		}
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return exchange{r, body, w}
}

// sendForm posts parts as an upload's multipart/form-data body with key
// and the non-empty headers of header.
func sendForm(t *testing.T, h http.Handler, key string, header http.Header, parts ...part) exchange {
	t.Helper()
	body, contentType := form(t, parts...)
	header = header.Clone()
	if header == nil {
		header = http.Header{}
	}
	header.Set("Content-Type", contentType)
	return sendTo(h, "POST", "/api/v1/upscale", key, header, string(body))
}

// TestAnswersMatchTheContract sends the handler a request for every answer
// it can give, each problem code included, and validates every answer
// (status, headers, body) against api/openapi.yaml, and every valid
// request too. The document must list exactly the codes the handler
// produces.
func TestAnswersMatchTheContract(t *testing.T) {
	doc := contract(t)
	var exchanges []exchange
	valid := map[*http.Request]bool{}
	record := func(x exchange, validRequest bool) {
		exchanges = append(exchanges, x)
		valid[x.request] = validRequest
	}

	e := newEnv(t)
	small := body(e.url("/small.png"))
	ok := send(e.handler, "POST", keyFree, "", small)
	record(ok, true)
	record(send(e.handler, "POST", keyFree, `"k1"`, small), true)
	record(send(e.handler, "POST", keyFree, `"k1"`, small), true) // replayed
	record(send(e.handler, "POST", keyFree, `"k1"`, body(e.url("/small.png"), `"scale": 4`)), true)
	record(send(e.handler, "GET", keyFree, "", ""), true)
	record(send(e.handler, "POST", "upk_test_unknown_0123456789", "", small), true)
	for _, b := range []string{"not json", `{}`, body(e.url("/small.png"), `"scale": 3`), body(e.url("/small.png"), `"imageType": "cartoon"`), body(e.url("/small.png"), `"denoise": "all"`)} {
		record(send(e.handler, "POST", keyFree, "", b), false)
	}
	for _, path := range []string{"/missing.png", "/unavailable.png", "/text"} {
		record(send(e.handler, "POST", keyFree, "", body(e.url(path))), true)
	}
	record(send(e.handler, "POST", keyFree, "", body(e.url("/small.png"), `"scale": 8`)), true)
	e.clock.Advance(2 * time.Hour)
	record(send(e.handler, "POST", keyFree, `"k1"`, small), true) // its link has expired

	tiny := newEnv(t)
	tiny.putAccount(upscale.Account{ID: "free", Plan: tinyPlan})
	record(send(tiny.handler, "POST", keyFree, "", body(tiny.url("/big.png"))), true)
	tiny.putAccount(upscale.Account{ID: "free", Plan: upscale.Plan{Name: "none left", MaxFileBytes: 1 << 20}})
	record(send(tiny.handler, "POST", keyFree, "", body(tiny.url("/small.png"))), true)

	limited := newEnv(t, func(c *upscale.Config) {
		c.RateLimiter = upscale.NewMemoryRateLimiter(upscale.MemoryRateLimiterOptions{PerSecond: 1, Burst: 1, Now: c.Now})
	})
	record(send(limited.handler, "POST", keyFree, "", body(limited.url("/small.png"))), true)
	record(send(limited.handler, "POST", keyFree, "", body(limited.url("/small.png"))), true)

	strict := newEnv(t, func(c *upscale.Config) { c.Fetch.AllowPrivateNetworks = false })
	record(send(strict.handler, "POST", keyFree, "", body(strict.url("/small.png"))), true)

	for _, c := range []func(*upscale.Config){
		func(c *upscale.Config) { c.Upscaler = failingUpscaler{err: upscale.ErrUpstream} },
		func(c *upscale.Config) {
			c.Upscaler = failingUpscaler{delay: 300 * time.Millisecond}
			c.EngineTimeout = 50 * time.Millisecond
		},
		func(c *upscale.Config) { c.Blobs = timingOutBlobs{} },
		func(c *upscale.Config) { c.Blobs = failingBlobs{} },
	} {
		failing := newEnv(t, c)
		record(send(failing.handler, "POST", keyFree, "", body(failing.url("/small.png"))), true)
	}
	down, keys, _, _ := newFlakyEnv(t)
	keys.down.Store(true)
	record(send(down.handler, "POST", keyFree, "", body(down.url("/small.png"))), true)

	// One request in the engine, with a key: the same key again is in
	// flight; one more request fills the queue, and the next is refused.
	u := upscaletest.GatedUpscaler{Entered: make(chan struct{}, 3), Gate: make(chan struct{})}
	busy := newEnv(t, func(c *upscale.Config) {
		c.Upscaler = u
		c.Capacity.EngineConcurrency = 1
		c.Capacity.QueueLength = 1
	})
	running := make(chan exchange, 2)
	go func() { running <- send(busy.handler, "POST", keyFree, `"slow"`, body(busy.url("/small.png"))) }()
	<-u.Entered
	record(send(busy.handler, "POST", keyFree, `"slow"`, body(busy.url("/small.png"))), true)
	go func() { running <- send(busy.handler, "POST", keyPro, "", body(busy.url("/small.png"))) }()
	for busy.hits.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	record(send(busy.handler, "POST", keyPro, "", body(busy.url("/small.png"))), true)
	close(u.Gate)
	record(<-running, true)
	record(<-running, true)

	// The job form: a job accepted, its resource, one answered inline,
	// one canceled, and the refusals of the job's resource.
	secrets := upscale.NewMemoryWebhookSecrets(upscale.MemoryWebhookSecretsOptions{})
	jobs := newEnv(t, func(c *upscale.Config) { c.WebhookSecrets = secrets })
	if _, err := secrets.RotateWebhookSecret(context.Background(), "free"); err != nil {
		t.Fatal(err)
	}
	async := http.Header{"Prefer": {"respond-async"}}
	accepted := sendTo(jobs.handler, "POST", "/api/v1/upscale", keyFree, async, body(jobs.url("/small.png"), `"webhookUrl": "`+jobs.url("/hooks")+`"`))
	record(accepted, true)
	record(sendTo(jobs.handler, "POST", "/api/v1/upscale", keyFree, nil, body(jobs.url("/small.png"), `"webhookUrl": "`+jobs.url("/hooks")+`"`)), true)
	location := accepted.response.Header().Get("Location")
	record(sendTo(jobs.handler, "GET", location, keyFree, nil, ""), true)
	record(sendTo(jobs.handler, "POST", "/api/v1/upscale", keyFree, http.Header{"Prefer": {"respond-async, wait=5"}}, body(jobs.url("/small.png"))), true)
	record(sendTo(jobs.handler, "DELETE", location, keyFree, nil, ""), true)
	record(sendTo(jobs.handler, "GET", "/api/v1/upscale/jobs/job_unknown", keyFree, nil, ""), true)
	record(sendTo(jobs.handler, "GET", location, "", nil, ""), true)
	record(sendTo(jobs.handler, "PUT", location, keyFree, nil, ""), true)

	// The upload form: a file, its replay and its key with other bytes,
	// an address in a text part, a job, a file past the free tier and one
	// past the plan, and forms the document refuses as the handler does.
	uploads := newEnv(t)
	png, scale := fileField(smallPNG), func(s string) part { return part{name: "scale", value: s} }
	record(sendForm(t, uploads.handler, keyPro, nil, png, scale("2")), true)
	keyed := http.Header{"Idempotency-Key": {`"u1"`}}
	record(sendForm(t, uploads.handler, keyPro, keyed, scale("4"), png), true)
	record(sendForm(t, uploads.handler, keyPro, keyed, scale("4"), png), true) // replayed
	record(sendForm(t, uploads.handler, keyPro, keyed, scale("4"), fileField(padded(t, smallPNG, len(smallPNG)+1))), true)
	record(sendForm(t, uploads.handler, keyPro, nil, part{name: "imageUrl", value: uploads.url("/small.png")}, part{name: "imageType", value: "anime"}), true)
	record(sendForm(t, uploads.handler, keyFree, http.Header{"Prefer": {"respond-async"}}, png, part{name: "format", value: "webp"}, part{name: "quality", value: "85"}), true)
	record(sendForm(t, uploads.handler, keyFree, nil, fileField(bigPNG)), true)
	for _, parts := range [][]part{
		{scale("2")}, {png, part{name: "imageUrl", value: uploads.url("/small.png")}},
		{png, part{name: "colour", value: "red"}}, {png, scale("3")},
	} {
		record(sendForm(t, uploads.handler, keyFree, nil, parts...), false)
	}
	tiny.putAccount(upscale.Account{ID: "free", Plan: tinyPlan})
	record(sendForm(t, tiny.handler, keyFree, nil, fileField(bigPNG)), true)

	seen := map[string]bool{}
	for _, x := range exchanges {
		checkAgainstContract(t, doc, x, valid[x.request])
		if p, err := problemCode(x.response); err == nil {
			seen[p] = true
		}
	}
	for _, code := range documentedCodes(doc) {
		if !seen[code] {
			t.Errorf("no answer of this test had the documented code %s", code)
		}
	}
}

func problemCode(w *httptest.ResponseRecorder) (string, error) {
	if w.Code < 400 {
		return "", io.EOF
	}
	var p upscale.Problem
	err := json.Unmarshal(w.Body.Bytes(), &p)
	return p.Code, err
}

// checkAgainstContract validates one exchange: the answer always, the
// request when it is a valid one; an invalid one the document must refuse
// too.
func checkAgainstContract(t *testing.T, doc *openapi3.T, x exchange, validRequest bool) {
	t.Helper()
	route, params := routeOf(doc, x.request)
	if route.Operation == nil {
		t.Errorf("%s %s is not in the document", x.request.Method, x.request.URL.Path)
		return
	}
	x.request.Body = io.NopCloser(strings.NewReader(x.body))
	in := &openapi3filter.RequestValidationInput{
		Request: x.request, Route: route, PathParams: params,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
	}
	switch {
	case validRequest && route.Method != http.MethodPut && (x.request.Method != http.MethodGet || route.Path != "/api/v1/upscale"):
		if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
			t.Errorf("request %.300q: %v", x.body, err)
		}
	case !validRequest:
		if openapi3filter.ValidateRequest(context.Background(), in) == nil {
			t.Errorf("request %.300q is refused, but the document allows it", x.body)
		}
	}
	checkAnswer(t, x.request, x.response)
}

// TestContractListsTheProblemCodes: the document lists every code the
// handler's problem table can produce, and no other.
func TestContractListsTheProblemCodes(t *testing.T) {
	documented := documentedCodes(contract(t))
	produced := upscale.ProblemCodes()
	slices.Sort(documented)
	slices.Sort(produced)
	if !slices.Equal(documented, produced) {
		t.Errorf("the document lists %v,\nthe handler produces %v", documented, produced)
	}
}
