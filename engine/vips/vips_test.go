package vips_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/engine/vips"
	"github.com/upscalekit/upscale/upscaletest"
)

// TestConformance: the public Engine keeps the Upscaler contract; its
// implementation's own tests are in engine/internal/libvips.
func TestConformance(t *testing.T) {
	e := vips.New(vips.Options{})
	newUpscaler := func(t *testing.T) upscale.Upscaler { return e }
	upscaletest.TestUpscaler(t, newUpscaler)
	upscaletest.TestUpscalerFormats(t, newUpscaler)
}

// TestHostileFilesUncharged: files that lie about their size (HEIC, AVIF,
// grids of them, a grid whose tile reaches far past it, a GIF whose
// frames' data ends early), sent to the handler as a request or as a job, are answered 400 unsupported_image
// from their headers: nothing is charged, no job is queued, and no memory
// is granted for them.
func TestHostileFilesUncharged(t *testing.T) {
	files := map[string][]byte{}
	for _, name := range []string{"lying.heic", "lying.avif", "lying-grid-2x2.heic", "lying-grid-63x64.heic", "overhanging-grid-1x1.heic", "short-frames.gif"} {
		data, err := os.ReadFile("../internal/libvips/testdata/hostile/" + name)
		if err != nil {
			t.Fatal(err)
		}
		files["/"+name] = data
	}
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(files[r.URL.Path]) }))
	defer origin.Close()
	ctx := context.Background()
	keys, ledger := upscale.NewMemoryKeyStore(), upscale.NewMemoryLedger(upscale.LedgerOptions{})
	keys.AddKey(ctx, "upk_test_hostile_0123456789", "acct")
	plan := upscale.Plan{Name: "free", MonthlyImages: 10, MaxFileBytes: 1 << 20}
	ledger.PutAccount(ctx, upscale.Account{ID: "acct", Plan: plan})
	blobs, err := upscale.NewMemoryBlobStore(upscale.MemoryBlobStoreOptions{BaseURL: "http://results.test/r"})
	if err != nil {
		t.Fatal(err)
	}
	h, err := upscale.New(upscale.Config{
		Keys: keys, Ledger: ledger, Upscaler: vips.New(vips.Options{}), Blobs: blobs,
		Jobs:   upscale.NewMemoryJobQueue(upscale.MemoryJobQueueOptions{}),
		Fetch:  upscale.FetchPolicy{AllowPrivateNetworks: true},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	for name := range files {
		for _, prefer := range []string{"", "respond-async"} {
			r := httptest.NewRequest("POST", "/api/v1/upscale", strings.NewReader(`{"imageUrl": "`+origin.URL+name+`", "scale": 2}`))
			r.Header.Set("Authorization", "Bearer upk_test_hostile_0123456789")
			r.Header.Set("Content-Type", "application/json")
			if prefer != "" {
				r.Header.Set("Prefer", prefer)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), `"unsupported_image"`) {
				t.Errorf("%s (Prefer %q): %d %s; want 400 unsupported_image", name, prefer, w.Code, w.Body)
			}
		}
	}
	balance, err := ledger.Balance(ctx, "acct")
	if err != nil || balance.Free != 10 {
		t.Errorf("balance %+v, %v after the hostile files; want all 10 free images", balance, err)
	}
	if load := h.Load(); load.MemoryInUse != 0 || load.JobsQueued != 0 {
		t.Errorf("load %+v after the hostile files; want no memory granted and no job queued", load)
	}
}
