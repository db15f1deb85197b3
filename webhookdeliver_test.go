package upscale_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/upscaletest"
)

// receiver is a webhook receiver that records every POST, and answers each
// the status its answer function gives (200 when nil).
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	posts  []receivedPost
	answer func(n int) int // the status for the nth POST, from 1
}

type receivedPost struct {
	header http.Header
	body   []byte
}

func newReceiver(t *testing.T, answer func(n int) int) *receiver {
	rc := &receiver{answer: answer}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.posts = append(rc.posts, receivedPost{r.Header.Clone(), body})
		n := len(rc.posts)
		rc.mu.Unlock()
		status := http.StatusOK
		if rc.answer != nil {
			status = rc.answer(n)
		}
		if status == http.StatusFound {
			http.Redirect(w, r, "/elsewhere", status)
			return
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(rc.Close)
	return rc
}

// count is how many POSTs the receiver has had.
func (rc *receiver) count() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.posts)
}

// received waits until the receiver has n POSTs, then a while longer, and
// returns them all.
func (rc *receiver) received(t *testing.T, n int) []receivedPost {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		rc.mu.Lock()
		got := len(rc.posts)
		rc.mu.Unlock()
		if got >= n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the receiver has %d POSTs after 10 s, want %d", got, n)
		}
	}
	time.Sleep(10 * webhookBackoff) // time for any attempt too many
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]receivedPost(nil), rc.posts...)
}

// webhookBackoff is the wait between attempts in these tests.
const webhookBackoff = 20 * time.Millisecond

// webhookEnv is an env whose Fetch policy is the strict default, with the
// receiver's host and port allowed, sources read from BuiltinSources, and
// the "free" account's webhook secret made; it returns the secret.
func webhookEnv(t *testing.T, rc *receiver, configure ...func(*upscale.Config)) (*env, string) {
	t.Helper()
	u, _ := url.Parse(rc.URL)
	port, _ := strconv.Atoi(u.Port())
	secrets := upscale.NewMemoryWebhookSecrets(upscale.MemoryWebhookSecretsOptions{})
	e := newEnv(t, append([]func(*upscale.Config){func(c *upscale.Config) {
		c.Fetch = upscale.FetchPolicy{
			AllowedHosts: []string{u.Hostname()}, AllowedPorts: []uint16{80, 443, uint16(port)},
			BuiltinSources: map[string][]byte{"https://images.test/small.png": smallPNG},
		}
		c.WebhookSecrets = secrets
		c.Webhooks = upscale.NewMemoryWebhookQueue(upscale.MemoryWebhookQueueOptions{
			Now: c.Now, Backoff: func(int) time.Duration { return webhookBackoff },
		})
	}}, configure...)...)
	secret, err := secrets.RotateWebhookSecret(context.Background(), "free")
	if err != nil {
		t.Fatal(err)
	}
	return e, secret
}

// submitWithWebhook submits a job of the builtin source with webhookUrl.
func (e *env) submitWithWebhook(webhookURL string) *httptest.ResponseRecorder {
	return e.sendJob("POST", "/api/v1/upscale", keyFree, "respond-async",
		body("https://images.test/small.png", `"webhookUrl": "`+webhookURL+`"`))
}

// checkSignature checks a POST's Standard Webhooks headers against secret,
// computing the HMAC here rather than with upscale.SignWebhook.
func checkSignature(t *testing.T, p receivedPost, secret string) {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		t.Fatal(err)
	}
	id, timestamp := p.header.Get("webhook-id"), p.header.Get("webhook-timestamp")
	if _, err := strconv.ParseInt(timestamp, 10, 64); err != nil || id == "" {
		t.Fatalf("webhook-id %q, webhook-timestamp %q: want an ID and Unix seconds", id, timestamp)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + timestamp + "." + string(p.body)))
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, sig := range strings.Fields(p.header.Get("webhook-signature")) {
		if hmac.Equal([]byte(sig), []byte(want)) {
			return
		}
	}
	t.Errorf("webhook-signature %q has no signature %s", p.header.Get("webhook-signature"), want)
}

