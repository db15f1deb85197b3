package upscale_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
)

// TestHistoryRecordsCalls: each request and job a key sends lands in its
// account's history once, with what it asked, how it ended and what it
// made; a request no account can be told for, and a replay, do not.
func TestHistoryRecordsCalls(t *testing.T) {
	var history *upscale.MemoryCallHistory
	e := newEnv(t, func(c *upscale.Config) {
		history = upscale.NewMemoryCallHistory(upscale.MemoryCallHistoryOptions{Now: c.Now})
		c.History = history
	})
	ok := e.post(keyFree, body(e.url("/small.png"), `"scale": 4, "imageType": "anime", "denoise": "low"`))
	checkOK(t, ok, upscale.PoolFree)
	var answer upscale.Response
	json.Unmarshal(ok.Body.Bytes(), &answer)
	checkProblem(t, e.post(keyFree, body(e.url("/small.png"), `"scale": 8`)), http.StatusForbidden, "paid_plan_required")
	checkProblem(t, e.post("upk_unknown_0123456789", body(e.url("/small.png"))), http.StatusUnauthorized, "unauthorized")
	for range 2 { // a request retried with its key is one call
		checkOK(t, e.postOnce(keyFree, "once", body(e.url("/small.png"))), upscale.PoolFree)
	}
	w := e.sendJob("POST", "/api/v1/upscale", keyFree, "respond-async, wait=5", body(e.url("/small.png")))
	checkOK(t, w, upscale.PoolFree)

	calls, err := history.Calls(context.Background(), "free", upscale.CallQuery{})
	if err != nil || len(calls) != 4 {
		t.Fatalf("the history: %+v, %v; want 4 calls", calls, err)
	}
	byKind := map[string]upscale.Call{}
	for _, c := range calls {
		switch {
		case c.Job:
			byKind["job"] = c
		case c.Status == http.StatusForbidden:
			byKind["refused"] = c
		case c.Params.Scale == 4:
			byKind["ok"] = c
		}
		if c.KeyID != upscale.KeyID(keyFree) || c.AccountID != "free" || c.ID == "" || c.At.IsZero() {
			t.Errorf("call %+v: want the key's ID, its account, an ID and an end", c)
		}
	}
	if c := byKind["ok"]; c.Status != 200 || c.Pool != upscale.PoolFree || c.Params != (upscale.Params{Scale: 4, ImageType: upscale.Anime, Denoise: upscale.DenoiseLow}) ||
		c.SourceBytes == 0 || c.ResultBytes == 0 || c.ResultURL != answer.URL || !c.ResultExpires.After(c.At) || c.Took <= 0 {
		t.Errorf("the request that succeeded: %+v", c)
	}
	if c := byKind["refused"]; c.Code != "paid_plan_required" || c.Pool != "" || c.Params.Scale != 8 || c.ResultURL != "" {
		t.Errorf("the request refused: %+v", c)
	}
	if c := byKind["job"]; c.Status != 200 || c.Pool != upscale.PoolFree || c.ResultURL == "" || c.ResultBytes == 0 || c.SourceBytes == 0 || c.Took < 0 {
		t.Errorf("the job: %+v", c)
	}
	if calls, _ := history.Calls(context.Background(), "free", upscale.CallQuery{Since: calls[0].At.Add(time.Second)}); len(calls) != 0 {
		t.Errorf("the calls since an hour from now: %d", len(calls))
	}
}
