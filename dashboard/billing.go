package dashboard

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/upscalekit/upscale"
)

// Seller sells credit packs and plans to the signed-in account through a
// payment provider's own pages: billing/stripebilling's Billing is one.
// Checkout, Portal and Fulfil are called for a page: each returns within
// a bound of a few seconds, and an error wrapping upscale.ErrUnavailable
// when the provider did not answer in time or failed in a way that may
// pass, which the page answers 503 with a Retry-After.
type Seller interface {
	// Offers lists what is on sale.
	Offers() []upscale.Offer
	// Checkout starts accountID's purchase of price and returns the
	// provider's checkout page to send the buyer to. Nothing is charged
	// when it fails, and trying again makes nothing twice.
	Checkout(ctx context.Context, accountID, price string) (string, error)
	// Customer reports whether accountID is the provider's customer,
	// with receipts and payment details that Portal shows, without
	// calling the provider.
	Customer(ctx context.Context, accountID string) (bool, error)
	// Portal returns the provider's page where accountID manages its
	// subscription and finds its receipts; an error wrapping
	// upscale.ErrNotFound when the account is no customer.
	Portal(ctx context.Context, accountID string) (string, error)
	// Receipt returns the provider's receipt of purchase, a pack
	// accountID paid for (upscale.Purchase.ID); an error wrapping
	// upscale.ErrNotFound for one the account did not make, or that no
	// payment has paid yet.
	Receipt(ctx context.Context, accountID, purchase string) (string, error)
	// Fulfil applies checkout sessionID of accountID as the provider
	// reports it now, once, and returns what it offered and whether it
	// is paid; an error wrapping upscale.ErrNotFound for a checkout the
	// account did not make.
	Fulfil(ctx context.Context, accountID, sessionID string) (upscale.Checkout, bool, error)
	// PageOrigins are the origins (scheme://host[:port]) of the
	// provider's checkout and portal pages, which the dashboard's
	// Content-Security-Policy lets its forms lead to.
	PageOrigins() []string
}

type billingPage struct {
	frame
	Plan  upscale.Plan
	Pools []pool
	// Terms are the account's subscription's; Subscribed whether it
	// lives.
	Terms      upscale.PlanTerms
	Subscribed bool
	Packs      []upscale.Offer
	Plans      []upscale.Offer
	// Purchases are the credits the account paid for; Bonuses the share
	// bonus its share link earned, which is no purchase.
	Purchases, Bonuses []upscale.Purchase
	// Customer is whether the account is the Seller's customer: it has
	// receipts and payment details in the provider's portal.
	Customer bool
	// Done is the checkout the buyer came back from, and Paid whether
	// its payment is made.
	Done *upscale.Checkout
	Paid bool
}

// billing renders the Billing page, with done, the checkout the buyer
// came back from, when there is one.
func (d *Dashboard) billing(w http.ResponseWriter, r *http.Request, account string) {
	d.renderBilling(w, r, account, nil, false)
}

func (d *Dashboard) renderBilling(w http.ResponseWriter, r *http.Request, account string, done *upscale.Checkout, paid bool) {
	ctx := r.Context()
	ledger := d.cfg.Ledger.(upscale.BillingLedger)
	b, err := d.balance(r, account)
	if err != nil {
		d.fail(w, r, account, "read the balance", err)
		return
	}
	terms, err := ledger.Terms(ctx, account)
	if err != nil {
		d.fail(w, r, account, "read the subscription", err)
		return
	}
	grants, err := ledger.Purchases(ctx, account)
	if err != nil {
		d.fail(w, r, account, "read the purchases", err)
		return
	}
	customer, err := d.cfg.Seller.Customer(ctx, account)
	if err != nil {
		d.fail(w, r, account, "tell whether the account is a customer", err)
		return
	}
	page := billingPage{
		frame: d.frame(r, account, "billing"), Plan: b.Plan, Pools: pools(b), Terms: terms, Subscribed: terms.Status.Live(),
		Customer: customer, Done: done, Paid: paid,
	}
	for _, g := range grants {
		// A payment fills credits; share bonus is earned (ShareBonus).
		if g.Pool == upscale.PoolCredit {
			page.Purchases = append(page.Purchases, g)
		} else {
			page.Bonuses = append(page.Bonuses, g)
		}
	}
	page.Packs, page.Plans = splitOffers(d.cfg.Seller.Offers())
	// Its forms lead, by a 303, to the provider's pages.
	w.Header().Set("Content-Security-Policy", strings.Replace(d.policy, "form-action 'self'", strings.Join(append([]string{"form-action 'self'"}, d.cfg.Seller.PageOrigins()...), " "), 1))
	d.render(w, r, http.StatusOK, "billing", page)
}

