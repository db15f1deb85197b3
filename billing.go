package upscale

import (
	"context"
	"time"
)

// Billing fills the ledger from payments: a payment provider (Stripe, in
// billing/stripebilling) tells what was paid, refunded or subscribed to,
// and a BillingLedger applies it, each effect exactly once. The
// QuotaLedger stays the one authority on what an account may spend; the
// provider only fills it.

// Grant is units of one pool given to an account for a payment.
type Grant struct {
	// ID names the payment at its provider (a Checkout Session, an
	// invoice): an account is granted at most once per ID, however often
	// the payment is reported.
	ID        string
	AccountID string
	// Pool is PoolCredit or PoolShareBonus.
	Pool  Pool
	Units int64
	// Label says what was bought, for the account's purchase history
	// ("1,000 images").
	Label string
	// Event is the provider's event that reported the payment, recorded
	// with the grant.
	Event string
	// At is when the provider says the payment was made.
	At time.Time
}

// Reversal takes back units of a grant: a refund, or a dispute lost.
type Reversal struct {
	// ID names the refund or dispute at its provider: a grant is reversed
	// at most once per ID.
	ID      string
	GrantID string
	// UpTo is how many of the grant's units its reversals take back in
	// all, this one included: a refund's share of the whole payment
	// refunded so far, or all of a disputed grant's units. The reversal
	// takes what earlier ones did not, worked out where the ledger holds
	// its lock, so that two refunds handled at once take back their
	// total, not the sum of both.
	UpTo int64
	// Event is the provider's event that reported it, recorded with it.
	Event string
	At    time.Time
}

// Reversed is what a Reversal took back: Taken units from the pool's
// balance, and Shortfall units that the account had spent already and so
// could not be taken, recorded for the operator. A balance never goes
// below zero.
type Reversed struct {
	Taken, Shortfall int64
}

// SubscriptionStatus is a subscription's state at its provider.
type SubscriptionStatus string

// The states a subscription's plan is kept in (Active, Trialing, PastDue:
// a renewal payment failed and is being retried) or left in (the others),
// and the ones it never leaves (Canceled, IncompleteExpired: its first
// payment never came).
const (
	SubscriptionActive            SubscriptionStatus = "active"
	SubscriptionTrialing          SubscriptionStatus = "trialing"
	SubscriptionPastDue           SubscriptionStatus = "past_due"
	SubscriptionCanceled          SubscriptionStatus = "canceled"
	SubscriptionUnpaid            SubscriptionStatus = "unpaid"
	SubscriptionIncompleteExpired SubscriptionStatus = "incomplete_expired"
)

// Live reports whether a subscription in status s keeps its plan: while
// it is paid or on trial, and while a failed renewal is being retried.
func (s SubscriptionStatus) Live() bool {
	return s == SubscriptionActive || s == SubscriptionTrialing || s == SubscriptionPastDue
}

// Ended reports whether a subscription in status s is over for good: a
// provider never moves a canceled or expired subscription to another
// state, so any other state of it was read before it ended.
func (s SubscriptionStatus) Ended() bool {
	return s == SubscriptionCanceled || s == SubscriptionIncompleteExpired
}

// PlanTerms is an account's subscription as its provider stated it at
// AsOf, and the plan the account is on for it.
type PlanTerms struct {
	AccountID string
	// Plan is the plan the account is on under these terms: the
	// subscribed plan while the subscription lives, the account's plan
	// without one once it has ended.
	Plan Plan
	// Subscription names the subscription at its provider.
	Subscription string
	Status       SubscriptionStatus
	// PaidThrough is the end of the period paid for: the renewal date,
	// or the end when CancelAtPeriodEnd.
	PaidThrough       time.Time
	CancelAtPeriodEnd bool
	// AsOf is when the read of this state began: terms older than those
	// an account holds change nothing, so neither an event delivered late
	// nor a slow read undoes a newer state.
	AsOf time.Time
	// Event is the provider's event that reported the state.
	Event string
}

// Supersedes reports whether terms t replace held, the terms an account
// holds: t are as of later, and do not say that a subscription held as
// Ended is not (it never lives again, so t were read before it ended,
// whatever their AsOf). Every BillingLedger applies this rule.
func (t PlanTerms) Supersedes(held PlanTerms) bool {
	return t.AsOf.After(held.AsOf) && !(held.Subscription == t.Subscription && held.Status.Ended() && !t.Status.Ended())
}

// Purchase is a grant as the account's purchase history shows it, with
// what was reversed of it.
type Purchase struct {
	Grant
	Reversed Reversed
}

