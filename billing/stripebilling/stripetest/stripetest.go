// Package stripetest is a stateful fake of the few Stripe endpoints that
// stripebilling calls (customers, Checkout Sessions, subscriptions,
// charges, Customer Portal sessions), and the events Stripe would send
// as what a buyer does changes them: paying, cancelling, refunds and
// disputes. Its events are signed as Stripe signs them, for stripe-go's
// API version, so that a host's webhook is tested as Stripe calls it. Its
// request shapes are checked against Stripe's own description by
// stripe-mock in stripebilling's tests; its state is what stripe-mock
// lacks.
package stripetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v84"
	"github.com/stripe/stripe-go/v84/webhook"
)

// Fake is the fake Stripe. Its URL is the API base to give
// stripebilling.Options.APIBase. It is safe for concurrent use.
type Fake struct {
	URL string

	secret string
	now    func() time.Time

	mu            sync.Mutex
	n             int
	customers     map[string]bool
	sessions      map[string]*session
	subscriptions map[string]*subscription
	charges       map[string]*charge
	prices        map[string]map[string]any
	endpoints     []map[string]any
	portalReturn  string
	webhookURL    string
	// keys are the Idempotency-Key of each request that created
	// something, by path; customerKeys the customer each key made.
	keys         map[string][]string
	customerKeys map[string]string
}

type session struct {
	ID, Mode, Customer, Price, Status, PaymentStatus, PaymentIntent, Subscription string
	SuccessURL                                                                    string
}

type subscription struct {
	ID, Customer, Price, Status string
	CancelAtPeriodEnd           bool
	PeriodEnd                   time.Time
}

type charge struct {
	ID, PaymentIntent      string
	Amount, AmountRefunded int64
}

// New starts a Fake whose events are signed with webhookSecret, until t
// ends.
func New(t testing.TB, webhookSecret string) *Fake {
	f := &Fake{
		secret: webhookSecret, now: time.Now,
		customers: map[string]bool{}, sessions: map[string]*session{}, subscriptions: map[string]*subscription{}, charges: map[string]*charge{},
		prices: map[string]map[string]any{}, keys: map[string][]string{}, customerKeys: map[string]string{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/customers", f.createCustomer)
	mux.HandleFunc("POST /v1/checkout/sessions", f.createSession)
	mux.HandleFunc("GET /v1/checkout/sessions", f.listSessions)
	mux.HandleFunc("GET /v1/checkout/sessions/{id}", retrieve(f, f.sessions, "checkout.session", f.sessionJSON))
	mux.HandleFunc("GET /v1/subscriptions/{id}", retrieve(f, f.subscriptions, "subscription", subscriptionJSON))
	mux.HandleFunc("GET /v1/charges/{id}", retrieve(f, f.charges, "charge", chargeJSON))
	mux.HandleFunc("POST /v1/billing_portal/sessions", f.createPortal)
	mux.HandleFunc("GET /v1/prices/{id}", retrieve(f, f.prices, "price", func(p map[string]any) map[string]any { return p }))
	mux.HandleFunc("GET /v1/webhook_endpoints", f.listEndpoints)
	mux.HandleFunc("GET /checkout/{id}", f.checkoutPage)
	mux.HandleFunc("POST /checkout/{id}", f.pay)
	mux.HandleFunc("GET /portal/{customer}", f.portalPage)
	mux.HandleFunc("POST /portal/{customer}", f.cancel)
	server := httptest.NewServer(mux)
	t.Cleanup(server.Close)
	f.URL = server.URL
	return f
}

// id is a new ID with prefix; the caller holds f.mu.
func (f *Fake) id(prefix string) string {
	f.n++
	return fmt.Sprintf("%s_%06d", prefix, f.n)
}

// createCustomer makes a customer, or, as Stripe does, answers a request
// whose Idempotency-Key made one before with that one.
func (f *Fake) createCustomer(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := f.keep(r)
	id, made := f.customerKeys[key]
	if !made || key == "" {
		id = f.id("cus")
		f.customers[id] = true
		f.customerKeys[key] = id
	}
	writeJSON(w, map[string]any{"id": id, "object": "customer"})
}

// keep records r's Idempotency-Key and returns it; the caller holds f.mu.
func (f *Fake) keep(r *http.Request) string {
	key := r.Header.Get("Idempotency-Key")
	f.keys[r.URL.Path] = append(f.keys[r.URL.Path], key)
	return key
}

// IdempotencyKeys returns the Idempotency-Key of each request to create
// something at path (such as /v1/checkout/sessions), in order, "" for a
// request without one.
func (f *Fake) IdempotencyKeys(path string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.keys[path])
}

// Customers returns how many customers the Fake has made.
func (f *Fake) Customers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.customers)
}

