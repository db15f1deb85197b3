package upscale_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/upscalekit/upscale"
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
