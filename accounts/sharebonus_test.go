package accounts_test

import (
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/accounts"
)

// TestNewShareBonus: a ShareBonus is made whole or not at all.
func TestNewShareBonus(t *testing.T) {
	ledger := upscale.NewMemoryLedger(upscale.LedgerOptions{})
	directory := accounts.NewMemoryDirectory(accounts.MemoryDirectoryOptions{Ledger: ledger})
	whole := accounts.ShareBonusOptions{Directory: directory, Ledger: ledger, PerSignup: 5, MonthlyCap: 50}
	if _, err := accounts.NewShareBonus(whole); err != nil {
		t.Fatalf("whole options: %v", err)
	}
	for name, change := range map[string]func(*accounts.ShareBonusOptions){
		"NoDirectory":    func(o *accounts.ShareBonusOptions) { o.Directory = nil },
		"NoLedger":       func(o *accounts.ShareBonusOptions) { o.Ledger = nil },
		"NoPerSignup":    func(o *accounts.ShareBonusOptions) { o.PerSignup = 0 },
		"NoMonthlyCap":   func(o *accounts.ShareBonusOptions) { o.MonthlyCap = 0 },
		"NegativeWindow": func(o *accounts.ShareBonusOptions) { o.Window = -time.Hour },
	} {
		t.Run(name, func(t *testing.T) {
			opts := whole
			change(&opts)
			if b, err := accounts.NewShareBonus(opts); err == nil {
				t.Errorf("NewShareBonus = %v, nil; want a refusal", b)
			}
		})
	}
}
