package stripetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v84"
	"github.com/stripe/stripe-go/v84/webhook"
)

// Event is an event the Fake made, ready to deliver.
type Event struct {
	ID, Type string
	Payload  []byte
}

// event makes an event of typ about object; the caller holds f.mu.
func (f *Fake) event(typ string, object map[string]any) Event {
	id := f.id("evt")
	payload, err := json.Marshal(map[string]any{
		"id": id, "object": "event", "type": typ, "api_version": stripe.APIVersion, "created": f.now().Unix(),
		"livemode": false, "pending_webhooks": 1, "data": map[string]any{"object": object},
	})
	if err != nil {
		panic(err)
	}
	return Event{ID: id, Type: typ, Payload: payload}
}

// Event makes an event of typ about object, as given.
func (f *Fake) Event(typ string, object map[string]any) Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.event(typ, object)
}

// Pay pays checkout session id, as a buyer on Checkout does, for amount
// (in the smallest unit of the currency), and returns the
// checkout.session.completed event. A subscription's session starts an
// active subscription, paid for a month.
func (f *Fake) Pay(id string, amount int64) Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.complete(id, amount, "paid")
}

// PayLater completes checkout session id with a payment method whose
// money comes later (a bank debit): the session is complete and unpaid,
// and the checkout.session.completed event says so. Clear ends it.
func (f *Fake) PayLater(id string, amount int64) Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.complete(id, amount, "unpaid")
}

// Clear ends the delayed payment of checkout session id (PayLater):
// paid, it returns checkout.session.async_payment_succeeded; not, it
// returns checkout.session.async_payment_failed.
func (f *Fake) Clear(id string, paid bool) Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sessions[id]
	if !paid {
		return f.event("checkout.session.async_payment_failed", f.sessionJSON(s))
	}
	s.PaymentStatus = "paid"
	for _, ch := range f.charges {
		if ch.PaymentIntent == s.PaymentIntent {
			ch.Pending = false
		}
	}
	return f.event("checkout.session.async_payment_succeeded", f.sessionJSON(s))
}

// complete completes checkout session id with paymentStatus; the caller
// holds f.mu.
func (f *Fake) complete(id string, amount int64, paymentStatus string) Event {
	s := f.sessions[id]
	s.Status, s.PaymentStatus = "complete", paymentStatus
	if s.Mode == "subscription" {
		sub := &subscription{ID: f.id("sub"), Customer: s.Customer, Price: s.Price, Status: "active", PeriodEnd: f.now().AddDate(0, 1, 0)}
		f.subscriptions[sub.ID] = sub
		s.Subscription = sub.ID
	} else {
		s.PaymentIntent = f.id("pi")
		ch := &charge{ID: f.id("ch"), PaymentIntent: s.PaymentIntent, Amount: amount, Pending: paymentStatus != "paid"}
		f.charges[ch.ID] = ch
	}
	return f.event("checkout.session.completed", f.sessionJSON(s))
}

// Charge returns the charge that paid checkout session id.
func (f *Fake) Charge(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ch := range f.charges {
		if ch.PaymentIntent == f.sessions[id].PaymentIntent {
			return ch.ID
		}
	}
	return ""
}

// Subscription returns the subscription checkout session id started.
func (f *Fake) Subscription(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sessions[id].Subscription
}

// Refund refunds amount more of charge id and returns the charge.refunded
// event.
func (f *Fake) Refund(id string, amount int64) Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := f.charges[id]
	ch.AmountRefunded = min(ch.AmountRefunded+amount, ch.Amount)
	return f.event("charge.refunded", f.chargeJSON(ch))
}

// Dispute opens a dispute of charge id (typ charge.dispute.created) or
// closes it with status (charge.dispute.closed: won or lost), and
// returns the event.
func (f *Fake) Dispute(id, typ, status string) Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.event(typ, map[string]any{"id": "dp_" + id, "object": "dispute", "charge": id, "status": status})
}

// UpdateSubscription changes subscription id as Stripe would (status
// "active", "past_due", "canceled", ...; cancel at the period's end) and
// returns the event of typ (customer.subscription.updated or .deleted,
// invoice.paid, invoice.payment_failed) that reports it.
func (f *Fake) UpdateSubscription(id, typ, status string, cancelAtPeriodEnd bool) Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	sub := f.subscriptions[id]
	sub.Status, sub.CancelAtPeriodEnd = status, cancelAtPeriodEnd
	if strings.HasPrefix(typ, "invoice.") {
		return f.event(typ, map[string]any{"id": f.id("in"), "object": "invoice", "parent": map[string]any{
			"type": "subscription_details", "subscription_details": map[string]any{"subscription": id},
		}})
	}
	return f.event(typ, subscriptionJSON(sub))
}

// SendEventsTo makes the buyer's pages (Checkout's Pay, the portal's
// Cancel) send their events to url, as Stripe sends them to a registered
// webhook endpoint.
func (f *Fake) SendEventsTo(url string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.webhookURL = url
}

// send delivers e to the URL of SendEventsTo, as Stripe does, and fails
// unless it is answered 2xx.
func (f *Fake) send(e Event) error {
	f.mu.Lock()
	url := f.webhookURL
	f.mu.Unlock()
	if url == "" {
		return nil
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(e.Payload))
	if err != nil {
		return err
	}
	req.Header.Set("Stripe-Signature", f.signature(e, f.secret, f.now()))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("the webhook answered %s to %s", resp.Status, e.Type)
	}
	return nil
}

// signature is e's Stripe-Signature header, signed with secret at
// signedAt.
func (f *Fake) signature(e Event, secret string, signedAt time.Time) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: e.Payload, Secret: secret, Timestamp: signedAt}).Header
}

// Deliver sends e to handler as Stripe does, signed now with the Fake's
// secret, and returns the status handler answered.
func (f *Fake) Deliver(handler http.Handler, e Event) int {
	return f.DeliverSigned(handler, e, f.secret, f.now())
}

// DeliverSigned sends e to handler signed with secret at signedAt.
func (f *Fake) DeliverSigned(handler http.Handler, e Event, secret string, signedAt time.Time) int {
	r := httptest.NewRequest(http.MethodPost, "/billing/stripe/webhook", bytes.NewReader(e.Payload))
	r.Header.Set("Stripe-Signature", f.signature(e, secret, signedAt))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	handler.ServeHTTP(w, r)
	return w.Code
}
