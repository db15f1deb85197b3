package accounts_test

import (
	"testing"

	"github.com/upscalekit/upscale/accounts"
	"github.com/upscalekit/upscale/accounts/accountstest"
	"github.com/upscalekit/upscale/upscaletest"
)

// TestMemorySessions holds MemorySessions to the SessionStore contract:
// accountstest.TestSessionStore's checks fail this test.
func TestMemorySessions(t *testing.T) {
	accountstest.TestSessionStore(t, func(t *testing.T) accounts.SessionStore { return accounts.NewMemorySessions() })
}

// TestMemoryLinks holds MemoryLinks to the LinkStore contract:
// accountstest.TestLinkStore's checks fail this test.
func TestMemoryLinks(t *testing.T) {
	accountstest.TestLinkStore(t, func(t *testing.T, clock *upscaletest.Clock) accounts.LinkStore {
		return accounts.NewMemoryLinks(accounts.MemoryLinksOptions{Now: clock.Now})
	})
}
