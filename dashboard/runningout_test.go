package dashboard_test

import (
	"context"
	"strings"
	"testing"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/billing/stripebilling/stripetest"
	"github.com/upscalekit/upscale/dashboard"
	"github.com/upscalekit/upscale/upscaletest"
)

// spend charges n images to account.
func spend(t *testing.T, ledger upscale.QuotaLedger, account string, n int) {
	t.Helper()
	for range n {
		r, err := ledger.Reserve(context.Background(), account, false)
		if err != nil {
			t.Fatal(err)
		}
		if err := ledger.Commit(context.Background(), r.ID); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRunningOut: every page warns an account down to a fifth of its
// monthly images or less, and one with none left, with when they refill
// and, where the dashboard sells, the Billing link; an account with
// images enough and an unlimited one see no banner.
func TestRunningOut(t *testing.T) {
	s := newSite(t, upscaletest.NewClock(start))
	banner := func(account, path string) string {
		t.Helper()
		_, page, _ := s.do("GET", path, account, nil)
		i := strings.Index(page, `id="running-out">`)
		if i < 0 {
			return ""
		}
		return page[i+len(`id="running-out">`) : i+strings.Index(page[i:], "</p>")]
	}
	spend(t, s.ledger, "acme", 14) // of 10 free, 2 share bonus and 5 credits
	if got := banner("acme", "/"); got != "" {
		t.Errorf("3 images left of 10 a month: banner %q, want none", got)
	}
	spend(t, s.ledger, "acme", 1)
	for _, path := range []string{"/", "/keys", "/try", "/reference"} {
		if got := banner("acme", path); got != "Only 2 images left: the free images refill on 1 December 2026." {
			t.Errorf("%s with 2 images left: banner %q", path, got)
		}
	}
	spend(t, s.ledger, "acme", 2)
	if got := banner("acme", "/"); got != "No images left: the free images refill on 1 December 2026." {
		t.Errorf("none left: banner %q", got)
	}
	if got := banner("globex", "/"); got != "" {
		t.Errorf("an unlimited account: banner %q", got)
	}
	if err := s.ledger.PutAccount(context.Background(), upscale.Account{ID: "credits-only", Plan: upscale.Plan{Name: "prepaid"}, Credits: 1}); err != nil {
		t.Fatal(err)
	}
	if got := banner("credits-only", "/"); got != "Only 1 image left." {
		t.Errorf("a plan without free images, one credit left: banner %q; want no word of a refill", got)
	}

	fake := stripetest.New(t, webhookSecret)
	selling, _ := sellingSite(t, fake.URL, nil)
	spend(t, selling.ledger, "acme", 17)
	_, page, _ := selling.do("GET", "/keys", "acme", nil)
	if !strings.Contains(page, `No images left: the free images refill on 1 December 2026. <a href="./billing">Buy images or a plan</a> to go on before then.</p>`) {
		t.Errorf("none left where the dashboard sells: no link to Billing\n%s", page)
	}
}

// balanceCounter counts the balances read through it.
type balanceCounter struct {
	*upscale.MemoryLedger
	reads int
}

func (l *balanceCounter) Balance(ctx context.Context, account string) (upscale.Balance, error) {
	l.reads++
	return l.MemoryLedger.Balance(ctx, account)
}

// TestBalanceReadOncePerPage: the overview and its banner share one read
// of the balance.
func TestBalanceReadOncePerPage(t *testing.T) {
	var counter *balanceCounter
	s := newSite(t, upscaletest.NewClock(start), func(c *dashboard.Config) {
		counter = &balanceCounter{MemoryLedger: c.Ledger.(*upscale.MemoryLedger)}
		c.Ledger = counter
	})
	spend(t, s.ledger, "acme", 15) // low: the banner shows
	if _, page, _ := s.do("GET", "/", "acme", nil); !strings.Contains(page, `id="running-out"`) || counter.reads != 1 {
		t.Errorf("the overview with its banner read the balance %d times, want once", counter.reads)
	}
}
