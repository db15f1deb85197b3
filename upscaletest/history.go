package upscaletest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
)

// TestCallHistory checks that a CallHistory keeps every field of a call,
// lists an account's calls the latest end first (ties by ID), by key and
// since a time, at most the limit asked (100 for none, or one below 1), replaces a call
// recorded again under its ID, keeps accounts apart, and forgets calls
// past its retention. newHistory must return an empty history on clock
// that keeps calls for retention.
func TestCallHistory(t *testing.T, newHistory func(t *testing.T, clock *Clock, retention time.Duration) upscale.CallHistory) {
	ctx := context.Background()
	start := time.Date(2026, time.March, 10, 12, 0, 0, 0, time.UTC)
	const retention = 7 * 24 * time.Hour
	clock := NewClock(start)
	h := newHistory(t, clock, retention)
	record := func(c upscale.Call) {
		t.Helper()
		if err := h.RecordCall(ctx, c); err != nil {
			t.Fatalf("RecordCall(%s): %v", c.ID, err)
		}
	}
	list := func(account string, q upscale.CallQuery) []upscale.Call {
		t.Helper()
		calls, err := h.Calls(ctx, account, q)
		if err != nil || calls == nil {
			t.Fatalf("Calls(%s, %+v) = %v, %v; want a list", account, q, calls, err)
		}
		return calls
	}
	ids := func(calls []upscale.Call) string {
		s := ""
		for _, c := range calls {
			s += c.ID + " "
		}
		return s
	}

	whole := upscale.Call{
		ID: "req_whole", AccountID: "acme", KeyID: "0123456789abcdef", At: start.Add(-time.Hour),
		Params: upscale.Params{Scale: 4, ImageType: upscale.Anime, Denoise: upscale.DenoiseLow},
		Status: 200, Pool: upscale.PoolCredit, Engine: "learned;passes=2", Took: 1500 * time.Millisecond,
		SourceBytes: 123456, ResultBytes: 7890123, ResultURL: "https://img.example/r.png?token=x", ResultExpires: start.Add(time.Hour),
	}
	record(whole)
	got := list("acme", upscale.CallQuery{})
	if len(got) != 1 || !sameCall(got[0], whole) {
		t.Fatalf("the whole call back: %+v, want %+v", got, whole)
	}
	if calls := list("nobody", upscale.CallQuery{}); len(calls) != 0 {
		t.Errorf("an account without calls has %d", len(calls))
	}

	// A failed request, a job, another key's and another account's.
	record(upscale.Call{ID: "req_refused", AccountID: "acme", KeyID: "fedcba9876543210", At: start.Add(-2 * time.Hour), Status: 403, Code: "paid_plan_required"})
	record(upscale.Call{ID: "job_b", AccountID: "acme", KeyID: "0123456789abcdef", Job: true, At: start.Add(-time.Hour), Status: 0, Code: "canceled"})
	record(upscale.Call{ID: "req_other", AccountID: "globex", At: start, Status: 200})
	if got := ids(list("acme", upscale.CallQuery{})); got != "job_b req_whole req_refused " {
		t.Errorf("acme's calls %q, want the latest end first, ties by ID", got)
	}
	if got := ids(list("acme", upscale.CallQuery{KeyID: "fedcba9876543210"})); got != "req_refused " {
		t.Errorf("one key's calls %q", got)
	}
	if got := ids(list("acme", upscale.CallQuery{Since: start.Add(-time.Hour)})); got != "job_b req_whole " {
		t.Errorf("the calls since an hour ago %q", got)
	}
	if got := ids(list("acme", upscale.CallQuery{Limit: 2})); got != "job_b req_whole " {
		t.Errorf("two calls %q", got)
	}
	// A job run again records its end once.
	ended := upscale.Call{ID: "job_b", AccountID: "acme", KeyID: "0123456789abcdef", Job: true, At: start.Add(-30 * time.Minute), Status: 200, Pool: upscale.PoolFree}
	record(ended)
	if got := list("acme", upscale.CallQuery{}); len(got) != 3 || !sameCall(got[0], ended) {
		t.Errorf("a call recorded again: %+v, want it replaced", got)
	}
	for i := range 120 {
		record(upscale.Call{ID: fmt.Sprintf("req_%03d", i), AccountID: "busy", At: start.Add(time.Duration(i) * time.Second), Status: 200})
	}
	for _, limit := range []int{0, -1} {
		if got := list("busy", upscale.CallQuery{Limit: limit}); len(got) != 100 || got[0].ID != "req_119" || got[99].ID != "req_020" {
			t.Errorf("limit %d: %d calls, from %s; want the latest 100", limit, len(got), ids(got[:1]))
		}
	}

	// Past the retention, calls are forgotten.
	clock.Advance(retention - time.Hour + time.Minute)
	record(upscale.Call{ID: "req_late", AccountID: "acme", At: clock.Now(), Status: 200})
	if got := ids(list("acme", upscale.CallQuery{})); got != "req_late job_b " {
		t.Errorf("after the retention of the older ones: %q", got)
	}
}

// sameCall reports whether a and b are the same call, their times the
// same instants.
func sameCall(a, b upscale.Call) bool {
	a.At, a.ResultExpires = a.At.UTC(), a.ResultExpires.UTC()
	b.At, b.ResultExpires = b.At.UTC(), b.ResultExpires.UTC()
	return a == b
}
