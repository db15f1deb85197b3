package upscaletest

import (
	"context"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
)

// TestWebhookLog checks that a WebhookLog counts each webhook's attempts
// and keeps its last outcome, lists an account's deliveries the latest
// attempt first, at most the limit asked, keeps accounts apart, and
// forgets deliveries past its retention. newLog must return an empty log
// on clock that keeps deliveries for retention.
func TestWebhookLog(t *testing.T, newLog func(t *testing.T, clock *Clock, retention time.Duration) upscale.WebhookLog) {
	ctx := context.Background()
	start := time.Date(2026, time.March, 10, 12, 0, 0, 0, time.UTC)
	const retention = 7 * 24 * time.Hour
	clock := NewClock(start)
	l := newLog(t, clock, retention)
	record := func(d upscale.WebhookDelivery) {
		t.Helper()
		if err := l.RecordAttempt(ctx, d); err != nil {
			t.Fatalf("RecordAttempt(%s): %v", d.ID, err)
		}
	}
	list := func(account string, limit int) []upscale.WebhookDelivery {
		t.Helper()
		got, err := l.Deliveries(ctx, account, limit)
		if err != nil || got == nil {
			t.Fatalf("Deliveries(%s) = %v, %v; want a list", account, got, err)
		}
		for i := range got {
			got[i].LastAt = got[i].LastAt.UTC()
		}
		return got
	}
	failed := upscale.WebhookDelivery{ID: "msg_job_a", AccountID: "acme", URL: "https://hooks.example/a", Event: "upscale.job.succeeded",
		LastAt: start, LastStatus: 500, LastError: "the receiver answered 500 Internal Server Error"}
	record(failed)
	clock.Advance(time.Minute)
	delivered := failed
	delivered.LastAt, delivered.LastStatus, delivered.LastError, delivered.Delivered = start.Add(time.Minute), 204, "", true
	delivered.Attempts = 7 // ignored: the log counts
	record(delivered)
	record(upscale.WebhookDelivery{ID: "msg_test_b", AccountID: "acme", URL: "https://hooks.example/b", Event: "upscale.test", LastAt: start.Add(30 * time.Second), LastError: "no answer"})
	record(upscale.WebhookDelivery{ID: "msg_job_c", AccountID: "globex", Event: "upscale.job.failed", LastAt: start, Delivered: true, LastStatus: 200})

	got := list("acme", 0)
	want := delivered
	want.Attempts = 2
	if len(got) != 2 || got[0] != want || got[1].ID != "msg_test_b" || got[1].Attempts != 1 || got[1].LastStatus != 0 || got[1].Delivered {
		t.Fatalf("acme's deliveries: %+v; want %+v first, then the test event's one failed attempt", got, want)
	}
	if got := list("acme", 1); len(got) != 1 || got[0].ID != "msg_job_a" {
		t.Errorf("one delivery: %+v", got)
	}
	if got := list("acme", -1); len(got) != 2 {
		t.Errorf("a limit below 1 is the default: %d deliveries, want 2", len(got))
	}
	if got := list("nobody", 0); len(got) != 0 {
		t.Errorf("an account without webhooks has %d deliveries", len(got))
	}
	clock.Advance(retention - 15*time.Second) // the oldest kept: 45 s after start
	if got := list("acme", 0); len(got) != 1 || got[0].ID != "msg_job_a" {
		t.Errorf("past the retention of the test event's: %+v", got)
	}
}
