// Package stripebilling sells credit packs and plans through Stripe: it
// makes Checkout Sessions (mode payment for a pack, subscription for a
// plan) and Customer Portal sessions, and applies what Stripe reports
// (its webhook events, and the success page's look-up) to an
// upscale.BillingLedger, each effect once. It is a package of its own so
// that a host that does not sell through Stripe never compiles the SDK.
//
// What a paid session grants is decided by the host's own offer table,
// keyed by Stripe price ID, and recorded with the session when it is made
// (upscale.CheckoutStore): never by metadata a caller could shape. The
// ledger stays the authority on what an account may spend; Stripe only
// fills it.
package stripebilling

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stripe/stripe-go/v84"

	"github.com/upscalekit/upscale"
)

// Options configures a Billing. Fields without a default are required.
type Options struct {
	// SecretKey is the Stripe API key (sk_live_… or sk_test_…).
	SecretKey string
	// WebhookSecret verifies the webhook's events (whsec_…).
	WebhookSecret string
	// APIBase points the client at another server than Stripe's, for
	// tests against stripe-mock or a fake. Empty means Stripe's.
	APIBase string
	// HTTPClient makes the calls to Stripe. Nil means one with a 30 s
	// timeout for each attempt; stripe-go tries a call that failed on
	// the network or with a 5xx twice more. PageTimeout bounds them all
	// for a page.
	HTTPClient *http.Client
	Ledger     upscale.BillingLedger
	Checkouts  upscale.CheckoutStore
	// Offers are what is on sale, by Stripe price: packs of credits
	// (mode payment) and plans (mode subscription).
	Offers []upscale.Offer
	// FreePlan is the plan an account returns to when its subscription
	// ends.
	FreePlan upscale.Plan
	// SuccessURL and CancelURL are where Checkout sends the buyer back:
	// SuccessURL with {CHECKOUT_SESSION_ID} in it, so that the success
	// page can look the session up (Fulfil). ReturnURL is where the
	// Customer Portal returns.
	SuccessURL, CancelURL, ReturnURL string
	// PageTimeout bounds what Checkout, Portal and Fulfil do for one page,
	// their calls to Stripe and stripe-go's retries of them included, so
	// that Stripe slow or down never holds a page: past it they return
	// an error wrapping upscale.ErrUnavailable. Zero means 10 s. The
	// webhook is no page: its calls are bounded by HTTPClient's timeout
	// alone, since Stripe waits for it and sends again what failed.
	PageTimeout time.Duration
	// Logger receives what the webhook could not apply. Nil means
	// slog.Default().
	Logger *slog.Logger
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
}

// Billing is a Stripe seller for one host. It is safe for concurrent use.
type Billing struct {
	opts    Options
	client  *stripe.Client
	doubles atomic.Uint64
	// refused counts RefusedEvents; refusalLog keeps their log to a
	// line a minute (Webhook).
	refused    atomic.Uint64
	refusalLog refusalLog
	// costs are the offers' Costs by price, as last read from Stripe.
	costsMu sync.Mutex
	costs   map[string]upscale.Cost
}

// Stats are counts of what a Billing met since New, for the host to
// export as metrics.
type Stats struct {
	// DoubleSubscriptions counts the times a live subscription's state
	// was applied while its customer had another live one at Stripe: two
	// plan checkouts paid in the same moment, each billed. Each is logged
	// at ERROR, naming the account and the subscriptions, for the
	// operator to cancel and refund all but one (Doubles lists them); it
	// goes on counting, with each event of either, until then.
	DoubleSubscriptions uint64
	// RefusedEvents counts the webhook's events refused because their
	// signature did not verify: forgeries, replays past the tolerance, or
	// events signed with another secret than WebhookSecret. They are
	// logged at WARN in one line a minute at most, with how many since.
	RefusedEvents uint64
}

// Stats returns the counts so far.
func (b *Billing) Stats() Stats {
	return Stats{DoubleSubscriptions: b.doubles.Load(), RefusedEvents: b.refused.Load()}
}

