package stripebilling

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/stripe/stripe-go/v84"
)

// Events are the webhook events Billing acts on: the webhook endpoint at
// Stripe must send them (Webhook says what each does).
var Events = []string{
	"checkout.session.completed", "checkout.session.async_payment_succeeded", "checkout.session.async_payment_failed",
	"invoice.paid", "invoice.payment_failed",
	"customer.subscription.created", "customer.subscription.updated", "customer.subscription.deleted",
	"charge.refunded", "charge.dispute.created", "charge.dispute.closed",
}

// Check asks Stripe whether it is set up to sell as Billing is: the key
// works, each price on offer exists, is active and is one-time for a
// pack and recurring for a plan, and a webhook endpoint at webhookURL is
// enabled for Events with stripe-go's API version (Webhook refuses
// events of another). It returns one sentence per problem, none when all
// is well; err only when Stripe could not be asked. The prices it read
// are what Offers says they cost from then on.
func (b *Billing) Check(ctx context.Context, webhookURL string) (problems []string, err error) {
	for _, o := range b.opts.Offers {
		p, err := b.readPrice(ctx, o.Price)
		if stripeErr, ok := errors.AsType[*stripe.Error](err); ok && stripeErr.HTTPStatusCode == http.StatusNotFound {
			problems = append(problems, fmt.Sprintf("price %s (%s) does not exist in this Stripe account", o.Price, o.Label))
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("stripebilling: read price %s: %w", o.Price, err)
		}
		want := stripe.PriceTypeOneTime
		if o.Subscription() {
			want = stripe.PriceTypeRecurring
		}
		if !p.Active {
			problems = append(problems, fmt.Sprintf("price %s (%s) is archived", o.Price, o.Label))
		}
		if p.Type != want {
			problems = append(problems, fmt.Sprintf("price %s (%s) is %s; a %s needs a %s price", o.Price, o.Label, p.Type, kind(o.Subscription()), want))
		}
	}
	var endpoint *stripe.WebhookEndpoint
	for e, err := range b.client.V1WebhookEndpoints.List(ctx, &stripe.WebhookEndpointListParams{}) {
		if err != nil {
			return nil, fmt.Errorf("stripebilling: list the webhook endpoints: %w", err)
		}
		if e.URL == webhookURL {
			endpoint = e
			break
		}
	}
	if endpoint == nil {
		return append(problems, fmt.Sprintf("no webhook endpoint sends to %s: add one, with API version %s and these events: %v", webhookURL, stripe.APIVersion, Events)), nil
	}
	if endpoint.Status != "enabled" {
		problems = append(problems, fmt.Sprintf("the webhook endpoint %s is %s", endpoint.ID, endpoint.Status))
	}
	if endpoint.APIVersion != stripe.APIVersion {
		problems = append(problems, fmt.Sprintf("the webhook endpoint %s sends API version %q; its events are refused unless it sends %s", endpoint.ID, endpoint.APIVersion, stripe.APIVersion))
	}
	if !slices.Contains(endpoint.EnabledEvents, "*") {
		for _, e := range Events {
			if !slices.Contains(endpoint.EnabledEvents, e) {
				problems = append(problems, fmt.Sprintf("the webhook endpoint %s does not send %s", endpoint.ID, e))
			}
		}
	}
	return problems, nil
}

func kind(subscription bool) string {
	if subscription {
		return "plan"
	}
	return "pack"
}
