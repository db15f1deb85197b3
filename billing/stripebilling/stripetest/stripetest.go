// Package stripetest is a stateful fake of the few Stripe endpoints that
// stripebilling calls (customers, Checkout Sessions and their expiry,
// subscriptions, charges, Customer Portal sessions), and the events
// Stripe would send as what a buyer does changes them: paying,
// cancelling, refunds and disputes. Its events are signed as Stripe
// signs them, for stripe-go's API version, so that a host's webhook is
// tested as Stripe calls it. Its request shapes are checked against
// Stripe's own description by stripe-mock in stripebilling's tests; its
// state is what stripe-mock lacks.
package stripetest

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
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
	// holds are the reads held back (HoldRead), by object ID.
	holds map[string]*hold
	// keys are the Idempotency-Key of each request that created
	// something, by path; customerKeys the customer each key made.
	keys         map[string][]string
	customerKeys map[string]string
}

// hold is a read held back: started is closed once it has taken its
// answer, and it is written once release is closed.
type hold struct{ started, release chan struct{} }

type session struct {
	ID, Mode, Customer, Price, Status, PaymentStatus, PaymentIntent, Subscription string
	SuccessURL                                                                    string
	Created                                                                       int64 // Unix seconds
	Metadata                                                                      map[string]string
}

type subscription struct {
	ID, Customer, Price, Status string
	CancelAtPeriodEnd           bool
	PeriodEnd                   time.Time
}

type charge struct {
	ID, PaymentIntent      string
	Amount, AmountRefunded int64
	// Pending is a delayed payment's (PayLater) until it clears.
	Pending bool
}

// New starts a Fake whose events are signed with webhookSecret, until t
// ends.
func New(t testing.TB, webhookSecret string) *Fake {
	f := &Fake{
		secret: webhookSecret, now: time.Now,
		customers: map[string]bool{}, sessions: map[string]*session{}, subscriptions: map[string]*subscription{}, charges: map[string]*charge{},
		prices: map[string]map[string]any{}, keys: map[string][]string{}, customerKeys: map[string]string{}, holds: map[string]*hold{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/customers", f.createCustomer)
	mux.HandleFunc("POST /v1/checkout/sessions", f.createSession)
	mux.HandleFunc("GET /v1/checkout/sessions", f.listSessions)
	mux.HandleFunc("GET /v1/checkout/sessions/{id}", retrieve(f, f.sessions, "checkout.session", f.sessionJSON))
	mux.HandleFunc("POST /v1/checkout/sessions/{id}/expire", f.expireSession)
	mux.HandleFunc("GET /v1/subscriptions", f.listSubscriptions)
	mux.HandleFunc("GET /v1/subscriptions/{id}", retrieve(f, f.subscriptions, "subscription", subscriptionJSON))
	mux.HandleFunc("GET /v1/charges/{id}", retrieve(f, f.charges, "charge", f.chargeJSON))
	mux.HandleFunc("GET /v1/charges", f.listCharges)
	mux.HandleFunc("GET /receipts/{id}", f.receiptPage)
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
		Status: "open", PaymentStatus: "unpaid", SuccessURL: r.Form.Get("success_url"), Created: time.Now().Unix(),
		Metadata: map[string]string{}}
	for key, values := range r.Form {
		if name, ok := strings.CutPrefix(key, "metadata["); ok {
			s.Metadata[strings.TrimSuffix(name, "]")] = values[0]
		}
	}
	f.sessions[s.ID] = s
	writeJSON(w, f.sessionJSON(s))
}

// sessionJSON is s as Stripe shows it; the caller holds f.mu.
func (f *Fake) sessionJSON(s *session) map[string]any {
	return map[string]any{
		"id": s.ID, "object": "checkout.session", "mode": s.Mode, "customer": s.Customer, "status": s.Status, "created": s.Created, "metadata": s.Metadata,
		"payment_status": s.PaymentStatus, "payment_intent": nullable(s.PaymentIntent), "subscription": nullable(s.Subscription),
		"url": f.URL + "/checkout/" + s.ID,
	}
}

// listSessions lists the sessions that match the query's payment_intent,
// customer and status, those given.
func (f *Fake) listSessions(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := r.URL.Query()
	data := []any{}
	for _, s := range sorted(f.sessions) {
		if matches(q, "payment_intent", s.PaymentIntent) && matches(q, "customer", s.Customer) && matches(q, "status", s.Status) {
			data = append(data, f.sessionJSON(s))
		}
	}
	writeJSON(w, map[string]any{"object": "list", "data": data, "has_more": false, "url": "/v1/checkout/sessions"})
}

// matches reports whether query q's parameter key, when given, is value.
func matches(q url.Values, key, value string) bool {
	return !q.Has(key) || q.Get(key) == value
}

// sorted returns objects in the order of their IDs, which is the order
// they were made in.
func sorted[T any](objects map[string]T) []T {
	var out []T
	for _, id := range slices.Sorted(maps.Keys(objects)) {
		out = append(out, objects[id])
	}
	return out
}

// expireSession expires an open session, as Stripe does: it can no
// longer be paid. A session that is not open is refused.
func (f *Fake) expireSession(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sessions[r.PathValue("id")]
	switch {
	case !ok:
		stripeError(w, http.StatusNotFound, "No such checkout.session")
	case s.Status != "open":
		stripeError(w, http.StatusBadRequest, "Only Checkout Sessions with a status of open can be expired; this one is "+s.Status)
	default:
		s.Status = "expired"
		writeJSON(w, f.sessionJSON(s))
	}
}

// OpenSessions returns the IDs of the open checkout sessions, in the
// order they were made.
func (f *Fake) OpenSessions() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var open []string
	for _, s := range sorted(f.sessions) {
		if s.Status == "open" {
			open = append(open, s.ID)
		}
	}
	return open
}