// ErrSubscribed means the account already has a live subscription: it
// manages it in the Customer Portal rather than buying a second.
var ErrSubscribed = errors.New("stripebilling: the account already has a live subscription")

// New returns a Billing, or an error naming what Options lacks.
func New(opts Options) (*Billing, error) {
	switch {
	case opts.SecretKey == "" || opts.WebhookSecret == "":
		return nil, errors.New("stripebilling: the secret key and the webhook secret are required")
	case opts.Ledger == nil || opts.Checkouts == nil:
		return nil, errors.New("stripebilling: a BillingLedger and a CheckoutStore are required")
	case len(opts.Offers) == 0:
		return nil, errors.New("stripebilling: nothing is on offer: give at least one pack or plan")
	case opts.FreePlan.Name == "":
		return nil, errors.New("stripebilling: FreePlan, the plan an account returns to when its subscription ends, is required")
	case opts.SuccessURL == "" || opts.CancelURL == "" || opts.ReturnURL == "":
		return nil, errors.New("stripebilling: SuccessURL, CancelURL and ReturnURL are required")
	}
	prices := map[string]bool{}
	for _, o := range opts.Offers {
		if o.Price == "" || prices[o.Price] || (o.Units > 0) == o.Subscription() || o.Units < 0 {
			return nil, fmt.Errorf("stripebilling: offer %q: an offer needs a price of its own and either a positive number of units (a pack) or a plan", o.Price)
		}
		prices[o.Price] = true
	}
	opts.Logger = cmp.Or(opts.Logger, slog.Default())
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if opts.PageTimeout < 0 {
		return nil, fmt.Errorf("stripebilling: PageTimeout %v: want a positive bound, or zero for 10 s", opts.PageTimeout)
	}
	opts.PageTimeout = cmp.Or(opts.PageTimeout, 10*time.Second)
	config := &stripe.BackendConfig{HTTPClient: opts.HTTPClient, LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelError}}
	if opts.APIBase != "" {
		config.URL = stripe.String(opts.APIBase)
	}
	return &Billing{opts: opts, costs: map[string]upscale.Cost{}, client: stripe.NewClient(opts.SecretKey, stripe.WithBackends(stripe.NewBackendsWithConfig(config)))}, nil
}

// PageOrigins are the origins of Stripe's Checkout and Customer Portal
// pages, or, with APIBase, of the test server that serves them.
func (b *Billing) PageOrigins() []string {
	if b.opts.APIBase != "" {
		if u, err := url.Parse(b.opts.APIBase); err == nil {
			return []string{u.Scheme + "://" + u.Host}
		}
	}
	return []string{"https://checkout.stripe.com", "https://billing.stripe.com"}
}

// Offers returns what is on sale, each with its Cost as last read
// (ReadPrices, Check): the zero Cost before.
func (b *Billing) Offers() []upscale.Offer {
	offers := slices.Clone(b.opts.Offers)
	b.costsMu.Lock()
	defer b.costsMu.Unlock()
	for i := range offers {
		offers[i].Cost = b.costs[offers[i].Price]
	}
	return offers
}

// ReadPrices reads what each offer costs from its price at Stripe, for
// Offers: the host calls it at start and then every hour or so, as a
// price's amount changes at Stripe, never here (the standalone does). A
// price it cannot read keeps the Cost last read; the errors are
// returned joined.
func (b *Billing) ReadPrices(ctx context.Context) error {
	var errs []error
	for _, o := range b.opts.Offers {
		if _, err := b.readPrice(ctx, o.Price); err != nil {
			errs = append(errs, fmt.Errorf("stripebilling: read price %s: %w", o.Price, err))
		}
	}
	return errors.Join(errs...)
}

