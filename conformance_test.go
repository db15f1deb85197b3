package upscale_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/upscaletest"
)

func TestMemoryKeyStore(t *testing.T) {
	upscaletest.TestKeyStore(t, func(t *testing.T) upscale.KeyAdmin { return upscale.NewMemoryKeyStore() })
	upscaletest.TestKeyLister(t, func(t *testing.T) upscale.KeyLister { return upscale.NewMemoryKeyStore() })
}

func TestMemoryLedger(t *testing.T) {
	upscaletest.TestQuotaLedger(t, func(t *testing.T, opts upscale.LedgerOptions) upscaletest.LedgerHarness {
		return upscale.NewMemoryLedger(opts)
	})
	upscaletest.TestUsageReporter(t, func(t *testing.T, opts upscale.LedgerOptions) upscaletest.UsageHarness {
		return upscale.NewMemoryLedger(opts)
	})
	upscaletest.TestFirstCharger(t, func(t *testing.T, opts upscale.LedgerOptions) upscaletest.FirstChargeHarness {
		return upscale.NewMemoryLedger(opts)
	})
	upscaletest.TestBillingLedger(t, func(t *testing.T, opts upscale.LedgerOptions) upscaletest.BillingHarness {
		return upscale.NewMemoryLedger(opts)
	})
}

func TestMemoryCheckoutStore(t *testing.T) {
	upscaletest.TestCheckoutStore(t, func(t *testing.T) upscale.CheckoutStore { return upscale.NewMemoryCheckoutStore() })
}

func TestMemoryBlobStore(t *testing.T) {
	upscaletest.TestBlobStore(t, func(t *testing.T, clock *upscaletest.Clock) upscale.BlobStore {
		return newMemoryBlobs(t, upscale.MemoryBlobStoreOptions{Now: clock.Now})
	})
}

func TestMemoryJobQueue(t *testing.T) {
	upscaletest.TestJobQueue(t, func(t *testing.T, clock *upscaletest.Clock) upscale.JobQueue {
		return upscale.NewMemoryJobQueue(upscale.MemoryJobQueueOptions{Now: clock.Now})
	})
}

func TestMemoryWebhookSecrets(t *testing.T) {
	upscaletest.TestWebhookSecrets(t, func(t *testing.T, clock *upscaletest.Clock) upscale.WebhookSecrets {
		return upscale.NewMemoryWebhookSecrets(upscale.MemoryWebhookSecretsOptions{Now: clock.Now})
	})
}

func TestMemoryWebhookQueue(t *testing.T) {
	upscaletest.TestWebhookQueue(t, func(t *testing.T, clock *upscaletest.Clock, backoff func(int) time.Duration) upscale.WebhookQueue {
		return upscale.NewMemoryWebhookQueue(upscale.MemoryWebhookQueueOptions{Now: clock.Now, Backoff: backoff})
	})
}

func TestPixelUpscaler(t *testing.T) {
	upscaletest.TestUpscaler(t, func(t *testing.T) upscale.Upscaler { return upscaletest.PixelUpscaler{} })
}

// newMemoryBlobs returns a MemoryBlobStore served by a test server, with
// opts.BaseURL pointing at it.
func newMemoryBlobs(t *testing.T, opts upscale.MemoryBlobStoreOptions) *upscale.MemoryBlobStore {
	t.Helper()
	var store *upscale.MemoryBlobStore
	// The server must exist before the store, whose links point at it.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { store.ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	opts.BaseURL = srv.URL + "/outputs"
	store, err := upscale.NewMemoryBlobStore(opts)
	upscaletest.Opened(t, store, err)
	return store
}

func TestMemoryBlobStoreFreesExpiredItems(t *testing.T) {
	s := newMemoryBlobs(t, upscale.MemoryBlobStoreOptions{SweepInterval: 10 * time.Millisecond})
	// Expiring in a second, the item is surely there at the first Len.
	if _, err := s.Put(t.Context(), "gone.png", make([]byte, 1<<20), "image/png", time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := s.Len(); got != 1 {
		t.Fatalf("Len after Put = %d, want 1", got)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("expired item still held after 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestMemoryIdempotencyStore(t *testing.T) {
	upscaletest.TestIdempotencyStore(t, func(t *testing.T, clock *upscaletest.Clock) upscale.IdempotencyStore {
		return upscale.NewMemoryIdempotencyStore(upscale.MemoryIdempotencyStoreOptions{Now: clock.Now})
	})
}

func TestMemoryCallHistory(t *testing.T) {
	upscaletest.TestCallHistory(t, func(t *testing.T, clock *upscaletest.Clock, retention time.Duration) upscale.CallHistory {
		return upscale.NewMemoryCallHistory(upscale.MemoryCallHistoryOptions{Retention: retention, Now: clock.Now})
	})
}

func TestMemoryWebhookLog(t *testing.T) {
	upscaletest.TestWebhookLog(t, func(t *testing.T, clock *upscaletest.Clock, retention time.Duration) upscale.WebhookLog {
		return upscale.NewMemoryWebhookLog(upscale.MemoryWebhookLogOptions{Retention: retention, Now: clock.Now})
	})
}