// SessionStatus returns checkout session id's status: open, complete or
// expired.
func (f *Fake) SessionStatus(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sessions[id].Status
}

// listSubscriptions lists the subscriptions of the query's customer, if
// given; as Stripe does, canceled ones only for status=all or canceled.
func (f *Fake) listSubscriptions(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := r.URL.Query()
	status := q.Get("status")
	data := []any{}
	for _, sub := range sorted(f.subscriptions) {
		if matches(q, "customer", sub.Customer) && (status == "all" || status == sub.Status || status == "" && sub.Status != "canceled") {
			data = append(data, subscriptionJSON(sub))
		}
	}
	writeJSON(w, map[string]any{"object": "list", "data": data, "has_more": false, "url": "/v1/subscriptions"})
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

// chargeJSON is ch as Stripe shows it, with its receipt's page.
func (f *Fake) chargeJSON(ch *charge) map[string]any {
	return map[string]any{"id": ch.ID, "object": "charge", "payment_intent": ch.PaymentIntent, "amount": ch.Amount, "paid": !ch.Pending,
		"amount_refunded": ch.AmountRefunded, "refunded": ch.AmountRefunded >= ch.Amount, "receipt_url": f.URL + "/receipts/" + ch.ID}
}

// listCharges lists the charges of the query's payment_intent.
func (f *Fake) listCharges(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	data := []any{}
	for _, ch := range f.charges {
		if matches(r.URL.Query(), "payment_intent", ch.PaymentIntent) {
			data = append(data, f.chargeJSON(ch))
		}
	}
	writeJSON(w, map[string]any{"object": "list", "url": "/v1/charges", "has_more": false, "data": data})
}

// receiptPage is a charge's receipt, as Stripe's receipt_url serves it.
func (f *Fake) receiptPage(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	ch, ok := f.charges[r.PathValue("id")]
	f.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprintf(w, "<!doctype html><title>Receipt</title><h1 id=\"receipt\">Receipt for %s: %d</h1>", ch.ID, ch.Amount)
}

func (f *Fake) createPortal(w http.ResponseWriter, r *http.Request) {
	r.ParseForm()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.portalReturn = r.Form.Get("return_url")
	writeJSON(w, map[string]any{"id": f.id("bps"), "object": "billing_portal.session", "url": f.URL + "/portal/" + r.Form.Get("customer")})
}

// Price is a price at the fake.
type Price struct {
	ID string
	// Recurring is monthly; else one-time.
	Recurring, Active bool
	// Amount in the currency's smallest unit, and Currency ("usd"); an
	// empty Currency makes a price whose amount the customer chooses.
	Amount   int64
	Currency string
	// AmountDecimal, when set, is the amount in fractions of the smallest
	// unit ("1.5"), which Amount then rounds.
	AmountDecimal string
}

// SetPrice makes p exist, or changes it.
func (f *Fake) SetPrice(p Price) {
	f.mu.Lock()
	defer f.mu.Unlock()
	price := map[string]any{"id": p.ID, "object": "price", "active": p.Active, "type": "one_time", "billing_scheme": "per_unit"}
	if p.Recurring {
		price["type"], price["recurring"] = "recurring", map[string]any{"interval": "month", "interval_count": 1}
	}
	if p.Currency == "" {
		price["currency"], price["custom_unit_amount"] = "usd", map[string]any{"minimum": 100}
	} else {
		price["currency"], price["unit_amount"], price["unit_amount_decimal"] = p.Currency, p.Amount, cmp.Or(p.AmountDecimal, strconv.FormatInt(p.Amount, 10))
	}
	f.prices[p.ID] = price
}

// DeletePrice makes price id not exist: it is read as 404.
func (f *Fake) DeletePrice(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.prices, id)
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
// as render shows it when the read begins, or Stripe's 404. A read held
// back (HoldRead) is answered once it is released.
func retrieve[T any](f *Fake, objects map[string]T, what string, render func(T) map[string]any) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		f.mu.Lock()
		o, ok := objects[id]
		var answer map[string]any
		if ok {
			answer = render(o)
		}
		h := f.holds[id]
		delete(f.holds, id)
		f.mu.Unlock()
		if h != nil {
			close(h.started)
			<-h.release
		}
		if !ok {
			stripeError(w, http.StatusNotFound, "No such "+what)
			return
		}
		writeJSON(w, answer)
	}
}

// HoldRead makes the next read of object id (a subscription, a session, a
// charge) as slow as Stripe can be: the read takes the object's state
// when it begins, closes started, and answers only once release is
// called, so that what changes meanwhile is not in its answer.
func (f *Fake) HoldRead(id string) (started <-chan struct{}, release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := &hold{started: make(chan struct{}), release: make(chan struct{})}
	f.holds[id] = h
	return h.started, sync.OnceFunc(func() { close(h.release) })
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