// readPrice retrieves price from Stripe and keeps its Cost.
func (b *Billing) readPrice(ctx context.Context, price string) (*stripe.Price, error) {
	p, err := b.client.V1Prices.Retrieve(ctx, url.PathEscape(price), nil)
	if err != nil {
		return nil, err
	}
	b.costsMu.Lock()
	defer b.costsMu.Unlock()
	b.costs[price] = costOf(p)
	return p, nil
}

// costOf is what p charges: unknown for a price whose amount is not one
// fixed, whole amount a unit (tiered, chosen by the customer, or in
// fractions of a cent).
func costOf(p *stripe.Price) upscale.Cost {
	if p.BillingScheme == stripe.PriceBillingSchemeTiered || p.CustomUnitAmount != nil || p.UnitAmountDecimal != 0 && p.UnitAmountDecimal != float64(p.UnitAmount) {
		return upscale.Cost{} // no whole amount in the currency's smallest unit
	}
	c := upscale.Cost{Amount: p.UnitAmount, Currency: string(p.Currency)}
	if p.Recurring != nil {
		c.Interval, c.IntervalCount = string(p.Recurring.Interval), p.Recurring.IntervalCount
	}
	return c
}

// offer returns the offer of price, false when none is.
func (b *Billing) offer(price string) (upscale.Offer, bool) {
	i := slices.IndexFunc(b.opts.Offers, func(o upscale.Offer) bool { return o.Price == price })
	if i < 0 {
		return upscale.Offer{}, false
	}
	return b.opts.Offers[i], true
}

// Checkout makes a Checkout Session in which accountID buys price, a
// pack's or a plan's, and returns its URL. The session is recorded with
// what it offers before its URL is given out. An account has one plan
// session open at most, so that it cannot pay for two subscriptions: a
// plan's expires the account's open plan sessions before it makes its
// own, and, as another plan checkout of the account may have run at the
// same moment, all but the newest of them after (onePlanCheckout). Of two
// made at once for the same price, both callers get the one kept, unless
// the later one expired the other's before making its own (as it does
// one made in another tab); for different prices, the one whose session
// was expired gets an error wrapping upscale.ErrUnavailable, and trying
// again opens its own. It
// returns ErrSubscribed for a plan when the account has a live
// subscription, and an error wrapping upscale.ErrInvalidRequest for a
// price not on offer.
//
// It does all this within PageTimeout, or returns an error wrapping
// upscale.ErrUnavailable, as it does when Stripe answers 5xx or cannot be
// reached: nothing was charged, and trying again is safe. The account's
// customer is made under an idempotency key of the account, so a retry
// gets the one that a late answer brought no word of. A session that
// Stripe made but whose answer came too late is neither recorded nor
// given out: no one can pay it, Stripe expires it unpaid after 24 hours,
// and its events change nothing (a session this host did not record).
func (b *Billing) Checkout(ctx context.Context, accountID, price string) (_ string, err error) {
	ctx, done := b.forPage(ctx)
	defer func() { err = done(err) }()
	offer, ok := b.offer(price)
	if !ok {
		return "", upscale.Explain(upscale.ErrInvalidRequest, "Price %q is not on offer.", price)
	}
	record := upscale.Checkout{AccountID: accountID, Price: price, Units: offer.Units, Plan: offer.Plan, Label: offer.Label, At: b.opts.Now()}
	params := &stripe.CheckoutSessionCreateParams{
		Mode:              stripe.String(string(stripe.CheckoutSessionModePayment)),
		LineItems:         []*stripe.CheckoutSessionCreateLineItemParams{{Price: stripe.String(price), Quantity: stripe.Int64(1)}},
		SuccessURL:        stripe.String(b.opts.SuccessURL),
		CancelURL:         stripe.String(b.opts.CancelURL),
		ClientReferenceID: stripe.String(accountID),
		// Which offer a session is for, for onePlanCheckout only: what a
		// paid session grants is the record's.
		Metadata: map[string]string{"price": price},
	}
	if offer.Subscription() {
		terms, err := b.opts.Ledger.Terms(ctx, accountID)
		if err != nil {
			return "", err
		}
		if terms.Status.Live() {
			return "", ErrSubscribed
		}
		params.Mode = stripe.String(string(stripe.CheckoutSessionModeSubscription))
	}
	customer, err := b.customer(ctx, accountID)
	if err != nil {
		return "", err
	}
	params.Customer = stripe.String(customer)
	if offer.Subscription() {
		open, err := b.openPlanCheckouts(ctx, customer)
		if err == nil {
			err = b.expireAllBut(ctx, open, "")
		}
		if err != nil {
			return "", err
		}
	}
	params.SetIdempotencyKey("upscale-checkout-" + accountID + "-" + rand.Text())
	session, err := b.client.V1CheckoutSessions.Create(ctx, params)
	if err != nil {
		return "", fmt.Errorf("stripebilling: create a checkout session: %w", err)
	}
	record.ID = session.ID
	if err := b.opts.Checkouts.PutCheckout(ctx, record); err != nil {
		return "", err
	}
	if !offer.Subscription() {
		return session.URL, nil
	}
	kept, err := b.onePlanCheckout(ctx, customer)
	switch {
	case err != nil:
		return "", err
	case kept == nil:
		return session.URL, nil // a later checkout expired it, and has its buyer pay its own
	case kept.Metadata["price"] == price:
		return kept.URL, nil
	}
	return "", fmt.Errorf("stripebilling: %w: another plan checkout of account %s was opened at the same moment", upscale.ErrUnavailable, accountID)
}