// event decodes a POST's body.
func event(t *testing.T, p receivedPost) (typ string, job upscale.Job) {
	t.Helper()
	var e struct {
		Type      string      `json:"type"`
		Timestamp time.Time   `json:"timestamp"`
		Data      upscale.Job `json:"data"`
	}
	if err := json.Unmarshal(p.body, &e); err != nil || e.Timestamp.IsZero() {
		t.Fatalf("webhook body %s: %v", p.body, err)
	}
	return e.Type, e.Data
}

// TestWebhookPerJob: each job that ends is posted once to its webhookUrl,
// signed with the account's secret, with its ID as the webhook-id.
func TestWebhookPerJob(t *testing.T) {
	rc := newReceiver(t, nil)
	e, secret := webhookEnv(t, rc)
	var locations []string
	for range 3 {
		w := e.submitWithWebhook(rc.URL + "/hooks")
		if w.Code != http.StatusAccepted {
			t.Fatalf("submission: %d %s", w.Code, w.Body)
		}
		locations = append(locations, w.Header().Get("Location"))
	}
	posts := rc.received(t, 3)
	if len(posts) != 3 {
		t.Fatalf("%d POSTs for 3 jobs, want 3", len(posts))
	}
	ids := map[string]bool{}
	for _, p := range posts {
		checkSignature(t, p, secret)
		typ, job := event(t, p)
		if typ != "upscale.job.succeeded" || job.Status != upscale.JobSucceeded || job.Result == nil || job.Result.Via != upscale.PoolFree ||
			p.header.Get("webhook-id") != "msg_"+job.ID || job.Webhook != rc.URL+"/hooks" {
			t.Errorf("webhook %s %s: want upscale.job.succeeded with the result, its webhook-id msg_ and the job's ID", p.header.Get("webhook-id"), p.body)
		}
		ids[job.ID] = true
	}
	for _, l := range locations {
		if !ids[strings.TrimPrefix(l, "/api/v1/upscale/jobs/")] {
			t.Errorf("no webhook for %s", l)
		}
	}
}

// TestWebhookRetried: a receiver that answers 500 twice, or redirects, gets
// the event again, with the same webhook-id, until it answers 2xx, and
// never after.
func TestWebhookRetried(t *testing.T) {
	for name, answer := range map[string]func(int) int{
		"500Twice":     func(n int) int { return map[bool]int{true: 500, false: 204}[n <= 2] },
		"RedirectOnce": func(n int) int { return map[bool]int{true: http.StatusFound, false: 200}[n <= 1] },
	} {
		t.Run(name, func(t *testing.T) {
			rc := newReceiver(t, answer)
			e, secret := webhookEnv(t, rc)
			if w := e.submitWithWebhook(rc.URL + "/hooks"); w.Code != http.StatusAccepted {
				t.Fatalf("submission: %d %s", w.Code, w.Body)
			}
			want := 3
			if name == "RedirectOnce" {
				want = 2
			}
			posts := rc.received(t, want)
			if len(posts) != want {
				t.Fatalf("%d attempts, want %d: none after the 2xx", len(posts), want)
			}
			for _, p := range posts {
				checkSignature(t, p, secret)
				if p.header.Get("webhook-id") != posts[0].header.Get("webhook-id") || string(p.body) != string(posts[0].body) {
					t.Errorf("attempts differ: %s %s and %s %s", p.header.Get("webhook-id"), p.body, posts[0].header.Get("webhook-id"), posts[0].body)
				}
			}
		})
	}
}