func (f *Fake) createSession(w http.ResponseWriter, r *http.Request) {
	r.ParseForm()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keep(r)
	if !f.customers[r.Form.Get("customer")] {
		stripeError(w, http.StatusBadRequest, "No such customer: "+r.Form.Get("customer"))
		return
	}
	s := &session{ID: f.id("cs_test"), Mode: r.Form.Get("mode"), Customer: r.Form.Get("customer"), Price: r.Form.Get("line_items[0][price]"),
		Status: "open", PaymentStatus: "unpaid", SuccessURL: r.Form.Get("success_url")}
	f.sessions[s.ID] = s
	writeJSON(w, f.sessionJSON(s))
}

// sessionJSON is s as Stripe shows it; the caller holds f.mu.
func (f *Fake) sessionJSON(s *session) map[string]any {
	return map[string]any{
		"id": s.ID, "object": "checkout.session", "mode": s.Mode, "customer": s.Customer, "status": s.Status,
		"payment_status": s.PaymentStatus, "payment_intent": nullable(s.PaymentIntent), "subscription": nullable(s.Subscription),
		"url": f.URL + "/checkout/" + s.ID,
	}
}

func (f *Fake) listSessions(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	data := []any{}
	for _, s := range f.sessions {
		if pi := r.URL.Query().Get("payment_intent"); pi != "" && s.PaymentIntent == pi {
			data = append(data, f.sessionJSON(s))
		}
	}
	writeJSON(w, map[string]any{"object": "list", "data": data, "has_more": false, "url": "/v1/checkout/sessions"})
}

func subscriptionJSON(sub *subscription) map[string]any {
	return map[string]any{
		"id": sub.ID, "object": "subscription", "customer": sub.Customer, "status": sub.Status, "cancel_at_period_end": sub.CancelAtPeriodEnd,
		"items": map[string]any{"object": "list", "data": []any{map[string]any{
			"id": "si_" + sub.ID, "object": "subscription_item", "current_period_end": sub.PeriodEnd.Unix(),
			"price": map[string]any{"id": sub.Price, "object": "price"},
		}}},
	}
}

func chargeJSON(ch *charge) map[string]any {
	return map[string]any{"id": ch.ID, "object": "charge", "payment_intent": ch.PaymentIntent, "amount": ch.Amount,
		"amount_refunded": ch.AmountRefunded, "refunded": ch.AmountRefunded >= ch.Amount}
}

func (f *Fake) createPortal(w http.ResponseWriter, r *http.Request) {
	r.ParseForm()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.portalReturn = r.Form.Get("return_url")
	writeJSON(w, map[string]any{"id": f.id("bps"), "object": "billing_portal.session", "url": f.URL + "/portal/" + r.Form.Get("customer")})
}

// Price makes price id exist: recurring or one-time, active or archived.
func (f *Fake) Price(id string, recurring, active bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := map[string]any{"id": id, "object": "price", "active": active, "type": "one_time"}
	if recurring {
		p["type"], p["recurring"] = "recurring", map[string]any{"interval": "month", "interval_count": 1}
	}
	f.prices[id] = p
}

