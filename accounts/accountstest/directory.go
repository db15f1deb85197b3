package accountstest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/accounts"
)

// TestDirectory checks that a Directory opens one account
// per address, on the plan given, and finds it again: a second opening,
// or concurrent ones, open nothing more. newDirectory returns an empty
// directory and the balance of an account it opened, as the ledger the
// directory opens accounts in reads it.
func TestDirectory(t *testing.T, newDirectory func(t *testing.T) (accounts.Directory, func(accountID string) (upscale.Balance, error))) {
	ctx := context.Background()
	plan := upscale.Plan{Name: "free", MonthlyImages: 10, MaxFileBytes: 10 << 20}

	t.Run("OpensOnceAndFinds", func(t *testing.T) {
		d, balance := newDirectory(t)
		email := "ada@example.com"
		if _, err := d.AccountOf(ctx, email); !errors.Is(err, upscale.ErrNotFound) {
			t.Fatalf("AccountOf an address with no account: %v, want ErrNotFound", err)
		}
		id, opened, err := d.OpenAccount(ctx, email, plan, "")
		if err != nil || !opened || id == "" || id == email {
			t.Fatalf("OpenAccount = %q, %v, %v; want a new account of its own ID", id, opened, err)
		}
		if got, err := d.AccountOf(ctx, email); err != nil || got != id {
			t.Errorf("AccountOf = %q, %v; want %q", got, err, id)
		}
		if b, err := balance(id); err != nil || b.Plan.Name != plan.Name || b.Free != plan.MonthlyImages || b.Credits != 0 || b.ShareBonus != 0 {
			t.Errorf("the opened account's balance: %+v, %v; want plan %q with its %d free images", b, err, plan.Name, plan.MonthlyImages)
		}
		again, opened, err := d.OpenAccount(ctx, email, plan, "someone")
		if err != nil || opened || again != id {
			t.Errorf("OpenAccount again = %q, %v, %v; want %q, not opened", again, opened, err, id)
		}
		other, opened, err := d.OpenAccount(ctx, "grace@example.com", plan, id)
		if err != nil || !opened || other == id {
			t.Errorf("OpenAccount of another address = %q, %v, %v; want another account", other, opened, err)
		}
	})

	t.Run("ConcurrentOpensOpenOne", func(t *testing.T) {
		d, _ := newDirectory(t)
		const callers = 8
		var wg sync.WaitGroup
		ids, opened, errs := make([]string, callers), make([]bool, callers), make([]error, callers)
		for i := range callers {
			wg.Go(func() { ids[i], opened[i], errs[i] = d.OpenAccount(ctx, "race@example.com", plan, "") })
		}
		wg.Wait()
		opens := 0
		for i := range callers {
			if errs[i] != nil {
				t.Fatalf("OpenAccount %d: %v", i, errs[i])
			}
			if ids[i] != ids[0] {
				t.Errorf("OpenAccount %d = %q, OpenAccount 0 = %q: want one account", i, ids[i], ids[0])
			}
			if opened[i] {
				opens++
			}
		}
		if opens != 1 {
			t.Errorf("%d of %d concurrent calls opened the account, want exactly 1", opens, callers)
		}
	})

	t.Run("OpenedListsByTime", func(t *testing.T) {
		d, _ := newDirectory(t)
		before := time.Now().Add(-time.Second)
		var ids []string
		for i := range 3 {
			id, _, err := d.OpenAccount(ctx, fmt.Sprintf("day%d@example.com", i), plan, "referrer")
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
			time.Sleep(2 * time.Millisecond) // apart in time
		}
		got, err := d.Opened(ctx, before)
		if err != nil || len(got) != 3 {
			t.Fatalf("Opened = %+v, %v; want the 3 accounts", got, err)
		}
		for i, e := range got {
			if e.AccountID != ids[i] || e.Email != fmt.Sprintf("day%d@example.com", i) || e.Referrer != "referrer" || e.Opened.Before(before) {
				t.Errorf("Opened[%d] = %+v; want %s for day%d@example.com, oldest first", i, e, ids[i], i)
			}
		}
		if later, err := d.Opened(ctx, time.Now().Add(time.Hour)); err != nil || len(later) != 0 {
			t.Errorf("Opened from an hour on = %+v, %v; want none", later, err)
		}
	})

	t.Run("ShareCodes", func(t *testing.T) {
		d, _ := newDirectory(t)
		id, _, err := d.OpenAccount(ctx, "sharer@example.com", plan, "")
		if err != nil {
			t.Fatal(err)
		}
		code, err := d.ShareCode(ctx, id)
		if err != nil || code == "" || strings.Contains(code, id) {
			t.Fatalf("ShareCode = %q, %v; want a code that is not the account", code, err)
		}
		if again, err := d.ShareCode(ctx, id); err != nil || again != code {
			t.Errorf("ShareCode again = %q, %v; want %q", again, err, code)
		}
		if got, err := d.SharedBy(ctx, code); err != nil || got != id {
			t.Errorf("SharedBy(%q) = %q, %v; want %q", code, got, err, id)
		}
		other, _, _ := d.OpenAccount(ctx, "other@example.com", plan, "")
		if otherCode, err := d.ShareCode(ctx, other); err != nil || otherCode == code {
			t.Errorf("another account's code = %q, %v; want its own", otherCode, err)
		}
		if _, err := d.SharedBy(ctx, "nosuchcode"); !errors.Is(err, upscale.ErrNotFound) {
			t.Errorf("SharedBy of an unknown code: %v, want ErrNotFound", err)
		}
	})

	t.Run("AccountsApart", func(t *testing.T) {
		d, _ := newDirectory(t)
		seen := map[string]bool{}
		for i := range 5 {
			id, _, err := d.OpenAccount(ctx, fmt.Sprintf("user%d@example.com", i), plan, "")
			if err != nil || seen[id] {
				t.Fatalf("account %d: %q, %v; want a new one", i, id, err)
			}
			seen[id] = true
		}
	})
}