// TestWebhookOfFailedAndCanceledJobs: a job that fails, and one canceled
// while queued, are posted too.
func TestWebhookOfFailedAndCanceledJobs(t *testing.T) {
	rc := newReceiver(t, nil)
	failing, _ := webhookEnv(t, rc, func(c *upscale.Config) { c.Upscaler = failingUpscaler{err: upscale.ErrUpstream} })
	failing.submitWithWebhook(rc.URL + "/failed")
	posts := rc.received(t, 1)
	if typ, job := event(t, posts[0]); typ != "upscale.job.failed" || job.Problem == nil || job.Problem.Code != "upstream_error" {
		t.Errorf("webhook %s, want upscale.job.failed with upstream_error", posts[0].body)
	}

	// One job holds the one worker in the engine; the next waits queued.
	u := upscaletest.GatedUpscaler{Entered: make(chan struct{}, 2), Gate: make(chan struct{})}
	busy, _ := webhookEnv(t, rc, func(c *upscale.Config) {
		c.Upscaler = u
		c.JobWorkers, c.Capacity.EngineConcurrency = 1, 1
	})
	running := busy.submitWithWebhook(rc.URL + "/running").Header().Get("Location")
	<-u.Entered
	queued := busy.submitWithWebhook(rc.URL + "/queued").Header().Get("Location")
	for _, location := range []string{queued, running} {
		if w := busy.sendJob("DELETE", location, keyFree, "", ""); w.Code != http.StatusOK {
			t.Fatalf("DELETE: %d %s", w.Code, w.Body)
		}
	}
	posts = rc.received(t, 3)
	if len(posts) != 3 {
		t.Fatalf("%d POSTs, want 3: one per job", len(posts))
	}
	for _, p := range posts[1:] {
		if typ, job := event(t, p); typ != "upscale.job.canceled" || job.Status != upscale.JobCanceled || job.Result != nil {
			t.Errorf("webhook %s, want upscale.job.canceled", p.body)
		}
	}
}

// TestWebhookRefusedAtSubmission: a webhookUrl the service would not call,
// one sent without respond-async, and one from an account without a
// secret are refused before anything is reserved or queued.
func TestWebhookRefusedAtSubmission(t *testing.T) {
	rc := newReceiver(t, nil)
	e, _ := webhookEnv(t, rc)
	before := e.balance("free")
	u, _ := url.Parse(rc.URL)
	for _, hook := range []string{
		"http://10.0.0.1/hooks",                   // private
		"http://169.254.169.254/latest",           // metadata
		"http://localhost:" + u.Port() + "/hooks", // loopback, by a name not allowed
		"http://" + u.Hostname() + ":8081/hooks",  // a port not allowed
		"ftp://example.com/hooks",
		"https://user:pass@example.com/hooks",
		"not a url",
	} {
		checkProblem(t, e.submitWithWebhook(hook), http.StatusBadRequest, "invalid_webhook_url")
	}
	checkProblem(t, e.post(keyFree, body("https://images.test/small.png", `"webhookUrl": "`+rc.URL+`"`)), http.StatusBadRequest, "invalid_webhook_url")
	if after := e.balance("free"); after != before {
		t.Errorf("balance %+v after refusals, want %+v", after, before)
	}
	if n := e.blobs.Len(); n != 0 {
		t.Errorf("%d items stored after refusals, want none", n)
	}
}

// TestFirstWebhookMakesASecret: an account without a signing secret may
// send its first webhookUrl: the submission makes the account's secret,
// which signs the webhook, and which a rotation (the dashboard's "make a
// new secret") keeps signing beside the new one.
func TestFirstWebhookMakesASecret(t *testing.T) {
	rc := newReceiver(t, nil)
	secrets := upscale.NewMemoryWebhookSecrets(upscale.MemoryWebhookSecretsOptions{})
	fresh, _ := webhookEnv(t, rc, func(c *upscale.Config) { c.WebhookSecrets = secrets }) // its secret made elsewhere
	if w := fresh.submitWithWebhook(rc.URL + "/hooks"); w.Code != http.StatusAccepted {
		t.Fatalf("the first webhookUrl of an account without a secret: %d %s, want 202", w.Code, w.Body)
	}
	made, err := secrets.WebhookSecrets(context.Background(), "free")
	if err != nil || len(made) != 1 {
		t.Fatalf("the account's secrets after its first webhookUrl: %v, %v; want the one it made", made, err)
	}
	checkSignature(t, rc.received(t, 1)[0], made[0])
	if w := fresh.submitWithWebhook(rc.URL + "/hooks"); w.Code != http.StatusAccepted {
		t.Fatalf("a second webhookUrl: %d %s", w.Code, w.Body)
	}
	if again, _ := secrets.WebhookSecrets(context.Background(), "free"); len(again) != 1 || again[0] != made[0] {
		t.Errorf("secrets after a second webhookUrl %v, want the first one alone", again)
	}
}