// Endpoint adds a webhook endpoint sending events of apiVersion to url.
func (f *Fake) Endpoint(url, apiVersion string, events ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.endpoints = append(f.endpoints, map[string]any{"id": f.id("we"), "object": "webhook_endpoint", "url": url, "api_version": apiVersion,
		"enabled_events": events, "status": "enabled"})
}

func (f *Fake) listEndpoints(w http.ResponseWriter, _ *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	writeJSON(w, map[string]any{"object": "list", "data": append([]map[string]any{}, f.endpoints...), "has_more": false, "url": "/v1/webhook_endpoints"})
}

// retrieve answers a GET of the object of objects named by the path's ID,
// as render shows it, or Stripe's 404.
func retrieve[T any](f *Fake, objects map[string]T, what string, render func(T) map[string]any) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		o, ok := objects[r.PathValue("id")]
		if !ok {
			stripeError(w, http.StatusNotFound, "No such "+what)
			return
		}
		writeJSON(w, render(o))
	}
}

func nullable(id string) any {
	if id == "" {
		return nil
	}
	return id
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func stripeError(w http.ResponseWriter, status int, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"type": "invalid_request_error", "message": message}})
}

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
// and the checkout.session.completed event says so. Settle ends it.
func (f *Fake) PayLater(id string, amount int64) Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.complete(id, amount, "unpaid")
}

// Settle ends the delayed payment of checkout session id (PayLater):
// paid, it returns checkout.session.async_payment_succeeded; not, it
// returns checkout.session.async_payment_failed.
func (f *Fake) Settle(id string, paid bool) Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sessions[id]
	if !paid {
		return f.event("checkout.session.async_payment_failed", f.sessionJSON(s))
	}
	s.PaymentStatus = "paid"
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
		ch := &charge{ID: f.id("ch"), PaymentIntent: s.PaymentIntent, Amount: amount}
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
	return f.event("charge.refunded", chargeJSON(ch))
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

// page writes a buyer's page of the fake: a heading and one form.
func page(w http.ResponseWriter, heading, button string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprintf(w, `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>%[1]s</title></head><body><main><h1>%[1]s</h1>
<form method="post"><button type="submit" id="go">%[2]s</button></form></main></body></html>`, html.EscapeString(heading), html.EscapeString(button))
}

// pageAmount is what a pack or a month of a plan costs on the buyer's
// pages, in the currency's smallest unit.
const pageAmount = 1900

// checkoutPage is Checkout's page for a session: one Pay button.
func (f *Fake) checkoutPage(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	s, ok := f.sessions[r.PathValue("id")]
	f.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	page(w, "Pay for "+s.Price, "Pay")
}

// pay pays the session, sends its event (SendEventsTo), and sends the
// buyer to the session's success URL.
func (f *Fake) pay(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	f.mu.Lock()
	s, ok := f.sessions[id]
	f.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	if err := f.send(f.Pay(id, pageAmount)); err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	http.Redirect(w, r, strings.ReplaceAll(s.SuccessURL, "{CHECKOUT_SESSION_ID}", id), http.StatusSeeOther)
}

// portalPage is the Customer Portal: one button that cancels the
// customer's subscription at the end of its period.
func (f *Fake) portalPage(w http.ResponseWriter, _ *http.Request) {
	page(w, "Your subscription", "Cancel subscription")
}

// cancel cancels the customer's live subscriptions at their period's
// end, sends the events (SendEventsTo), and sends the customer back.
func (f *Fake) cancel(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	var subs []string
	for id, sub := range f.subscriptions {
		if sub.Customer == r.PathValue("customer") && sub.Status == "active" {
			subs = append(subs, id)
		}
	}
	back := f.portalReturn
	f.mu.Unlock()
	for _, id := range subs {
		if err := f.send(f.UpdateSubscription(id, "customer.subscription.updated", "active", true)); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
	}
	http.Redirect(w, r, back, http.StatusSeeOther)
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
