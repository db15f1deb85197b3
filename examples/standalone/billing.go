package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/billing/stripebilling"
	"github.com/upscalekit/upscale/dashboard"
	"github.com/upscalekit/upscale/internal/periodic"
	"github.com/upscalekit/upscale/sqlstore"
)

// fileBilling is the config file's "billing": what the server sells
// through Stripe, by Stripe price ID.
type fileBilling struct {
	Packs []filePack `json:"packs"`
	Plans []fileSub  `json:"plans"`
	// FreePlan is the plan an account returns to when its subscription
	// ends; empty means "free".
	FreePlan string `json:"freePlan"`
}

type filePack struct {
	Price string `json:"price"`
	Units int64  `json:"units"`
	Label string `json:"label"`
}

type fileSub struct {
	Price string `json:"price"`
	Plan  string `json:"plan"`
	Label string `json:"label"`
}

// The paths Stripe's pages and events reach the server at.
const (
	webhookPath   = "/billing/stripe/webhook"
	billingPath   = "/dashboard/billing"
	stripeKeyEnv  = "STRIPE_SECRET_KEY"
	stripeHookEnv = "STRIPE_WEBHOOK_SECRET"
)

// validate checks the billing section against the file's plans.
func (b fileBilling) validate(plans map[string]filePlan) error {
	if _, ok := plans[b.freePlan()]; !ok && len(b.Packs)+len(b.Plans) > 0 {
		return fmt.Errorf("billing.freePlan: unknown plan %q (the plan an account returns to when its subscription ends)", b.freePlan())
	}
	for i, p := range b.Packs {
		if p.Price == "" || p.Units <= 0 || p.Label == "" {
			return fmt.Errorf("billing.packs[%d]: a pack needs a price, a positive number of units and a label", i)
		}
	}
	for i, p := range b.Plans {
		if _, ok := plans[p.Plan]; !ok {
			return fmt.Errorf("billing.plans[%d]: plan %q is not one of the file's plans (%s)", i, p.Plan, strings.Join(slices.Sorted(maps.Keys(plans)), ", "))
		}
		if p.Price == "" || p.Label == "" {
			return fmt.Errorf("billing.plans[%d]: a plan offer needs a price and a label, which the Billing page shows", i)
		}
	}
	return nil
}

func (b fileBilling) freePlan() string {
	if b.FreePlan == "" {
		return "free"
	}
	return b.FreePlan
}

// offers are the file's packs and plans as what is on sale.
func (c fileConfig) offers() []upscale.Offer {
	var offers []upscale.Offer
	for _, p := range c.Billing.Packs {
		offers = append(offers, upscale.Offer{Price: p.Price, Units: p.Units, Label: p.Label})
	}
	for _, p := range c.Billing.Plans {
		offers = append(offers, upscale.Offer{Price: p.Price, Plan: c.Plans[p.Plan].plan(p.Plan), Label: p.Label})
	}
	return offers
}

// newBilling returns the Stripe seller when STRIPE_SECRET_KEY is set, nil
// when it is not: without it nothing is sold and nothing changes.
// apiBase, for tests, points the client at a server on loopback.
func newBilling(c fileConfig, store *sqlstore.Store, publicURL, apiBase string, logger *slog.Logger) (*stripebilling.Billing, error) {
	key, hook := os.Getenv(stripeKeyEnv), os.Getenv(stripeHookEnv)
	switch {
	case key == "" && apiBase != "":
		return nil, fmt.Errorf("-stripe-api-base needs %s", stripeKeyEnv)
	case key == "":
		return nil, nil
	case hook == "":
		return nil, fmt.Errorf("%s is set but %s is not: the webhook could not verify Stripe's events", stripeKeyEnv, stripeHookEnv)
	case len(c.offers()) == 0:
		return nil, fmt.Errorf("%s is set but the config file offers nothing: give billing.packs or billing.plans (-config)", stripeKeyEnv)
	}
	return stripebilling.New(stripebilling.Options{
		SecretKey: key, WebhookSecret: hook, APIBase: apiBase,
		Ledger: store, Checkouts: store, Offers: c.offers(), FreePlan: c.Plans[c.Billing.freePlan()].plan(c.Billing.freePlan()),
		SuccessURL: dashboard.CheckoutDoneURL(publicURL+"/dashboard/", "{CHECKOUT_SESSION_ID}"),
		CancelURL:  publicURL + billingPath, ReturnURL: publicURL + billingPath,
		Logger: logger,
	})
}

