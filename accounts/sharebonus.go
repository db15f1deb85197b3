package accounts

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/upscalekit/upscale"
)

// ShareLedger is the ledger a ShareBonus reads and pays from: it grants
// share bonus once per ID, and tells whether an account used images.
// MemoryLedger and sqlstore.Store are both.
type ShareLedger interface {
	upscale.BillingLedger
	upscale.UsageReporter
}

// ShareBonus pays the accounts whose share links open new accounts:
// PerSignup images of share bonus once a new account opened through an
// account's link has used its first image, at most MonthlyCap a month
// (UTC, the month of that first image). Pay makes one pass; the host
// runs it every minute or so (the standalone does). Each payment is a
// Grant whose ID, "share:" and the new account, pays it once however
// often Pay runs, on however many replicas; replicas paying at once may
// pass the cap by a payment each. A person who opens a second account of
// their own through their own link is not told apart: the dashboard's
// OpensPerDay and the operator's listing (standalone accounts opened) are
// the check. It is safe for concurrent use.
type ShareBonus struct {
	opts ShareBonusOptions

	mu   sync.Mutex
	done map[string]time.Time // new accounts paid for, or whose month was full, by when they opened
}

// ShareBonusOptions configures a ShareBonus. Directory, Ledger,
// PerSignup and MonthlyCap are required.
type ShareBonusOptions struct {
	// Directory lists the accounts opened and who brought them.
	Directory Directory
	// Ledger is where the bonus is paid, and whether an account used
	// images is read.
	Ledger ShareLedger
	// PerSignup is the images one new account earns its sharer; MonthlyCap
	// the most an account earns so in a month. Both above zero.
	PerSignup, MonthlyCap int64
	// Window is how long after it opened a new account's first image
	// still earns. Zero means 90 days.
	Window time.Duration
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
}

// NewShareBonus returns a ShareBonus, or an error naming what opts lack.
func NewShareBonus(opts ShareBonusOptions) (*ShareBonus, error) {
	switch {
	case opts.Directory == nil || opts.Ledger == nil:
		return nil, errors.New("accounts: a ShareBonus needs a Directory and a Ledger")
	case opts.PerSignup <= 0 || opts.MonthlyCap <= 0:
		return nil, errors.New("accounts: a ShareBonus needs PerSignup and MonthlyCap above zero")
	case opts.Window < 0:
		return nil, errors.New("accounts: a ShareBonus's Window cannot be negative")
	}
	opts.Window = cmp.Or(opts.Window, 90*24*time.Hour)
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &ShareBonus{opts: opts, done: map[string]time.Time{}}, nil
}

// Share is what an account's share link is and earns.
type Share struct {
	// Code is the opaque part of the link (Directory.ShareCode).
	Code string
	// PerSignup and MonthlyCap are the ShareBonus's terms; Earned is what
	// the link earned in the month asked for.
	PerSignup, MonthlyCap, Earned int64
}

// Share returns accountID's share link, made on the first call, and what
// it earned in the month of at.
func (b *ShareBonus) Share(ctx context.Context, accountID string, at time.Time) (Share, error) {
	code, err := b.opts.Directory.ShareCode(ctx, accountID)
	if err != nil {
		return Share{}, fmt.Errorf("accounts: the share code of %s: %w", accountID, err)
	}
	earned, err := b.earned(ctx, accountID, at)
	if err != nil {
		return Share{}, err
	}
	return Share{Code: code, PerSignup: b.opts.PerSignup, MonthlyCap: b.opts.MonthlyCap, Earned: earned}, nil
}

// shareGrant is the prefix of a share payment's grant ID.
const shareGrant = "share:"

// Pay pays what the new accounts opened within Window have earned since
// the last pass, and returns how many it paid. An account it cannot
// pay (its sharer gone, the ledger out of reach) is tried at the next
// pass and does not hold up the others: Pay returns their errors joined.
func (b *ShareBonus) Pay(ctx context.Context) (int, error) {
	now := b.opts.Now()
	since := now.Add(-b.opts.Window)
	opened, err := b.opts.Directory.Opened(ctx, since)
	if err != nil {
		return 0, fmt.Errorf("accounts: list the accounts opened: %w", err)
	}
	b.forgetBefore(since)
	paid := 0
	var errs []error
	for _, e := range opened {
		if e.Referrer == "" || b.isDone(e.AccountID) {
			continue
		}
		granted, err := b.pay(ctx, e, now)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if granted {
			paid++
		}
	}
	return paid, errors.Join(errs...)
}

// pay pays e's sharer if e has used its first image and the month of that
// image has room, and reports whether it granted now.
func (b *ShareBonus) pay(ctx context.Context, e DirectoryEntry, now time.Time) (bool, error) {
	used, err := b.opts.Ledger.UsageByDay(ctx, e.AccountID, e.Opened, now)
	if err != nil {
		return false, fmt.Errorf("accounts: the usage of %s: %w", e.AccountID, err)
	}
	if len(used) == 0 {
		return false, nil // no image yet
	}
	first := used[0].Day
	earned, err := b.earned(ctx, e.Referrer, first)
	if err != nil {
		return false, err
	}
	if earned+b.opts.PerSignup > b.opts.MonthlyCap {
		b.markDone(e)
		return false, nil
	}
	granted, err := b.opts.Ledger.Grant(ctx, upscale.Grant{
		ID: shareGrant + e.AccountID, AccountID: e.Referrer, Pool: upscale.PoolShareBonus, Units: b.opts.PerSignup,
		Label: "a new account opened with your share link", Event: "share-link", At: first,
	})
	if err != nil {
		return false, fmt.Errorf("accounts: pay %s for %s: %w", e.Referrer, e.AccountID, err)
	}
	b.markDone(e)
	return granted, nil
}

// earned is what accountID's share link earned it in the month of at.
func (b *ShareBonus) earned(ctx context.Context, accountID string, at time.Time) (int64, error) {
	purchases, err := b.opts.Ledger.Purchases(ctx, accountID)
	if err != nil {
		return 0, fmt.Errorf("accounts: what %s earned: %w", accountID, err)
	}
	var units int64
	for _, p := range purchases {
		if strings.HasPrefix(p.ID, shareGrant) && upscale.Month(p.At) == upscale.Month(at) {
			units += p.Units
		}
	}
	return units, nil
}

func (b *ShareBonus) isDone(account string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, done := b.done[account]
	return done
}

func (b *ShareBonus) markDone(e DirectoryEntry) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done[e.AccountID] = e.Opened
}

// forgetBefore forgets the accounts done that opened before since, which
// no pass lists again.
func (b *ShareBonus) forgetBefore(since time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for account, opened := range b.done {
		if opened.Before(since) {
			delete(b.done, account)
		}
	}
}