// BillingLedger is a QuotaLedger that payments fill. Each method applies
// one effect of a payment exactly once: a repeat of the same ID, from a
// provider's retry or from 50 concurrent deliveries, also across
// processes sharing the ledger's storage, changes nothing more, and the
// effect and the record of the provider's event are written together or
// not at all. MemoryLedger and sqlstore.Store implement it.
type BillingLedger interface {
	QuotaLedger
	// Grant adds g.Units to g.Pool of g.AccountID, unless a grant with
	// g.ID was made already: it reports whether this call granted. It
	// returns an error wrapping ErrNotFound for an unknown account.
	Grant(ctx context.Context, g Grant) (granted bool, err error)
	// Reverse takes back what grant r.GrantID has not had reversed, up to
	// r.UpTo units in all (ReversalOf), from the grant's pool down to
	// zero and no further; what could not be taken is the Shortfall. A
	// repeat of r.ID returns what the first took, and takes nothing more.
	// It returns an error wrapping ErrNotFound for an unknown grant.
	Reverse(ctx context.Context, r Reversal) (Reversed, error)
	// ApplyTerms puts t.AccountID on t.Plan and keeps t, unless the
	// account holds terms that t do not supersede (Supersedes): terms as
	// of t.AsOf or later, or terms in which t.Subscription has Ended
	// while in t it has not, whatever t.AsOf. It reports whether it
	// applied them. Units already reserved keep their reservations. It
	// returns an error wrapping ErrNotFound for an unknown account.
	ApplyTerms(ctx context.Context, t PlanTerms) (applied bool, err error)
	// Terms returns the terms accountID holds, the zero PlanTerms when it
	// never had a subscription. It returns an error wrapping ErrNotFound
	// for an unknown account.
	Terms(ctx context.Context, accountID string) (PlanTerms, error)
	// Purchases returns accountID's grants, newest first, with what was
	// reversed of each. It returns an error wrapping ErrNotFound for an
	// unknown account.
	Purchases(ctx context.Context, accountID string) ([]Purchase, error)
}

// ReversalOf is what reversing grant p up to upTo units in all takes from
// its pool, which holds balance: what p's reversals have not taken back
// yet, up to upTo (and never more than p's units), and no more than the
// balance, the rest being the shortfall. Every BillingLedger applies
// this rule.
func ReversalOf(p Purchase, upTo, balance int64) Reversed {
	reversed := p.Reversed.Taken + p.Reversed.Shortfall
	units := max(min(upTo, p.Units)-reversed, 0)
	taken := min(units, max(balance, 0))
	return Reversed{Taken: taken, Shortfall: units - taken}
}

// Offer is something on sale: Units credits for a one-off payment (a
// pack), or Plan for as long as a subscription lives.
type Offer struct {
	// Price names it at the payment provider.
	Price string
	// Label says what it is, on the Billing page and in the purchase
	// history ("1,000 images").
	Label string
	Units int64
	Plan  Plan
	// Cost is what it costs, as the provider's price says: the zero Cost
	// until the seller has read it, or when the price has no fixed
	// amount.
	Cost Cost
}

// Subscription reports whether o is a plan, sold as a subscription.
func (o Offer) Subscription() bool { return o.Plan.Name != "" }

// Cost is a price's amount, and a plan's billing period.
type Cost struct {
	// Amount is in the currency's smallest unit: cents of USD, yen.
	Amount int64
	// Currency is the ISO 4217 code, in lower case ("usd"); "" when the
	// cost is unknown.
	Currency string
	// Interval is a plan's period, "day", "week", "month" or "year", and
	// IntervalCount how many of them one payment pays for; "" and 0 for a
	// pack.
	Interval      string
	IntervalCount int64
}

// Known reports whether c says what something costs.
func (c Cost) Known() bool { return c.Currency != "" }

// Checkout is what an account was offered at a payment provider's
// checkout, recorded when the checkout is made: once paid, it grants
// what was offered here, never what the checkout's metadata, which a
// caller could shape, says.
type Checkout struct {
	// ID names the checkout at its provider (a Checkout Session).
	ID        string
	AccountID string
	// Price names what was bought at the provider.
	Price string
	// Units of PoolCredit, for a pack; zero for a subscription.
	Units int64
	// Plan, for a subscription; the zero Plan for a pack.
	Plan  Plan
	Label string
	At    time.Time
}

// CheckoutStore keeps what a payment provider's checkouts offered and
// which of the provider's customers each account is. MemoryCheckoutStore
// and sqlstore.Store implement it.
type CheckoutStore interface {
	// PutCheckout records c, replacing nothing: a second record of c.ID
	// is ignored.
	PutCheckout(ctx context.Context, c Checkout) error
	// Checkout returns the checkout recorded as id. It returns an error
	// wrapping ErrNotFound when none was.
	Checkout(ctx context.Context, id string) (Checkout, error)
	// LinkCustomer records customerID as accountID's customer unless the
	// account has one already, and returns the one it has: an account is
	// one customer, also when two of its checkouts are made at once.
	LinkCustomer(ctx context.Context, accountID, customerID string) (string, error)
	// Customer returns accountID's customer, and CustomerAccount the
	// account a customer is. Both return an error wrapping ErrNotFound
	// when none is linked.
	Customer(ctx context.Context, accountID string) (string, error)
	CustomerAccount(ctx context.Context, customerID string) (string, error)
}
