package upscale_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/upscaletest"
)

// TestWording: a host that sells through its own site names its own
// dashboard and offers in the sentences its callers read.
func TestWording(t *testing.T) {
	words := upscale.Wording{Dashboard: "https://pics.example/account", Upgrade: "top up at https://pics.example/buy", Paid: "a Pics Pro subscription"}
	e := newEnv(t, func(c *upscale.Config) { c.Wording = words })
	p := checkProblem(t, e.post("upk_test_unknown_0123456789", body(e.url("/small.png"))), http.StatusUnauthorized, "unauthorized")
	if !strings.Contains(p.Detail, "https://pics.example/account") {
		t.Errorf("401 detail %q does not name the host's dashboard", p.Detail)
	}
	p = checkProblem(t, e.post(keyFree, body(e.url("/small.png"), `"scale": 8`)), http.StatusForbidden, "paid_plan_required")
	if !strings.Contains(p.Detail, "a Pics Pro subscription") {
		t.Errorf("403 detail %q does not name the host's offer", p.Detail)
	}
	e.putAccount(upscale.Account{ID: "free", Plan: upscale.Plan{Name: "none", MaxFileBytes: 1 << 20}})
	p = checkProblem(t, e.post(keyFree, body(e.url("/small.png"))), http.StatusTooManyRequests, "quota_exhausted")
	if !strings.Contains(p.Detail, "top up at https://pics.example/buy") || strings.Contains(p.Detail, "{") {
		t.Errorf("429 detail %q does not name the host's offer", p.Detail)
	}
}

// TestFailureLogLevels: a failure is logged at ERROR only when the server
// itself is at fault, so that nobody with a key can fill an operator's
// error alerts: what the caller or its source caused is INFO, a 504 is
// WARN. Each line names the request by the X-Request-Id a proxy gave it,
// or by one the handler makes and answers with.
func TestFailureLogLevels(t *testing.T) {
	for _, tc := range []struct {
		name      string
		config    func(*upscale.Config)
		key, path string
		code      string
		level     slog.Level
	}{
		{"UnknownKey", nil, "upk_test_unknown_0123456789", "/small.png", "unauthorized", slog.LevelInfo},
		{"NotAnImage", nil, keyFree, "/text", "unsupported_image", slog.LevelInfo},
		{"SourceServerFailing", nil, keyFree, "/unavailable.png", "source_unavailable", slog.LevelInfo},
		{"EngineTimeout", func(c *upscale.Config) {
			c.Upscaler = failingUpscaler{delay: 300 * time.Millisecond}
			c.EngineTimeout = 50 * time.Millisecond
		}, keyFree, "/small.png", "upstream_timeout", slog.LevelWarn},
		{"EngineFailed", func(c *upscale.Config) {
			c.Upscaler = failingUpscaler{err: fmt.Errorf("%w: model crashed", upscale.ErrUpstream)}
		}, keyFree, "/small.png", "upstream_error", slog.LevelError},
		{"StorageFailed", func(c *upscale.Config) { c.Blobs = failingBlobs{} }, keyFree, "/small.png", "internal_error", slog.LevelError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log bytes.Buffer
			e := newEnv(t, func(c *upscale.Config) {
				c.Logger = slog.New(slog.NewJSONHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))
				if tc.config != nil {
					tc.config(c)
				}
			})
			w := e.post(tc.key, body(e.url(tc.path)))
			id := w.Header().Get("X-Request-Id")
			line := failureLine(t, &log)
			if line.Code != tc.code || line.Level != tc.level.String() || id == "" || line.RequestID != id {
				t.Errorf("logged %+v, answered X-Request-Id %q; want %s at %v, with the answer's ID", line, id, tc.code, tc.level)
			}
		})
	}
	// A proxy's ID names the line; one that is no token is not logged.
	var log bytes.Buffer
	e := newEnv(t, func(c *upscale.Config) { c.Logger = slog.New(slog.NewJSONHandler(&log, nil)) })
	for _, tc := range []struct{ sent, logged string }{{"lb-7f3a:9", "lb-7f3a:9"}, {"a b\n{\"level\":\"ERROR\"}", ""}} {
		r := httptest.NewRequest("POST", "/api/v1/upscale", strings.NewReader(body(e.url("/text"))))
		r.Header.Set("Authorization", "Bearer "+keyFree)
		r.Header.Set("X-Request-Id", tc.sent)
		w := e.serve(r)
		line := failureLine(t, &log)
		switch {
		case tc.logged != "" && (line.RequestID != tc.logged || w.Header().Get("X-Request-Id") != ""):
			t.Errorf("sent X-Request-Id %q: logged %q, answered %q; want it logged and not answered again", tc.sent, line.RequestID, w.Header().Get("X-Request-Id"))
		case tc.logged == "" && (line.RequestID == tc.sent || line.RequestID != w.Header().Get("X-Request-Id")):
			t.Errorf("sent X-Request-Id %q: logged %q, answered %q; want a new one, logged and answered", tc.sent, line.RequestID, w.Header().Get("X-Request-Id"))
		}
	}
}

