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
type Seller interface {
	// Offers lists what is on sale.
	Offers() []upscale.Offer
	// Checkout starts accountID's purchase of price and returns the
	// provider's checkout page to send the buyer to.
	Checkout(ctx context.Context, accountID, price string) (string, error)
	// Portal returns the provider's page where accountID manages its
	// subscription and finds its receipts; an error wrapping
	// upscale.ErrNotFound when the account never bought anything.
	Portal(ctx context.Context, accountID string) (string, error)
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
	Purchases  []upscale.Purchase
	// Customer is whether the account ever bought anything: it has
	// receipts.
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
	b, err := ledger.Balance(ctx, account)
	if err != nil {
		d.fail(w, r, account, "read the balance", err)
		return
	}
	terms, err := ledger.Terms(ctx, account)
	if err != nil {
		d.fail(w, r, account, "read the subscription", err)
		return
	}
	purchases, err := ledger.Purchases(ctx, account)
	if err != nil {
		d.fail(w, r, account, "read the purchases", err)
		return
	}
	page := billingPage{
		frame: d.frame(r, account, "billing"), Plan: b.Plan, Pools: pools(b), Terms: terms, Subscribed: terms.Status.Live(),
		Purchases: purchases, Customer: len(purchases) > 0 || terms.Subscription != "", Done: done, Paid: paid,
	}
	for _, o := range d.cfg.Seller.Offers() {
		if o.Subscription() {
			page.Plans = append(page.Plans, o)
		} else {
			page.Packs = append(page.Packs, o)
		}
	}
	// Its forms lead, by a 303, to the provider's pages.
	w.Header().Set("Content-Security-Policy", strings.Replace(contentSecurityPolicy, "form-action 'self'", strings.Join(append([]string{"form-action 'self'"}, d.cfg.Seller.PageOrigins()...), " "), 1))
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
		d.fail(w, r, account, "start a checkout", err)
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
		d.fail(w, r, account, "open the billing portal", err)
		return
	}
	http.Redirect(w, r, url, http.StatusSeeOther)
}

// done is where the provider's checkout returns the buyer: the checkout
// is applied now, as its webhook would, so that the page shows the
// credits even when it comes first.
func (d *Dashboard) done(w http.ResponseWriter, r *http.Request, account string) {
	checkout, paid, err := d.cfg.Seller.Fulfil(r.Context(), account, r.URL.Query().Get("session"))
	if errors.Is(err, upscale.ErrNotFound) {
		d.render(w, r, http.StatusNotFound, "notfound", d.frame(r, account, "billing"))
		return
	}
	if err != nil {
		d.fail(w, r, account, "look the checkout up", err)
		return
	}
	d.renderBilling(w, r, account, &checkout, paid)
}
