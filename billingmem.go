package upscale

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
)

// memoryBilling is what a MemoryLedger keeps of payments.
type memoryBilling struct {
	grants    map[string]*Purchase // by grant ID
	reversals map[string]Reversed  // by reversal ID
	terms     map[string]PlanTerms // by account
}

var _ BillingLedger = (*MemoryLedger)(nil)

// Grant implements BillingLedger.
func (l *MemoryLedger) Grant(_ context.Context, g Grant) (bool, error) {
	if err := checkGrant(g); err != nil {
		return false, err
	}
	now := l.lock()
	defer l.mu.Unlock()
	acc, err := l.account(g.AccountID, now)
	if err != nil {
		return false, err
	}
	if _, done := l.billing.grants[g.ID]; done {
		return false, nil
	}
	acc.add(g.Pool, "", g.Units)
	l.billing.grants[g.ID] = &Purchase{Grant: g}
	return true, nil
}

// checkGrant refuses a grant no payment makes.
func checkGrant(g Grant) error {
	if g.ID == "" || g.Units <= 0 || (g.Pool != PoolCredit && g.Pool != PoolShareBonus) {
		return fmt.Errorf("upscale: grant %q of %d %s: a grant needs an ID and a positive number of credits or share bonus", g.ID, g.Units, g.Pool)
	}
	return nil
}

// Reverse implements BillingLedger.
func (l *MemoryLedger) Reverse(_ context.Context, r Reversal) (Reversed, error) {
	if r.ID == "" || r.UpTo <= 0 {
		return Reversed{}, fmt.Errorf("upscale: reversal %q up to %d units: a reversal needs an ID and a positive number of units", r.ID, r.UpTo)
	}
	now := l.lock()
	defer l.mu.Unlock()
	if done, ok := l.billing.reversals[r.ID]; ok {
		return done, nil
	}
	p, ok := l.billing.grants[r.GrantID]
	if !ok {
		return Reversed{}, fmt.Errorf("grant %q: %w", r.GrantID, ErrNotFound)
	}
	acc, err := l.account(p.AccountID, now)
	if err != nil {
		return Reversed{}, err
	}
	balance := acc.Credits
	if p.Pool == PoolShareBonus {
		balance = acc.ShareBonus
	}
	done := ReversalOf(*p, r.UpTo, balance)
	acc.add(p.Pool, "", -done.Taken)
	p.Reversed.Taken += done.Taken
	p.Reversed.Shortfall += done.Shortfall
	l.billing.reversals[r.ID] = done
	return done, nil
}

// ApplyTerms implements BillingLedger.
func (l *MemoryLedger) ApplyTerms(_ context.Context, t PlanTerms) (bool, error) {
	now := l.lock()
	defer l.mu.Unlock()
	acc, err := l.account(t.AccountID, now)
	if err != nil {
		return false, err
	}
	if held, ok := l.billing.terms[t.AccountID]; ok && !t.Supersedes(held) {
		return false, nil
	}
	l.billing.terms[t.AccountID] = t
	acc.Plan = t.Plan
	return true, nil
}

// Terms implements BillingLedger.
func (l *MemoryLedger) Terms(_ context.Context, accountID string) (PlanTerms, error) {
	now := l.lock()
	defer l.mu.Unlock()
	if _, err := l.account(accountID, now); err != nil {
		return PlanTerms{}, err
	}
	return l.billing.terms[accountID], nil
}

// Purchases implements BillingLedger.
func (l *MemoryLedger) Purchases(_ context.Context, accountID string) ([]Purchase, error) {
	now := l.lock()
	defer l.mu.Unlock()
	if _, err := l.account(accountID, now); err != nil {
		return nil, err
	}
	var out []Purchase
	for _, p := range l.billing.grants {
		if p.AccountID == accountID {
			out = append(out, *p)
		}
	}
	slices.SortFunc(out, newestFirst)
	return out, nil
}

// newestFirst orders purchases by time, newest first, then by ID.
func newestFirst(a, b Purchase) int {
	return cmp.Or(b.At.Compare(a.At), cmp.Compare(a.ID, b.ID))
}

// MemoryCheckoutStore is a CheckoutStore held in process memory, for one
// process and for tests. It is safe for concurrent use.
type MemoryCheckoutStore struct {
	mu        sync.Mutex
	checkouts map[string]Checkout
	customers map[string]string // account → customer
	accounts  map[string]string // customer → account
}

var _ CheckoutStore = (*MemoryCheckoutStore)(nil)

// NewMemoryCheckoutStore returns an empty MemoryCheckoutStore.
func NewMemoryCheckoutStore() *MemoryCheckoutStore {
	return &MemoryCheckoutStore{checkouts: map[string]Checkout{}, customers: map[string]string{}, accounts: map[string]string{}}
}

// PutCheckout implements CheckoutStore.
func (s *MemoryCheckoutStore) PutCheckout(_ context.Context, c Checkout) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.checkouts[c.ID]; !ok {
		s.checkouts[c.ID] = c
	}
	return nil
}

// Checkout implements CheckoutStore.
func (s *MemoryCheckoutStore) Checkout(_ context.Context, id string) (Checkout, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.checkouts[id]
	if !ok {
		return Checkout{}, fmt.Errorf("checkout %q: %w", id, ErrNotFound)
	}
	return c, nil
}

// LinkCustomer implements CheckoutStore.
func (s *MemoryCheckoutStore) LinkCustomer(_ context.Context, accountID, customerID string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if held, ok := s.customers[accountID]; ok {
		return held, nil
	}
	s.customers[accountID], s.accounts[customerID] = customerID, accountID
	return customerID, nil
}

// Customer implements CheckoutStore.
func (s *MemoryCheckoutStore) Customer(_ context.Context, accountID string) (string, error) {
	return s.lookup(s.customers, "account", accountID)
}

// CustomerAccount implements CheckoutStore.
func (s *MemoryCheckoutStore) CustomerAccount(_ context.Context, customerID string) (string, error) {
	return s.lookup(s.accounts, "customer", customerID)
}

func (s *MemoryCheckoutStore) lookup(m map[string]string, what, id string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := m[id]
	if !ok {
		return "", fmt.Errorf("%s %q has no link: %w", what, id, ErrNotFound)
	}
	return v, nil
}
