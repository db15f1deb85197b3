package stripetest

import (
	"fmt"
	"html"
	"net/http"
	"strings"
)

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
// buyer to the session's success URL. A session no longer open (paid,
// expired) is not paid again: 410.
func (f *Fake) pay(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	f.mu.Lock()
	s, ok := f.sessions[id]
	open := ok && s.Status == "open"
	f.mu.Unlock()
	switch {
	case !ok:
		http.NotFound(w, r)
		return
	case !open:
		http.Error(w, "This Checkout Session is no longer open.", http.StatusGone)
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
