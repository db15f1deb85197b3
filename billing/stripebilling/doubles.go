package stripebilling

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/stripe/stripe-go/v84"

	"github.com/upscalekit/upscale"
)

// An account pays for one plan at a time: Checkout expires its open plan
// sessions before it makes another, and refuses one while its
// subscription lives. Two plan sessions paid in the same moment still
// make two subscriptions, each billed: syncSubscription logs and counts
// them (Stats.DoubleSubscriptions), and Doubles lists them, for the
// operator to cancel and refund all but one.

// Double is an account with more than one live subscription at Stripe.
type Double struct {
	AccountID, Customer string
	Subscriptions       []string
}

// Doubles asks Stripe for its live subscriptions and returns the accounts
// that have more than one, by account ID. Customers this host did not
// make are left out.
func (b *Billing) Doubles(ctx context.Context) ([]Double, error) {
	live := map[string][]string{} // by customer
	params := &stripe.SubscriptionListParams{ListParams: stripe.ListParams{Limit: stripe.Int64(100)}}
	for s, err := range b.client.V1Subscriptions.List(ctx, params) {
		if err != nil {
			return nil, fmt.Errorf("stripebilling: list the subscriptions: %w", err)
		}
		if s.Customer != nil && upscale.SubscriptionStatus(s.Status).Live() {
			live[s.Customer.ID] = append(live[s.Customer.ID], s.ID)
		}
	}
	var doubles []Double
	for customer, subs := range live {
		if len(subs) < 2 {
			continue
		}
		account, err := b.opts.Checkouts.CustomerAccount(ctx, customer)
		if errors.Is(err, upscale.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		doubles = append(doubles, Double{AccountID: account, Customer: customer, Subscriptions: subs})
	}
	slices.SortFunc(doubles, func(a, b Double) int { return strings.Compare(a.AccountID, b.AccountID) })
	return doubles, nil
}