// checkAPIBase refuses an -stripe-api-base that is not plain http on
// loopback: it is for tests against stripe-mock or a fake, and would
// otherwise send the secret key wherever it points.
func checkAPIBase(base string) error {
	if base == "" {
		return nil
	}
	u, err := url.Parse(base)
	if err != nil || u.Scheme != "http" || u.Path != "" && u.Path != "/" {
		return fmt.Errorf("-stripe-api-base %q: want http://127.0.0.1:PORT, a test server on loopback", base)
	}
	if ip := net.ParseIP(u.Hostname()); (ip == nil || !ip.IsLoopback()) && u.Hostname() != "localhost" {
		return fmt.Errorf("-stripe-api-base %q: only a loopback address is allowed (it is for tests)", base)
	}
	return nil
}

// adminBilling is the Stripe seller of the config file a.config, for the
// admin subcommand command.
func adminBilling(store *sqlstore.Store, a adminArgs, command string) (*stripebilling.Billing, fileConfig, error) {
	if err := checkAPIBase(a.stripeAPIBase); err != nil {
		return nil, fileConfig{}, err
	}
	if a.config == "" {
		return nil, fileConfig{}, fmt.Errorf("%s: give -config, the server's file, whose billing section says what is sold", command)
	}
	c, err := loadConfig(a.config)
	if err != nil {
		return nil, fileConfig{}, err
	}
	b, err := newBilling(c, store, a.publicURL, a.stripeAPIBase, slog.New(slog.DiscardHandler))
	if err == nil && b == nil {
		err = fmt.Errorf("%s: set %s and %s", command, stripeKeyEnv, stripeHookEnv)
	}
	return b, c, err
}

// billingCheck is "standalone billing check": it asks Stripe whether the
// key, the prices of the config file and the webhook endpoint are set up
// to sell, and prints what is not, or what each offer costs.
func billingCheck(ctx context.Context, store *sqlstore.Store, a adminArgs, stdout io.Writer) error {
	b, c, err := adminBilling(store, a, "billing check")
	if err != nil {
		return err
	}
	hook := a.publicURL + webhookPath
	problems, err := b.Check(ctx, hook)
	if err != nil {
		return err
	}
	for _, p := range problems {
		fmt.Fprintln(stdout, "problem:", p)
	}
	if len(problems) > 0 {
		return fmt.Errorf("billing check: %d problems", len(problems))
	}
	fmt.Fprintf(stdout, "ok: %d offers, webhook endpoint %s\n", len(c.offers()), hook)
	for _, o := range b.Offers() {
		fmt.Fprintf(stdout, "%s (%s): %s\n", o.Price, o.Label, cmp.Or(dashboard.Price(o.Cost), "an amount the customer chooses, or tiered"))
	}
	return nil
}

// billingDoubles is "standalone billing doubles": it asks Stripe for the
// accounts with more than one live subscription, each billed (two plan
// checkouts paid in the same moment), and prints them, for the operator
// to cancel and refund all but one.
func billingDoubles(ctx context.Context, store *sqlstore.Store, a adminArgs, stdout io.Writer) error {
	b, _, err := adminBilling(store, a, "billing doubles")
	if err != nil {
		return err
	}
	doubles, err := b.Doubles(ctx)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "ACCOUNT\tCUSTOMER\tLIVE SUBSCRIPTIONS")
	for _, d := range doubles {
		fmt.Fprintf(w, "%s\t%s\t%s\n", d.AccountID, d.Customer, strings.Join(d.Subscriptions, " "))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "accounts with more than one live subscription: %d\n", len(doubles))
	return err
}

// sell makes the Stripe seller when STRIPE_SECRET_KEY is set (newBilling)
// and counts in /metrics what its operator must look into. Its wording
// is the handler's: when something is sold, a caller out of quota is sent
// to the Billing page.
func (p *process) sell() (upscale.Wording, error) {
	seller, err := newBilling(p.cfg, p.store, p.publicURL, p.o.stripeAPIBase, p.logger)
	if err != nil || seller == nil {
		return upscale.Wording{}, err
	}
	p.seller = seller
	readPrices := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := seller.ReadPrices(ctx); err != nil {
			p.logger.Warn("standalone: read the prices at Stripe; the pages show no amount for those until read, tried again in an hour", "err", err)
		}
	}
	readPrices() // before the first page, which shows them
	reading := periodic.Start(time.Hour, readPrices)
	p.onClose(reading.Stop)
	p.registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "upscale_billing_double_subscriptions_total",
		Help: "Times a subscription's state was applied while its account had another live subscription at Stripe, each billed: cancel and refund all but one (standalone billing doubles).",
	}, func() float64 { return float64(seller.Stats().DoubleSubscriptions) }), prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "upscale_billing_refused_events_total",
		Help: "Stripe webhook events refused because their signature does not verify: forged, replayed, or signed with another webhook secret.",
	}, func() float64 { return float64(seller.Stats().RefusedEvents) }))
	return upscale.Wording{BuyURL: p.publicURL + billingPath}, nil
}
