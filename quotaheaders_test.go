package upscale_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/upscalekit/upscale"
)

// quota reads an answer's RateLimit-Policy and RateLimit fields with a
// structured-field parser: for each pool, its parameters.
func quota(t *testing.T, w *httptest.ResponseRecorder) (policy, limit map[string]map[string]int64) {
	t.Helper()
	read := func(field string) map[string]map[string]int64 {
		list, err := httpsfv.UnmarshalList(w.Header().Values(field))
		if err != nil {
			t.Fatalf("%s %q: %v", field, w.Header().Values(field), err)
		}
		pools := map[string]map[string]int64{}
		for _, member := range list {
			item, ok := member.(httpsfv.Item)
			name, isString := item.Value.(string)
			if !ok || !isString {
				t.Fatalf("%s member %v is not a String item", field, member)
			}
			pools[name] = map[string]int64{}
			for _, k := range item.Params.Names() {
				v, _ := item.Params.Get(k)
				pools[name][k] = v.(int64)
			}
		}
		return pools
	}
	return read("RateLimit-Policy"), read("RateLimit")
}

// TestQuotaHeaders: every answer to an authenticated request says what is
// left in each pool and when the free pool refills (the test's clock is
// 12:00 UTC on 10 March, 21.5 days before 1 April); the answer that finds
// nothing left is a 429 whose Retry-After is that refill.
func TestQuotaHeaders(t *testing.T) {
	e := newEnv(t)
	e.putAccount(upscale.Account{ID: "free", Plan: freePlan, ShareBonus: 1})
	const untilApril = 21*24*3600 + 12*3600
	const march = 31 * 24 * 3600
	for n := 1; n <= 4; n++ {
		w := e.post(keyFree, body(e.url("/small.png")))
		if w.Code != http.StatusOK {
			t.Fatalf("request %d: %d %s", n, w.Code, w.Body)
		}
		policy, limit := quota(t, w)
		if p := policy["free_pool"]; p["q"] != 3 || p["w"] != march {
			t.Errorf("request %d: free_pool policy %v, want q=3, w=%d", n, p, march)
		}
		wantFree, wantBonus := int64(3-n), int64(1)
		if n == 4 {
			wantFree, wantBonus = 0, 0
		}
		if l := limit["free_pool"]; l["r"] != wantFree || l["t"] != untilApril {
			t.Errorf("request %d: free_pool %v, want r=%d, t=%d", n, l, wantFree, untilApril)
		}
		if l, p := limit["share_bonus"], policy["share_bonus"]; l["r"] != wantBonus || p["q"] != wantBonus {
			t.Errorf("request %d: share_bonus %v (policy %v), want r=q=%d", n, l, p, wantBonus)
		}
		if l := limit["credit"]; l["r"] != 0 {
			t.Errorf("request %d: credit %v, want r=0", n, l)
		}
	}
	w := e.post(keyFree, body(e.url("/small.png")))
	p := checkProblem(t, w, http.StatusTooManyRequests, "quota_exhausted")
	if got := w.Header().Get("Retry-After"); got != strconv.Itoa(untilApril) {
		t.Errorf("429 Retry-After %q, want %d: the free pool's refill", got, untilApril)
	}
	if !strings.Contains(p.Detail, "2026-04-01T00:00:00Z") {
		t.Errorf("429 detail %q does not say when the pool refills", p.Detail)
	}
	if _, limit := quota(t, w); limit["free_pool"]["r"] != 0 {
		t.Errorf("429 RateLimit %v, want free_pool r=0", limit)
	}
	// A failure after the key was accepted also says where the account stands.
	if w := e.post(keyPro, body(e.url("/missing.png"))); w.Header().Get("RateLimit") == "" {
		t.Errorf("a 400 to a known account has no RateLimit field")
	}
}

