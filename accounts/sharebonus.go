package accounts

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/upscalekit/upscale"
)

// ShareLedger is the ledger a ShareBonus reads and pays from: it grants
// share bonus once per ID, and tells which accounts were first charged
// since a time. MemoryLedger and sqlstore.Store are both.
type ShareLedger interface {
	upscale.BillingLedger
	upscale.FirstCharger
}

// ShareBonus pays the accounts whose share links open new accounts:
// PerSignup images of share bonus once a new account opened through an
// account's link has used its first image, at most MonthlyCap a month
// (UTC, the month of that first image). Pay makes one pass; the host
// runs it every minute or so (the standalone does). A pass reads only
// what happened since the last one: the accounts opened and the first
// charges (ShareLedger.FirstCharges), each from a little before the
// last pass began, so that a row written late is still seen; it keeps
// the referred accounts that have not yet used an image, and forgets
// them after Window. The first pass after a start reads back to the
// oldest of those, at most Window. Each payment is a Grant whose ID,
// "share:" and the new account, pays it once however often Pay runs, on
// however many replicas; replicas paying at once may pass the cap by a
// payment each. A person who opens a second account of their own
// through their own link is not told apart: the dashboard's OpensPerDay
// and the operator's listing (standalone accounts opened) are the check.
// It is safe for concurrent use; passes run one at a time.
type ShareBonus struct {
	opts ShareBonusOptions

	mu      sync.Mutex
	started bool
	read    time.Time            // where the next pass reads from
	waiting map[string]*referral // referred accounts not yet paid for, by ID
	settled map[string]time.Time // accounts paid for, or whose month was full, by when they opened
}

// referral is a referred account a ShareBonus waits on.
type referral struct {
	DirectoryEntry
	firstCharge time.Time // zero until it used an image
}

// lateWrites is how far before the last pass the next one reads, for a
// row stamped before it was committed, or on a replica whose clock is
// behind.
const lateWrites = 10 * time.Minute

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
	return &ShareBonus{opts: opts, waiting: map[string]*referral{}, settled: map[string]time.Time{}}, nil
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

// Terms are what one new account earns its sharer, and the most an
// account earns so in a month.
func (b *ShareBonus) Terms() (perSignup, monthlyCap int64) {
	return b.opts.PerSignup, b.opts.MonthlyCap
}

// shareGrant is the prefix of a share payment's grant ID.
const shareGrant = "share:"

// Pay pays what the new accounts opened within Window have earned since
// the last pass, and returns how many it paid. An account it cannot
// pay (its sharer gone, the ledger out of reach) is tried at the next
// pass and does not hold up the others: Pay returns their errors joined.
func (b *ShareBonus) Pay(ctx context.Context) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.opts.Now()
	if err := b.readSince(ctx, now); err != nil {
		return 0, err
	}
	// In the order of their first images, so that the month's cap goes to
	// the earliest, on every replica alike.
	var due []*referral
	for _, r := range b.waiting {
		if !r.firstCharge.IsZero() {
			due = append(due, r)
		}
	}
	slices.SortFunc(due, func(x, y *referral) int {
		return cmp.Or(x.firstCharge.Compare(y.firstCharge), cmp.Compare(x.AccountID, y.AccountID))
	})
	paid := 0
	var errs []error
	for _, r := range due {
		id := r.AccountID
		granted, err := b.pay(ctx, r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		delete(b.waiting, id)
		b.settled[id] = r.Opened
		if granted {
			paid++
		}
	}
	return paid, errors.Join(errs...)
}

// readSince reads the accounts opened and first charged since the last
// pass, and forgets those opened before Window. The caller holds b.mu.
func (b *ShareBonus) readSince(ctx context.Context, now time.Time) error {
	oldest := now.Add(-b.opts.Window)
	if !b.started {
		b.read = oldest
	}
	opened, err := b.opts.Directory.Opened(ctx, b.read)
	if err != nil {
		return fmt.Errorf("accounts: list the accounts opened: %w", err)
	}
	for _, e := range opened {
		if _, settled := b.settled[e.AccountID]; e.Referrer != "" && !settled && b.waiting[e.AccountID] == nil {
			b.waiting[e.AccountID] = &referral{DirectoryEntry: e}
		}
	}
	for id, r := range b.waiting {
		if r.Opened.Before(oldest) {
			delete(b.waiting, id)
		}
	}
	maps.DeleteFunc(b.settled, func(_ string, opened time.Time) bool { return opened.Before(oldest) })
	chargesFrom := b.read
	if !b.started {
		// Only the waiting accounts' charges matter, none before they opened.
		chargesFrom = now
		for _, r := range b.waiting {
			if r.Opened.Before(chargesFrom) {
				chargesFrom = r.Opened
			}
		}
	}
	firsts, err := b.opts.Ledger.FirstCharges(ctx, chargesFrom)
	if err != nil {
		return fmt.Errorf("accounts: list the first charges: %w", err)
	}
	for id, at := range firsts {
		if r := b.waiting[id]; r != nil {
			r.firstCharge = at
		}
	}
	b.started, b.read = true, now.Add(-lateWrites)
	return nil
}

// pay pays r's sharer if the month of r's first image has room, and
// reports whether it granted now.
func (b *ShareBonus) pay(ctx context.Context, r *referral) (bool, error) {
	earned, err := b.earned(ctx, r.Referrer, r.firstCharge)
	if err != nil {
		return false, err
	}
	if earned+b.opts.PerSignup > b.opts.MonthlyCap {
		return false, nil
	}
	granted, err := b.opts.Ledger.Grant(ctx, upscale.Grant{
		ID: shareGrant + r.AccountID, AccountID: r.Referrer, Pool: upscale.PoolShareBonus, Units: b.opts.PerSignup,
		Label: "a new account opened with your share link", Event: "share-link", At: r.firstCharge,
	})
	if err != nil {
		return false, fmt.Errorf("accounts: pay %s for %s: %w", r.Referrer, r.AccountID, err)
	}
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
