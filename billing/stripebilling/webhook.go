package stripebilling

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/stripe/stripe-go/v84"
	"github.com/stripe/stripe-go/v84/webhook"

	"github.com/upscalekit/upscale"
)

// maxEventBytes caps a webhook event's body; Stripe's are a few KiB.
const maxEventBytes = 256 << 10

// Webhook is the endpoint Stripe sends its events to. An event whose
// signature does not verify (the webhook secret, within webhook's 300 s
// tolerance, for stripe-go's API version) is answered 400 and changes
// nothing; it is counted (Stats.RefusedEvents), and logged in one line a
// minute at most, since anyone can send them. An event that could not be
// applied for a reason that may pass (the ledger or Stripe out of reach)
// is answered 500, so that Stripe sends it again; every effect is
// idempotent, so a repeat changes nothing more. One for an account or grant the ledger no longer has is logged
// at ERROR, for the operator to resolve with the customer by hand, and answered 200: no
// retry could apply it. Everything else is answered 200, events of types
// it does not act on included. It acts on:
//
//   - checkout.session.completed and checkout.session.async_payment_succeeded:
//     a paid pack is granted; a subscription's state is applied
//     (syncSubscription). async_payment_failed grants nothing.
//   - invoice.paid, invoice.payment_failed, customer.subscription.created,
//     .updated and .deleted: the subscription's current state is read from
//     Stripe and applied, never a change in arrival order. A plan is kept
//     while past_due, and while another subscription of the account lives;
//     a canceled subscription never becomes live again.
//   - charge.refunded: the grant is reversed pro rata to what was refunded
//     in all, once per refunded amount.
//   - charge.dispute.created: the grant is reversed whole, once per charge;
//     charge.dispute.closed, won: what the dispute took is granted back.
//     An inquiry (a dispute whose status is warning_*) withdraws no money
//     and changes nothing.
func (b *Billing) Webhook() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "POST Stripe's events here.", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxEventBytes))
		if err != nil {
			http.Error(w, "The event is too large or was cut short.", http.StatusBadRequest)
			return
		}
		event, err := webhook.ConstructEvent(body, r.Header.Get("Stripe-Signature"), b.opts.WebhookSecret)
		if err != nil {
			b.refuse(err)
			http.Error(w, "The event's signature does not verify: "+err.Error(), http.StatusBadRequest)
			return
		}
		err = b.apply(r.Context(), event)
		switch {
		case errors.Is(err, upscale.ErrNotFound):
			// No retry can apply it: Stripe would send it for three days
			// and then disable the endpoint.
			b.opts.Logger.Error("stripebilling: an event for an account or grant this host no longer has; resolve it with the customer by hand", "event", event.ID, "type", event.Type, "err", err)
		case err != nil:
			b.opts.Logger.Error("stripebilling: an event not applied; Stripe sends it again", "event", event.ID, "type", event.Type, "err", err)
			http.Error(w, "The event could not be applied now; send it again.", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
}

// refusalLogEvery is the least time between two log lines about refused
// events: anyone can send them, as fast as they like.
const refusalLogEvery = time.Minute

// refusalLog is when the last line about refused events was written,
// and the count it was written at.
type refusalLog struct {
	at    atomic.Int64 // Unix nanoseconds; 0 before the first
	count atomic.Uint64
}

// refuse counts an event refused for err, its signature's fault, and
// logs at most one line a refusalLogEvery, with how many were refused
// since the line before: the first refusal writes one, so that a wrong
// webhook secret shows at once.
func (b *Billing) refuse(err error) {
	n := b.refused.Add(1)
	now, last := b.opts.Now().UnixNano(), b.refusalLog.at.Load()
	if last != 0 && now-last < int64(refusalLogEvery) || !b.refusalLog.at.CompareAndSwap(last, now) {
		return
	}
	b.opts.Logger.Warn("stripebilling: webhook events refused: their signature does not verify (forged, replayed, or signed with another webhook secret)",
		"refused", n-b.refusalLog.count.Swap(n), "total", n, "err", err)
}

// apply carries event out.
func (b *Billing) apply(ctx context.Context, event stripe.Event) error {
	switch event.Type {
	case "checkout.session.completed", "checkout.session.async_payment_succeeded":
		var s stripe.CheckoutSession
		if err := object(event, &s); err != nil {
			return err
		}
		_, err := b.applySession(ctx, &s, event.ID, time.Unix(event.Created, 0).UTC())
		return err
	case "invoice.paid", "invoice.payment_failed":
		var inv stripe.Invoice
		if err := object(event, &inv); err != nil {
			return err
		}
		if inv.Parent == nil || inv.Parent.SubscriptionDetails == nil || inv.Parent.SubscriptionDetails.Subscription == nil {
			return nil // no subscription's
		}
		return b.syncSubscription(ctx, inv.Parent.SubscriptionDetails.Subscription.ID, event.ID)
	case "customer.subscription.created", "customer.subscription.updated", "customer.subscription.deleted":
		var sub stripe.Subscription
		if err := object(event, &sub); err != nil {
			return err
		}
		return b.syncSubscription(ctx, sub.ID, event.ID)
	case "charge.refunded":
		var ch stripe.Charge
		if err := object(event, &ch); err != nil {
			return err
		}
		return b.refund(ctx, &ch, event)
	case "charge.dispute.created", "charge.dispute.closed":
		var d stripe.Dispute
		if err := object(event, &d); err != nil {
			return err
		}
		return b.dispute(ctx, &d, event)
	}
	return nil
}

// object decodes event's object into v.
func object(event stripe.Event, v any) error {
	if event.Data == nil {
		return fmt.Errorf("stripebilling: event %s has no object", event.ID)
	}
	return json.Unmarshal(event.Data.Raw, v)
}

// chargeGrant returns the grant a charge paid for: the pack of the
// Checkout Session of its payment intent, as this host recorded it. It
// returns false for a charge of no session of this host's.
func (b *Billing) chargeGrant(ctx context.Context, ch *stripe.Charge) (upscale.Checkout, bool, error) {
	if ch.PaymentIntent == nil {
		return upscale.Checkout{}, false, nil
	}
	var first *stripe.CheckoutSession
	for s, err := range b.client.V1CheckoutSessions.List(ctx, &stripe.CheckoutSessionListParams{PaymentIntent: stripe.String(ch.PaymentIntent.ID)}) {
		if err != nil {
			return upscale.Checkout{}, false, fmt.Errorf("stripebilling: find the charge's session: %w", err)
		}
		first = s
		break
	}
	if first == nil {
		return upscale.Checkout{}, false, nil
	}
	record, err := b.opts.Checkouts.Checkout(ctx, first.ID)
	if errors.Is(err, upscale.ErrNotFound) || err == nil && record.Units == 0 {
		return upscale.Checkout{}, false, nil
	}
	return record, err == nil, err
}

// refund reverses ch's grant pro rata to what ch has had refunded in
// all: the ledger takes back what that share stands for less what
// reversals took already, under its own lock, once per refunded total.
func (b *Billing) refund(ctx context.Context, ch *stripe.Charge, event stripe.Event) error {
	record, ok, err := b.chargeGrant(ctx, ch)
	if !ok || ch.Amount <= 0 {
		return err
	}
	share := refundedShare(record, ch)
	if share <= 0 {
		return nil
	}
	_, err = b.opts.Ledger.Reverse(ctx, upscale.Reversal{
		ID: fmt.Sprintf("refund:%s:%d", ch.ID, ch.AmountRefunded), GrantID: record.ID, UpTo: share,
		Event: event.ID, At: time.Unix(event.Created, 0).UTC(),
	})
	if err != nil {
		return b.notGrantedYet(ctx, record, err)
	}
	return b.refundWon(ctx, ch, record, event)
}

// notGrantedYet turns the ledger's ErrNotFound for record's grant, which
// a reversal's event meets when it comes before the payment's (Stripe
// does not keep their order, and a payment's event may be sent again
// later), into an error Stripe is answered 500 for, so that it sends the
// reversal again once the grant is made. Only an account that is gone
// stays ErrNotFound, answered 200 (Webhook).
func (b *Billing) notGrantedYet(ctx context.Context, record upscale.Checkout, err error) error {
	if !errors.Is(err, upscale.ErrNotFound) {
		return err
	}
	if _, balanceErr := b.opts.Ledger.Balance(ctx, record.AccountID); errors.Is(balanceErr, upscale.ErrNotFound) {
		return err
	}
	return fmt.Errorf("stripebilling: checkout %s is not granted yet: %v", record.ID, err)
}

// refundedShare is the units of record that ch's refunds stand for,
// rounded; none for a charge of nothing.
func refundedShare(record upscale.Checkout, ch *stripe.Charge) int64 {
	if ch.Amount <= 0 {
		return 0
	}
	return (record.Units*min(ch.AmountRefunded, ch.Amount) + ch.Amount/2) / ch.Amount
}

// wonGrantID names the grant that gives back what a dispute of charge
// took, once it is won: a charge has at most one dispute.
func wonGrantID(charge string) string { return "dispute-won:" + charge }

// refundWon reverses, from what a won dispute of ch gave back, the part of
// ch's refunds that its first grant no longer held: the dispute took all
// the refunds before it had left, so a refund after it, or one whose
// event came before the dispute's end, is taken from the grant that gave
// it back. Without a won dispute it does nothing.
func (b *Billing) refundWon(ctx context.Context, ch *stripe.Charge, record upscale.Checkout, event stripe.Event) error {
	purchases, err := b.opts.Ledger.Purchases(ctx, record.AccountID)
	if err != nil || !slices.ContainsFunc(purchases, func(p upscale.Purchase) bool { return p.ID == wonGrantID(ch.ID) }) {
		return err
	}
	at := time.Unix(event.Created, 0).UTC()
	// A repeat of the dispute's reversal, made already: what it took.
	disputed, err := b.opts.Ledger.Reverse(ctx, disputeReversal(ch, record, event.ID, at))
	if err != nil {
		return err
	}
	refundedBefore := record.Units - disputed.Taken - disputed.Shortfall
	upTo := refundedShare(record, ch) - refundedBefore
	if upTo <= 0 {
		return nil
	}
	_, err = b.opts.Ledger.Reverse(ctx, upscale.Reversal{
		ID: fmt.Sprintf("refund:%s:%d:won", ch.ID, ch.AmountRefunded), GrantID: wonGrantID(ch.ID), UpTo: upTo,
		Event: event.ID, At: at,
	})
	return err
}

// disputeReversal takes back all of record's grant that a dispute of ch
// withdrew, once per charge.
func disputeReversal(ch *stripe.Charge, record upscale.Checkout, event string, at time.Time) upscale.Reversal {
	return upscale.Reversal{ID: "dispute:" + ch.ID, GrantID: record.ID, UpTo: record.Units, Event: event, At: at}
}

// dispute reverses a disputed charge's grant whole when the dispute is
// opened, once per charge, and grants back what that took when the
// dispute is closed won, less what refunds of the charge take of it
// (refundWon).
func (b *Billing) dispute(ctx context.Context, d *stripe.Dispute, event stripe.Event) error {
	if d.Charge == nil || strings.HasPrefix(string(d.Status), "warning_") {
		return nil // an inquiry (warning_*) withdraws no money, and closes as warning_closed
	}
	ch, err := b.client.V1Charges.Retrieve(ctx, d.Charge.ID, nil)
	if err != nil {
		return fmt.Errorf("stripebilling: read the disputed charge: %w", err)
	}
	record, ok, err := b.chargeGrant(ctx, ch)
	if !ok {
		return err
	}
	at := time.Unix(event.Created, 0).UTC()
	// The reversal of the dispute, made at its opening or, repeated,
	// answering what it took.
	taken, err := b.opts.Ledger.Reverse(ctx, disputeReversal(ch, record, event.ID, at))
	err = b.notGrantedYet(ctx, record, err)
	if err != nil || event.Type != "charge.dispute.closed" || d.Status != stripe.DisputeStatusWon || taken.Taken == 0 {
		return err
	}
	_, err = b.opts.Ledger.Grant(ctx, upscale.Grant{
		ID: wonGrantID(ch.ID), AccountID: record.AccountID, Pool: upscale.PoolCredit, Units: taken.Taken,
		Label: record.Label + " (dispute won)", Event: event.ID, At: at,
	})
	if err != nil {
		return err
	}
	return b.refundWon(ctx, ch, record, event)
}