// checkout sends the buyer to the provider's checkout page of the price
// posted.
func (d *Dashboard) checkout(w http.ResponseWriter, r *http.Request, account string) {
	price := r.PostFormValue("price")
	if slices.ContainsFunc(d.cfg.Seller.Offers(), func(o upscale.Offer) bool { return o.Price == price && o.Subscription() }) {
		terms, err := d.cfg.Ledger.(upscale.BillingLedger).Terms(r.Context(), account)
		if err != nil {
			d.fail(w, r, account, "read the subscription", err)
			return
		}
		if terms.Status.Live() { // one subscription at a time: it is managed in the portal
			d.portal(w, r, account)
			return
		}
	}
	url, err := d.cfg.Seller.Checkout(r.Context(), account, price)
	if errors.Is(err, upscale.ErrInvalidRequest) {
		http.Error(w, "That is not on sale; go back to the Billing page and choose again.", http.StatusBadRequest)
		return
	}
	if err != nil {
		d.sellerFailed(w, r, account, "start a checkout", err, "The payment service is not answering just now; nothing was charged. Try again in a minute.")
		return
	}
	d.cfg.Logger.Info("dashboard: checkout started", "account", account, "price", price)
	http.Redirect(w, r, url, http.StatusSeeOther)
}

// portal sends the account to the provider's portal.
func (d *Dashboard) portal(w http.ResponseWriter, r *http.Request, account string) {
	url, err := d.cfg.Seller.Portal(r.Context(), account)
	if errors.Is(err, upscale.ErrNotFound) {
		http.Error(w, "Your account has bought nothing yet: it has no receipts or subscription to manage.", http.StatusNotFound)
		return
	}
	if err != nil {
		d.sellerFailed(w, r, account, "open the billing portal", err, "The payment service is not answering just now. Try again in a minute.")
		return
	}
	http.Redirect(w, r, url, http.StatusSeeOther)
}

// receipt sends the buyer to the provider's receipt of a purchase.
func (d *Dashboard) receipt(w http.ResponseWriter, r *http.Request, account string) {
	url, err := d.cfg.Seller.Receipt(r.Context(), account, r.PathValue("id"))
	if errors.Is(err, upscale.ErrNotFound) {
		http.Error(w, "This account has no such purchase, or its payment has not been made yet.", http.StatusNotFound)
		return
	}
	if err != nil {
		d.sellerFailed(w, r, account, "find a receipt", err, "The payment service is not answering just now. Try again in a minute.")
		return
	}
	http.Redirect(w, r, url, http.StatusSeeOther)
}

// CheckoutDoneURL is where a Seller's checkout sends the buyer back, on
// the dashboard at base (its URL, ending in "/"): the billing/done page,
// with the checkout's session ID in its query, which the provider writes
// for sessionPlaceholder (Stripe's "{CHECKOUT_SESSION_ID}").
func CheckoutDoneURL(base, sessionPlaceholder string) string {
	return base + "billing/done?" + doneSession + "=" + sessionPlaceholder
}

// doneSession is the query parameter of billing/done that carries the
// checkout's session ID.
const doneSession = "session"

// done is where the provider's checkout returns the buyer: the checkout
// is applied now, as its webhook would, so that the page shows the
// credits even when it comes first.
func (d *Dashboard) done(w http.ResponseWriter, r *http.Request, account string) {
	checkout, paid, err := d.cfg.Seller.Fulfil(r.Context(), account, r.URL.Query().Get(doneSession))
	if errors.Is(err, upscale.ErrNotFound) {
		d.notFound(w, r, account, "billing", "This account made no such checkout; its receipt, if any, is on the Billing page.", "Billing")
		return
	}
	if err != nil {
		d.sellerFailed(w, r, account, "look the checkout up", err,
			"The payment service is not answering just now, so this page cannot show your checkout yet; a payment made is added as soon as the payment service reports it. Try again in a minute.")
		return
	}
	d.renderBilling(w, r, account, &checkout, paid)
}

// sellerFailed answers err, the Seller's failure to do action, for a
// page: when the provider is out of reach for the moment (an error
// wrapping upscale.ErrUnavailable), 503 with a Retry-After and
// unavailable, a sentence that says what became of the payment; any
// other error as fail does.
func (d *Dashboard) sellerFailed(w http.ResponseWriter, r *http.Request, account, action string, err error, unavailable string) {
	if !errors.Is(err, upscale.ErrUnavailable) {
		d.fail(w, r, account, action, err)
		return
	}
	d.cfg.Logger.Warn("dashboard: "+action+": the payment provider is not answering", "account", account, "err", err)
	w.Header().Set("Retry-After", "60")
	http.Error(w, unavailable, http.StatusServiceUnavailable)
}

// splitOffers parts offers into packs and plans, each in its order.
func splitOffers(offers []upscale.Offer) (packs, plans []upscale.Offer) {
	for _, o := range offers {
		if o.Subscription() {
			plans = append(plans, o)
		} else {
			packs = append(packs, o)
		}
	}
	return packs, plans
}
