package accounts

import (
	"context"
	"errors"
	"fmt"
	"net/mail"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/upscalekit/upscale"
)

// Directory keeps the account of each email address that opened
// one through the dashboard: sign-up and sign-in by email. sqlstore.Store
// is one (for replicas), MemoryDirectory one for a single process, and
// accountstest.TestDirectory is the contract. Addresses are given
// as Address returns them; an address is stored, and never shown to
// another account.
type Directory interface {
	// AccountOf returns the account opened for the address email, and an
	// error wrapping upscale.ErrNotFound when none was.
	AccountOf(ctx context.Context, email string) (string, error)
	// OpenAccount opens a new account for email on plan, and returns it
	// and true; referrer, when not empty, is the account whose share link
	// brought it. When email has an account already it returns that one
	// and false, and opens nothing: of concurrent calls for one address,
	// exactly one opens. The account's ID is new, unguessable, and not
	// the address. sqlstore.Store needs the plan saved (PutPlan) before.
	OpenAccount(ctx context.Context, email string, plan upscale.Plan, referrer string) (accountID string, opened bool, err error)
	// Opened lists the accounts opened at or after since, the oldest
	// first: for the operator, who sees who opened accounts when, and
	// for the cap on the accounts opened each day.
	Opened(ctx context.Context, since time.Time) ([]DirectoryEntry, error)
	// ShareCode returns accountID's share code, made on the first call:
	// the opaque part of its share link, never its ID.
	ShareCode(ctx context.Context, accountID string) (string, error)
	// SharedBy returns the account whose share code is code, and an error
	// wrapping upscale.ErrNotFound when there is none.
	SharedBy(ctx context.Context, code string) (string, error)
}

// NewShareCode returns a new share code: 16 random letters and digits.
func NewShareCode() string { return upscale.NewKey("")[:16] }

// accountPrefix begins the ID of an account opened by email: "acct_" and
// 26 random letters and digits (upscale.NewKey).
const accountPrefix = "acct_"

// longestAddress is the longest email address taken, as SMTP's path limit
// allows (RFC 5321, 4.5.3.1.3).
const longestAddress = 254

// errBadAddress is Address's refusal.
var errBadAddress = errors.New("not an email address")

// Address returns email as the directory keeps it: a bare address
// (name@domain, no display name nor angle brackets) at a domain name with
// a dot (no [IP literal], no intranet host), case-folded, so that one
// mailbox is one account however its holder types it; an error for
// anything else. Case-folding the local part goes beyond what RFC 5321
// promises, as every large mail provider does; nothing else is folded: a
// "+tag" or a dot may name another person's mailbox at some provider.
func Address(email string) (string, error) {
	email = strings.TrimSpace(email)
	parsed, err := mail.ParseAddress(email)
	_, domain, _ := strings.Cut(email, "@")
	if err != nil || parsed.Name != "" || parsed.Address != email || len(email) > longestAddress ||
		strings.Count(email, "@") != 1 || strings.ContainsAny(email, " \t\r\n\"") ||
		!strings.Contains(strings.Trim(domain, "."), ".") || strings.HasPrefix(domain, "[") {
		return "", fmt.Errorf("accounts: %q: %w", email, errBadAddress)
	}
	return strings.ToLower(email), nil
}

var _ Directory = (*MemoryDirectory)(nil)

// MemoryDirectory is a Directory in process memory that opens
// accounts in a MemoryLedger, for one process and tests. It is safe for
// concurrent use.
type MemoryDirectory struct {
	ledger *upscale.MemoryLedger
	now    func() time.Time

	mu       sync.Mutex
	accounts map[string]DirectoryEntry // by address
	codes    map[string]string         // share code by account
	sharers  map[string]string         // account by share code
}

// DirectoryEntry is what a directory keeps of an address.
type DirectoryEntry struct {
	Email, AccountID, Referrer string
	Opened                     time.Time
}

// MemoryDirectoryOptions configures a MemoryDirectory.
type MemoryDirectoryOptions struct {
	// Ledger is where it opens accounts; required.
	Ledger *upscale.MemoryLedger
	// Now is its clock. Nil means time.Now.
	Now func() time.Time
}

// NewMemoryDirectory returns an empty MemoryDirectory that opens accounts
// in opts.Ledger.
func NewMemoryDirectory(opts MemoryDirectoryOptions) *MemoryDirectory {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &MemoryDirectory{ledger: opts.Ledger, now: opts.Now, accounts: map[string]DirectoryEntry{}, codes: map[string]string{}, sharers: map[string]string{}}
}

// AccountOf implements Directory.
func (d *MemoryDirectory) AccountOf(_ context.Context, email string) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.accounts[email]
	if !ok {
		return "", fmt.Errorf("accounts: no account for the address: %w", upscale.ErrNotFound)
	}
	return e.AccountID, nil
}

// OpenAccount implements Directory.
func (d *MemoryDirectory) OpenAccount(ctx context.Context, email string, plan upscale.Plan, referrer string) (string, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e, ok := d.accounts[email]; ok {
		return e.AccountID, false, nil
	}
	id := upscale.NewKey(accountPrefix)
	if err := d.ledger.PutAccount(ctx, upscale.Account{ID: id, Plan: plan}); err != nil {
		return "", false, err
	}
	d.accounts[email] = DirectoryEntry{Email: email, AccountID: id, Referrer: referrer, Opened: d.now()}
	return id, true, nil
}

// ShareCode implements Directory.
func (d *MemoryDirectory) ShareCode(_ context.Context, accountID string) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	code, ok := d.codes[accountID]
	if !ok {
		code = NewShareCode()
		d.codes[accountID], d.sharers[code] = code, accountID
	}
	return code, nil
}

// SharedBy implements Directory.
func (d *MemoryDirectory) SharedBy(_ context.Context, code string) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	account, ok := d.sharers[code]
	if !ok {
		return "", fmt.Errorf("accounts: no account shares the code: %w", upscale.ErrNotFound)
	}
	return account, nil
}

// Opened implements Directory.
func (d *MemoryDirectory) Opened(_ context.Context, since time.Time) ([]DirectoryEntry, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []DirectoryEntry
	for _, e := range d.accounts {
		if !e.Opened.Before(since) {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b DirectoryEntry) int { return a.Opened.Compare(b.Opened) })
	return out, nil
}