// TestQuotaHeadersWhenOnlyBuyingHelps: an account whose plan has no free
// pool gets a 429 without Retry-After, since waiting will not help.
func TestQuotaHeadersWhenOnlyBuyingHelps(t *testing.T) {
	e := newEnv(t)
	e.putAccount(upscale.Account{ID: "free", Plan: upscale.Plan{Name: "credits only", MaxFileBytes: 1 << 20}})
	w := e.post(keyFree, body(e.url("/small.png")))
	checkProblem(t, w, http.StatusTooManyRequests, "quota_exhausted")
	if got := w.Header().Get("Retry-After"); got != "" {
		t.Errorf("Retry-After %q on a 429 that only buying credits can cure", got)
	}
	policy, _ := quota(t, w)
	if _, ok := policy["free_pool"]; ok {
		t.Errorf("RateLimit-Policy %v names a free pool the plan does not have", policy)
	}
}

func TestNoQuotaHeadersOnUnlimitedPlans(t *testing.T) {
	e := newEnv(t)
	e.putAccount(upscale.Account{ID: "pro", Plan: upscale.Plan{Name: "unlimited", Paid: true, Unlimited: true, MaxFileBytes: 1 << 20}})
	w := e.post(keyPro, body(e.url("/small.png")))
	checkOK(t, w, upscale.PoolUnlimited)
	if got := w.Header().Values("RateLimit"); got != nil {
		t.Errorf("RateLimit %q on an unlimited plan", got)
	}
}

// TestQuotaHeadersThroughTheBreaker: requests refused while the ledger's
// breaker is open do not call the ledger for their quota headers either.
// Before, ten refused requests made ten Balance calls to a ledger that was
// down.
func TestQuotaHeadersThroughTheBreaker(t *testing.T) {
	e, _, ledger, _ := newFlakyEnv(t)
	ledger.reserveDown.Store(true)
	for range 10 {
		checkUnavailable(t, e.post(keyFree, body(e.url("/small.png"))))
	}
	if got := ledger.balances.Load(); got != 0 {
		t.Errorf("%d Balance calls for refused requests, want 0", got)
	}
}

// TestQuotaExhaustedReadsBalanceOnce: a 429 quota_exhausted reads the
// balance once, for its Retry-After and its headers both.
func TestQuotaExhaustedReadsBalanceOnce(t *testing.T) {
	e, _, ledger, _ := newFlakyEnv(t)
	e.putAccount(upscale.Account{ID: "free", Plan: upscale.Plan{Name: "none", MonthlyImages: 1, MaxFileBytes: 1 << 20}})
	checkOK(t, e.post(keyFree, body(e.url("/small.png"))), upscale.PoolFree)
	before := ledger.balances.Load()
	w := e.post(keyFree, body(e.url("/small.png")))
	checkProblem(t, w, http.StatusTooManyRequests, "quota_exhausted")
	if got := ledger.balances.Load() - before; got != 1 {
		t.Errorf("%d Balance calls for one 429, want 1", got)
	}
	if _, limit := quota(t, w); limit["free_pool"]["r"] != 0 {
		t.Errorf("RateLimit %v, want the free pool at 0", limit)
	}
}

// TestQuotaHeadersHoldNoPlace: a slow Balance for the quota headers does
// not hold an admission place. Before, two answers waiting on the ledger
// for their headers held both places, and a third request got 503.
func TestQuotaHeadersHoldNoPlace(t *testing.T) {
	e, _, ledger, _ := newFlakyEnv(t, func(c *upscale.Config) {
		c.Capacity.EngineConcurrency = 1
		c.Capacity.QueueLength = 1
	})
	gate := make(chan struct{})
	ledger.balanceGate = gate
	done := make(chan *httptest.ResponseRecorder, 2)
	for range 2 {
		go func() { done <- e.post(keyPro, body(e.url("/small.png"))) }()
	}
	for ledger.balances.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	third := make(chan *httptest.ResponseRecorder, 1)
	go func() { third <- e.post(keyFree, body(e.url("/small.png"))) }()
	for ledger.balances.Load() < 3 { // the third is served and waits for its headers too
		select {
		case w := <-third:
			close(gate)
			t.Fatalf("the third request was answered %d %s without reaching its quota headers: no place was free", w.Code, w.Body)
		case <-time.After(time.Millisecond):
		}
	}
	close(gate)
	checkOK(t, <-third, upscale.PoolFree)
	for range 2 {
		checkOK(t, <-done, upscale.PoolFree)
	}
}