// openPlanCheckouts returns customer's open plan (subscription mode)
// Checkout Sessions: an account pays for one plan at a time, and a
// second session paid would be a second subscription, billed beside the
// first.
func (b *Billing) openPlanCheckouts(ctx context.Context, customer string) ([]*stripe.CheckoutSession, error) {
	params := &stripe.CheckoutSessionListParams{Customer: stripe.String(customer), Status: stripe.String(string(stripe.CheckoutSessionStatusOpen))}
	var open []*stripe.CheckoutSession
	for s, err := range b.client.V1CheckoutSessions.List(ctx, params) {
		if err != nil {
			return nil, fmt.Errorf("stripebilling: list the account's open checkout sessions: %w", err)
		}
		if s.Mode == stripe.CheckoutSessionModeSubscription {
			open = append(open, s)
		}
	}
	return open, nil
}

// expireAllBut expires sessions but keep. One that closed meanwhile
// (paid, or expired by a checkout at the same moment) cannot be expired,
// and is left as it is.
func (b *Billing) expireAllBut(ctx context.Context, sessions []*stripe.CheckoutSession, keep string) error {
	for _, s := range sessions {
		if s.ID == keep {
			continue
		}
		var closed *stripe.Error
		if _, err := b.client.V1CheckoutSessions.Expire(ctx, url.PathEscape(s.ID), nil); err != nil && !(errors.As(err, &closed) && closed.HTTPStatusCode == http.StatusBadRequest) {
			return fmt.Errorf("stripebilling: expire the account's open plan checkout %s: %w", s.ID, err)
		}
	}
	return nil
}

// onePlanCheckout leaves customer one open plan Checkout Session, the
// newest (by creation, then ID, so that checkouts at the same moment all
// keep the same one), expiring the others, and returns it. None is open
// when a plan checkout that began later expired them all, the one just
// made included, before making its own.
func (b *Billing) onePlanCheckout(ctx context.Context, customer string) (*stripe.CheckoutSession, error) {
	open, err := b.openPlanCheckouts(ctx, customer)
	if err != nil || len(open) == 0 {
		return nil, err
	}
	newest := slices.MaxFunc(open, func(x, y *stripe.CheckoutSession) int {
		return cmp.Or(cmp.Compare(x.Created, y.Created), cmp.Compare(x.ID, y.ID))
	})
	return newest, b.expireAllBut(ctx, open, newest.ID)
}