// TestWebhookLogged: each attempt of a job's webhook is counted in the
// account's WebhookLog with its outcome, the last delivering it.
func TestWebhookLogged(t *testing.T) {
	rc := newReceiver(t, func(n int) int { return map[bool]int{true: 500, false: 204}[n <= 2] })
	var log *upscale.MemoryWebhookLog
	e, _ := webhookEnv(t, rc, func(c *upscale.Config) {
		log = upscale.NewMemoryWebhookLog(upscale.MemoryWebhookLogOptions{Now: c.Now})
		c.WebhookLog = log
	})
	if w := e.submitWithWebhook(rc.URL + "/hooks"); w.Code != http.StatusAccepted {
		t.Fatalf("submission: %d %s", w.Code, w.Body)
	}
	posts := rc.received(t, 3)
	got, err := log.Deliveries(context.Background(), "free", 0)
	if err != nil || len(got) != 1 {
		t.Fatalf("the log: %+v, %v; want the job's webhook", got, err)
	}
	if d := got[0]; d.ID != posts[0].header.Get("webhook-id") || d.Event != "upscale.job.succeeded" || d.URL != rc.URL+"/hooks" ||
		d.Attempts != 3 || d.LastStatus != 204 || !d.Delivered || d.LastError != "" {
		t.Errorf("the job's webhook in the log: %+v; want 3 attempts, the last answered 204", d)
	}
}

// TestSendTestWebhook: a test event is posted once, signed with the
// account's secret, and logged; a receiver that fails makes a delivery
// not delivered, and an address the policy refuses is
// invalid_webhook_url, posting nothing.
func TestSendTestWebhook(t *testing.T) {
	rc := newReceiver(t, func(n int) int { return map[bool]int{true: 200, false: 503}[n == 1] })
	var log *upscale.MemoryWebhookLog
	e, secret := webhookEnv(t, rc, func(c *upscale.Config) {
		log = upscale.NewMemoryWebhookLog(upscale.MemoryWebhookLogOptions{Now: c.Now})
		c.WebhookLog = log
	})
	ctx := context.Background()
	d, err := e.handler.SendTestWebhook(ctx, "free", rc.URL+"/hooks")
	if err != nil || !d.Delivered || d.LastStatus != 200 || d.Event != "upscale.test" || d.Attempts != 1 {
		t.Fatalf("SendTestWebhook = %+v, %v; want delivered, 200", d, err)
	}
	post := rc.received(t, 1)[0]
	checkSignature(t, post, secret)
	if typ, _ := event(t, post); typ != "upscale.test" {
		t.Errorf("the test event's type %q", typ)
	}
	if d, err := e.handler.SendTestWebhook(ctx, "free", rc.URL+"/hooks"); err != nil || d.Delivered || d.LastStatus != 503 || !strings.Contains(d.LastError, "503") {
		t.Errorf("a receiver that answers 503: %+v, %v; want not delivered, saying 503", d, err)
	}
	gone := newReceiver(t, nil)
	gone.Close() // nothing listens there now
	e2, _ := webhookEnv(t, gone)
	if d, err := e2.handler.SendTestWebhook(ctx, "free", gone.URL+"/hooks"); err != nil || d.Delivered || d.LastStatus != 0 || d.LastError != "the receiver could not be reached" {
		t.Errorf("a receiver that is not there: %+v, %v; want the failure in words safe to show, not the transport's", d, err)
	}
	for _, bad := range []string{"ftp://hooks.example/x", "not a url", "http://127.0.0.1:1/hooks"} {
		if _, err := e.handler.SendTestWebhook(ctx, "free", bad); !errors.Is(err, upscale.ErrInvalidWebhookURL) {
			t.Errorf("SendTestWebhook(%q): %v, want ErrInvalidWebhookURL", bad, err)
		}
	}
	if got, _ := log.Deliveries(ctx, "free", 0); len(got) != 2 || rc.count() != 2 {
		t.Errorf("logged %d test events, %d posted; want the 2 sent", len(got), rc.count())
	}
}
