package accounts_test

import (
	"context"
	"strings"
	"testing"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/accounts"
	"github.com/upscalekit/upscale/accounts/accountstest"
)

// TestMemoryDirectory holds MemoryDirectory to the Directory contract:
// accountstest.TestDirectory's checks fail this test.
func TestMemoryDirectory(t *testing.T) {
	accountstest.TestDirectory(t, func(t *testing.T) (accounts.Directory, func(string) (upscale.Balance, error)) {
		ledger := upscale.NewMemoryLedger(upscale.LedgerOptions{})
		return accounts.NewMemoryDirectory(accounts.MemoryDirectoryOptions{Ledger: ledger}), func(id string) (upscale.Balance, error) { return ledger.Balance(context.Background(), id) }
	})
}

// TestAddress: one mailbox is one address however it is typed; anything
// but a bare address is refused.
func TestAddress(t *testing.T) {
	for in, want := range map[string]string{
		"ada@example.com":          "ada@example.com",
		"Ada.Lovelace@Example.COM": "ada.lovelace@example.com",
		"  ada@example.com\n":      "ada@example.com",
		"ada+upscale@example.com":  "ada+upscale@example.com",
	} {
		if got, err := accounts.Address(in); err != nil || got != want {
			t.Errorf("Address(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{
		"", "ada", "ada@", "@example.com", "Ada <ada@example.com>", "<ada@example.com>", "ada@b@example.com",
		`"ada lovelace"@example.com`, "ada@example.com, grace@example.com", strings.Repeat("a", 250) + "@example.com",
		"ada@[127.0.0.1]", "ada@localhost", "ada@example.",
	} {
		if got, err := accounts.Address(in); err == nil {
			t.Errorf("Address(%q) = %q; want it refused", in, got)
		}
	}
}