// forPage bounds ctx by PageTimeout for what a page asks of Stripe, and
// returns the func that ends the bound and turns the page's error into
// one wrapping upscale.ErrUnavailable when trying again later may cure
// it: Stripe did not answer in time, could not be reached, or answered
// 5xx or 429. A buyer who went away (ctx canceled) is not Stripe's
// outage.
func (b *Billing) forPage(ctx context.Context) (context.Context, func(error) error) {
	ctx, cancel := context.WithTimeout(ctx, b.opts.PageTimeout)
	return ctx, func(err error) error {
		cancel()
		var apiErr *stripe.Error
		var netErr net.Error
		switch {
		case err == nil || errors.Is(err, upscale.ErrUnavailable) || errors.Is(err, context.Canceled):
			return err
		case errors.As(err, &apiErr):
			if apiErr.HTTPStatusCode < http.StatusInternalServerError && apiErr.HTTPStatusCode != http.StatusTooManyRequests {
				return err
			}
		case !errors.Is(err, context.DeadlineExceeded) && !errors.As(err, &netErr):
			return err
		}
		return fmt.Errorf("%w: %w", upscale.ErrUnavailable, err)
	}
}

// customer returns accountID's Stripe customer, made the first time:
// under an idempotency key of the account, so that two checkouts at once
// make one, and linked in the CheckoutStore, whose first link wins.
func (b *Billing) customer(ctx context.Context, accountID string) (string, error) {
	id, err := b.opts.Checkouts.Customer(ctx, accountID)
	if !errors.Is(err, upscale.ErrNotFound) {
		return id, err
	}
	params := &stripe.CustomerCreateParams{Metadata: map[string]string{"account": accountID}}
	params.SetIdempotencyKey("upscale-customer-" + accountID)
	c, err := b.client.V1Customers.Create(ctx, params)
	if err != nil {
		return "", fmt.Errorf("stripebilling: create the account's customer: %w", err)
	}
	return b.opts.Checkouts.LinkCustomer(ctx, accountID, c.ID)
}

// Portal makes a Customer Portal session for accountID, where it manages
// or cancels its subscription and finds its receipts, and returns its
// URL. It returns an error wrapping upscale.ErrNotFound when the account
// never bought anything (it is no customer yet), and one wrapping
// upscale.ErrUnavailable when Stripe did not answer within PageTimeout,
// answered 5xx or could not be reached.
func (b *Billing) Portal(ctx context.Context, accountID string) (_ string, err error) {
	ctx, done := b.forPage(ctx)
	defer func() { err = done(err) }()
	customer, err := b.opts.Checkouts.Customer(ctx, accountID)
	if err != nil {
		return "", err
	}
	s, err := b.client.V1BillingPortalSessions.Create(ctx, &stripe.BillingPortalSessionCreateParams{
		Customer: stripe.String(customer), ReturnURL: stripe.String(b.opts.ReturnURL),
	})
	if err != nil {
		return "", fmt.Errorf("stripebilling: create a portal session: %w", err)
	}
	return s.URL, nil
}

// Receipt returns the address of Stripe's receipt for purchase, a pack
// accountID paid for (the Purchase's ID, its Checkout Session): the
// receipt of the charge that paid it. It returns an error wrapping
// upscale.ErrNotFound for a purchase the account did not make, or one no
// charge paid (yet), and, as Portal, wraps upscale.ErrUnavailable when
// Stripe does not answer within PageTimeout.
func (b *Billing) Receipt(ctx context.Context, accountID, purchase string) (_ string, err error) {
	ctx, done := b.forPage(ctx)
	defer func() { err = done(err) }()
	record, err := b.opts.Checkouts.Checkout(ctx, purchase)
	if err != nil {
		return "", err
	}
	if record.AccountID != accountID {
		return "", fmt.Errorf("stripebilling: purchase %s is another account's: %w", purchase, upscale.ErrNotFound)
	}
	s, err := b.client.V1CheckoutSessions.Retrieve(ctx, url.PathEscape(purchase), nil)
	if err != nil {
		return "", fmt.Errorf("stripebilling: read checkout session %s: %w", purchase, err)
	}
	if s.PaymentIntent == nil {
		return "", fmt.Errorf("stripebilling: checkout session %s has no payment: %w", purchase, upscale.ErrNotFound)
	}
	for ch, err := range b.client.V1Charges.List(ctx, &stripe.ChargeListParams{PaymentIntent: stripe.String(s.PaymentIntent.ID)}) {
		if err != nil {
			return "", fmt.Errorf("stripebilling: list the charges of %s: %w", purchase, err)
		}
		if ch.Paid && ch.ReceiptURL != "" {
			return ch.ReceiptURL, nil
		}
	}
	return "", fmt.Errorf("stripebilling: no charge paid checkout session %s: %w", purchase, upscale.ErrNotFound)
}

