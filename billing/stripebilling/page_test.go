package stripebilling_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"path"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/billing/stripebilling"
	"github.com/upscalekit/upscale/billing/stripebilling/stripetest"
)

// TestPagesBounded: when Stripe does not answer, answers 5xx or cannot be
// reached, Checkout, Portal and Fulfil return an error wrapping
// upscale.ErrUnavailable within PageTimeout; a checkout tried again then
// makes no second customer; a 4xx is no outage.
func TestPagesBounded(t *testing.T) {
	const bound = time.Second // far below the 10 s default; a first call to Stripe takes a fair part of it under -race
	var outage *stripetest.Outage
	checkouts := upscale.NewMemoryCheckoutStore()
	s := newSeller(t, nil, func(o *stripebilling.Options) {
		outage = stripetest.NewOutage(t, o.APIBase)
		o.APIBase, o.PageTimeout, o.Checkouts = outage.URL, bound, checkouts
	})
	b, fake := s.Billing, s.fake
	ctx := t.Context()
	unavailable := func(what string, call func() error) {
		t.Helper()
		began := time.Now()
		err := call()
		if took := time.Since(began); !errors.Is(err, upscale.ErrUnavailable) || took > bound+time.Second {
			t.Errorf("%s while Stripe does not answer: %v after %v; want ErrUnavailable within %v", what, err, took, bound)
		}
	}

	outage.SetDown(true)
	unavailable("a first checkout", func() error { _, err := b.Checkout(ctx, "a", pack.Price); return err })
	outage.SetDown(false)
	id := checkout(t, b, "a", pack.Price)
	if got := fake.Customers(); got != 1 {
		t.Errorf("a checkout tried again after a timeout left %d customers at Stripe, want 1", got)
	}
	fake.Pay(id, 500)

	outage.SetDown(true)
	unavailable("Checkout", func() error { _, err := b.Checkout(ctx, "a", pack.Price); return err })
	unavailable("Portal", func() error { _, err := b.Portal(ctx, "a"); return err })
	unavailable("Fulfil", func() error { _, _, err := b.Fulfil(ctx, "a", id); return err })
	outage.SetDown(false)
	if _, paid, err := b.Fulfil(ctx, "a", id); err != nil || !paid {
		t.Errorf("Fulfil once Stripe answers: paid %v, %v; want paid", paid, err)
	}

	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		w.Write([]byte(`{"error":{"type":"api_error","message":"Something went wrong on Stripe's end."}}`))
	}))
	t.Cleanup(failing.Close)
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	for name, base := range map[string]string{"5xx": failing.URL, "unreachable": gone.URL} {
		b := newSeller(t, nil, func(o *stripebilling.Options) { o.APIBase, o.PageTimeout = base, bound })
		unavailable(name, func() error { _, err := b.Checkout(ctx, "a", pack.Price); return err })
	}

	if err := checkouts.PutCheckout(ctx, upscale.Checkout{ID: "cs_unknown_at_stripe", AccountID: "a", Price: pack.Price, Units: pack.Units}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Fulfil(ctx, "a", "cs_unknown_at_stripe"); err == nil || errors.Is(err, upscale.ErrUnavailable) {
		t.Errorf("Fulfil of a session Stripe answers 404 for: %v, want an error other than ErrUnavailable", err)
	}
}

// checkout has account start a checkout of price on b and returns its
// session's ID.
func checkout(t *testing.T, b *stripebilling.Billing, account, price string) string {
	t.Helper()
	url, err := b.Checkout(t.Context(), account, price)
	if err != nil {
		t.Fatalf("Checkout(%s, %s): %v", account, price, err)
	}
	return path.Base(url)
}
