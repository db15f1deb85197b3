package upscale_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/upscaletest"
)

func ExampleNew() {
	ctx := context.Background()
	keys := upscale.NewMemoryKeyStore()
	keys.AddKey(ctx, "upk_example_0123456789", "acme")
	ledger := upscale.NewMemoryLedger(upscale.LedgerOptions{})
	ledger.PutAccount(ctx, upscale.Account{ID: "acme", Plan: upscale.Plan{Name: "free", MonthlyImages: 10, MaxFileBytes: 5 << 20}})
	blobs, _ := upscale.NewMemoryBlobStore(upscale.MemoryBlobStoreOptions{BaseURL: "https://img.example.com/results"})

	h, err := upscale.New(upscale.Config{
		Keys:     keys,
		Ledger:   ledger,
		Upscaler: upscaletest.PixelUpscaler{}, // vips.New(vips.Options{}) in production
		Blobs:    blobs,
		Fetch:    upscale.FetchPolicy{AllowPrivateNetworks: true}, // only because this example's image is on loopback
	})
	if err != nil {
		panic(err)
	}
	// The job form's workers (Prefer: respond-async) run until StopJobs.
	if err := h.StartJobs(ctx); err != nil {
		panic(err)
	}
	defer h.StopJobs(ctx)
	mux := http.NewServeMux()
	mux.Handle("/api/v1/upscale", h)
	mux.Handle("/api/v1/upscale/jobs/", h) // a job's resource, its Location
	mux.Handle("GET /results/", blobs)

	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(mustPNG(upscaletest.TestImage(8, 8)))
	}))
	defer origin.Close()
	req := httptest.NewRequest("POST", "/api/v1/upscale", strings.NewReader(`{"imageUrl": "`+origin.URL+`/a.png", "scale": 4}`))
	req.Header.Set("Authorization", "Bearer upk_example_0123456789")
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, req)
	fmt.Println(w.Code, strings.Contains(w.Body.String(), `"via":"free_pool"`))
	// Output: 200 true
}