// failureLine is the one "request failed" line in log, which it empties.
func failureLine(t *testing.T, log *bytes.Buffer) (line struct {
	Level     string `json:"level"`
	Code      string `json:"code"`
	RequestID string `json:"request_id"`
}) {
	t.Helper()
	found := 0
	for text := range strings.Lines(log.String()) {
		if !strings.Contains(text, `"msg":"upscale: request failed"`) {
			continue
		}
		found++
		if err := json.Unmarshal([]byte(text), &line); err != nil {
			t.Fatal(err)
		}
	}
	log.Reset()
	if found != 1 {
		t.Fatalf("%d lines say the request failed, want 1", found)
	}
	return line
}

// TestBuyURL: a host that sells gives callers who ran out, or who need
// paid capability, the place to buy: the problem's buyUrl and a Link
// header, rel="payment". Other problems carry neither, nor does a host
// that does not sell.
func TestBuyURL(t *testing.T) {
	const buy = "https://pics.example/dashboard/billing"
	e := newEnv(t, func(c *upscale.Config) { c.Wording.BuyURL = buy })
	paid := e.post(keyFree, body(e.url("/small.png"), `"scale": 8`))
	p := checkProblem(t, paid, http.StatusForbidden, "paid_plan_required")
	if p.BuyURL != buy || paid.Header().Get("Link") != "<"+buy+`>; rel="payment"` {
		t.Errorf("403: buyUrl %q, Link %q; want the Billing page", p.BuyURL, paid.Header().Get("Link"))
	}
	e.putAccount(upscale.Account{ID: "free", Plan: upscale.Plan{Name: "none", MaxFileBytes: 1 << 20}})
	out := e.post(keyFree, body(e.url("/small.png")))
	if p := checkProblem(t, out, http.StatusTooManyRequests, "quota_exhausted"); p.BuyURL != buy || out.Header().Get("Link") == "" {
		t.Errorf("429: buyUrl %q, Link %q; want the Billing page", p.BuyURL, out.Header().Get("Link"))
	}
	other := e.post(keyFree, body(e.url("/small.png"), `"scale": 3`))
	if p := checkProblem(t, other, http.StatusBadRequest, "invalid_scale"); p.BuyURL != "" || other.Header().Get("Link") != "" {
		t.Errorf("400: buyUrl %q, Link %q; want neither", p.BuyURL, other.Header().Get("Link"))
	}
	plain := newEnv(t)
	plain.putAccount(upscale.Account{ID: "free", Plan: upscale.Plan{Name: "none", MaxFileBytes: 1 << 20}})
	if w := plain.post(keyFree, body(plain.url("/small.png"))); strings.Contains(w.Body.String(), "buyUrl") || w.Header().Get("Link") != "" {
		t.Errorf("a host that does not sell: %s, Link %q", w.Body, w.Header().Get("Link"))
	}
	for _, bad := range []string{"/dashboard/billing", "https://x.test/a b", "javascript:alert(1)", `https://x.test/>; rel="next"`} {
		cfg := upscale.Config{Keys: upscale.NewMemoryKeyStore(), Ledger: upscale.NewMemoryLedger(upscale.LedgerOptions{}), Upscaler: upscaletest.PixelUpscaler{},
			Blobs: newMemoryBlobs(t, upscale.MemoryBlobStoreOptions{}), Wording: upscale.Wording{BuyURL: bad}}
		if _, err := upscale.New(cfg); err == nil {
			t.Errorf("New with BuyURL %q: no error", bad)
		}
	}
}

func TestMegabytes(t *testing.T) {
	for n, want := range map[int64]string{25 << 20: "25 MB", 3 << 19: "1.5 MB", 800 << 10: "800 KB", 100 << 20: "100 MB", 1<<20 + 1: "1 MB", 30_000_000: "28.6 MB", 1<<20 - 1: "1 MB", 1<<20 - 513: "1023 KB"} {
		if got := upscale.Megabytes(n); got != want {
			t.Errorf("Megabytes(%d) = %q, want %q", n, got, want)
		}
	}
}