// Customer reports whether accountID has a Stripe customer, made by its
// first checkout: whether Portal has receipts and payment details to
// show it. It asks the CheckoutStore, never Stripe.
func (b *Billing) Customer(ctx context.Context, accountID string) (bool, error) {
	_, err := b.opts.Checkouts.Customer(ctx, accountID)
	if errors.Is(err, upscale.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Fulfil looks up Checkout Session sessionID, which accountID made, and
// applies it as its webhook event would: a buyer who reaches the success
// page before the webhook sees the credits, by the same grant, made once.
// It returns what the session offered, and whether it is paid: a delayed
// method (a bank debit) is still processing while it is not. It returns
// an error wrapping upscale.ErrNotFound for a session the account did not
// make, and one wrapping upscale.ErrUnavailable when Stripe did not
// answer within PageTimeout, answered 5xx or could not be reached: the
// webhook applies the session then, when Stripe sends its event.
func (b *Billing) Fulfil(ctx context.Context, accountID, sessionID string) (_ upscale.Checkout, _ bool, err error) {
	ctx, done := b.forPage(ctx)
	defer func() { err = done(err) }()
	record, err := b.opts.Checkouts.Checkout(ctx, sessionID)
	if err != nil {
		return upscale.Checkout{}, false, err
	}
	if record.AccountID != accountID {
		return upscale.Checkout{}, false, fmt.Errorf("checkout %q of another account: %w", sessionID, upscale.ErrNotFound)
	}
	s, err := b.client.V1CheckoutSessions.Retrieve(ctx, url.PathEscape(sessionID), nil)
	if err != nil {
		return upscale.Checkout{}, false, fmt.Errorf("stripebilling: look the session up: %w", err)
	}
	paid, err := b.applySession(ctx, s, "success-page:"+sessionID, b.opts.Now())
	return record, paid, err
}

// applySession applies a Checkout Session as Stripe reports it, in event
// at at: a paid pack is granted, a subscription's state is applied. It
// reports whether the session is paid. A session this host did not
// record is not its own, and changes nothing.
func (b *Billing) applySession(ctx context.Context, s *stripe.CheckoutSession, event string, at time.Time) (paid bool, err error) {
	record, err := b.opts.Checkouts.Checkout(ctx, s.ID)
	if errors.Is(err, upscale.ErrNotFound) {
		b.opts.Logger.Info("stripebilling: a checkout session this host did not make; nothing to apply", "session", s.ID, "event", event)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	paid = s.PaymentStatus == stripe.CheckoutSessionPaymentStatusPaid || s.PaymentStatus == stripe.CheckoutSessionPaymentStatusNoPaymentRequired
	switch {
	case !paid:
		return false, nil
	case s.Mode == stripe.CheckoutSessionModeSubscription && s.Subscription != nil:
		return true, b.syncSubscription(ctx, s.Subscription.ID, event)
	case record.Units > 0:
		_, err := b.opts.Ledger.Grant(ctx, upscale.Grant{
			ID: s.ID, AccountID: record.AccountID, Pool: upscale.PoolCredit, Units: record.Units,
			Label: record.Label, Event: event, At: at,
		})
		return true, err
	}
	return true, nil
}

// syncSubscription reads subscription id as Stripe holds it now and
// applies its state to its account: never a change in the order events
// arrive, always the current state, as of when its read began (the
// terms' AsOf). An account keeps its plan while any subscription of its
// customer lives: when id has ended beside a live one, the live one's
// state is applied; when two live, both billed, it is logged at ERROR and
// counted (Stats).
func (b *Billing) syncSubscription(ctx context.Context, id, event string) error {
	// Before the read, so that a read that began before a later event's
	// is older than it, however slowly Stripe answers.
	asOf := b.opts.Now()
	sub, err := b.client.V1Subscriptions.Retrieve(ctx, url.PathEscape(id), nil)
	if err != nil {
		return fmt.Errorf("stripebilling: read subscription %s: %w", id, err)
	}
	if sub.Customer == nil {
		return fmt.Errorf("stripebilling: subscription %s has no customer", id)
	}
	account, err := b.opts.Checkouts.CustomerAccount(ctx, sub.Customer.ID)
	if errors.Is(err, upscale.ErrNotFound) {
		b.opts.Logger.Info("stripebilling: a subscription of a customer this host did not make; nothing to apply", "subscription", id, "event", event)
		return nil
	}
	if err != nil {
		return err
	}
	others, err := b.liveSubscriptions(ctx, sub.Customer.ID, sub.ID)
	if err != nil {
		return err
	}
	switch {
	case len(others) > 0 && upscale.SubscriptionStatus(sub.Status).Live():
		b.doubles.Add(1)
		b.opts.Logger.Error("stripebilling: an account has two live subscriptions, each billed; cancel and refund all but one (standalone billing doubles lists them)",
			"account", account, "subscription", sub.ID, "others", subscriptionIDs(others), "event", event)
	case len(others) > 0:
		b.opts.Logger.Info("stripebilling: a subscription ended beside the account's live one; the live one's state applies", "account", account, "subscription", sub.ID, "live", others[0].ID, "event", event)
		sub = others[0]
	}
	terms := upscale.PlanTerms{
		AccountID: account, Plan: b.opts.FreePlan, Subscription: sub.ID, Status: upscale.SubscriptionStatus(sub.Status),
		CancelAtPeriodEnd: sub.CancelAtPeriodEnd, AsOf: asOf, Event: event,
	}
	if sub.Items != nil && len(sub.Items.Data) > 0 {
		item := sub.Items.Data[0]
		terms.PaidThrough = time.Unix(item.CurrentPeriodEnd, 0).UTC()
		if offer, ok := b.offer(priceID(item.Price)); ok && offer.Subscription() && terms.Status.Live() {
			terms.Plan = offer.Plan
		}
	}
	_, err = b.opts.Ledger.ApplyTerms(ctx, terms)
	return err
}

// liveSubscriptions returns customer's live subscriptions at Stripe,
// all but except.
func (b *Billing) liveSubscriptions(ctx context.Context, customer, except string) ([]*stripe.Subscription, error) {
	var live []*stripe.Subscription
	for s, err := range b.client.V1Subscriptions.List(ctx, &stripe.SubscriptionListParams{Customer: stripe.String(customer)}) {
		if err != nil {
			return nil, fmt.Errorf("stripebilling: list the customer's subscriptions: %w", err)
		}
		if s.ID != except && upscale.SubscriptionStatus(s.Status).Live() {
			live = append(live, s)
		}
	}
	return live, nil
}

// subscriptionIDs are subs' IDs.
func subscriptionIDs(subs []*stripe.Subscription) []string {
	ids := make([]string, len(subs))
	for i, s := range subs {
		ids[i] = s.ID
	}
	return ids
}

// priceID is p's ID, "" for none.
func priceID(p *stripe.Price) string {
	if p == nil {
		return ""
	}
	return p.ID
}
