package main

import (
	"cmp"
	"context"
	_ "embed"
	"fmt"
	"net/http"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/upscalekit/upscale/accounts"
	"github.com/upscalekit/upscale/accounts/smtpmail"
	"github.com/upscalekit/upscale/dashboard"
	"github.com/upscalekit/upscale/internal/periodic"
	"github.com/upscalekit/upscale/sqlstore"
)

// newSignIn returns the dashboard's sign-in for a server at publicURL:
// links and sessions signed with the database's secret, so that every
// replica accepts them, links spent once and sign-outs kept across
// replicas (and restarts); with email, links asked for by email too;
// clients named by what the proxies in trustedProxies forwarded.
func newSignIn(ctx context.Context, store *sqlstore.Store, publicURL string, email *dashboard.EmailOptions, trustedProxies []netip.Prefix) (*dashboard.SignIn, error) {
	secret, err := store.Secret(ctx, "dashboard")
	if err != nil {
		return nil, err
	}
	return dashboard.NewSignIn(dashboard.SignInOptions{
		Secret: secret, BaseURL: publicURL + "/dashboard/", Links: store, Sessions: store, Email: email,
		ClientAddress: dashboard.ProxiedClientAddress(trustedProxies),
	})
}

// shareBonusInterval is how often the standalone pays what share links
// earned.
const shareBonusInterval = time.Minute

// smtpURLEnv names the environment variable -smtp-url defaults to.
const smtpURLEnv = "UPSCALE_SMTP_URL"

// mailOptions are the sign-in's by email when -smtp-url is given: mail
// kept in the job queue's database and sent through that server from
// -mail-from by this process (and any other that sends mail), at most
// -mails-per-hour links an hour from this process, accounts opened on the
// config's sign-up plan unless -signups closed; nil without -smtp-url. stop stops sending, giving the mail under way a
// moment.
func (o options) mailOptions(ctx context.Context, cfg fileConfig, store *sqlstore.Store, jobs queues) (email *dashboard.EmailOptions, stop func(), err error) {
	if o.smtpURL == "" {
		return nil, func() {}, nil
	}
	mailer, err := smtpmail.New(smtpmail.Options{URL: o.smtpURL, From: o.mailFrom})
	if err != nil {
		return nil, nil, fmt.Errorf("-smtp-url, -mail-from: %w", err)
	}
	email = &dashboard.EmailOptions{Directory: store, SignUps: o.signUps == "open", OpensPerDay: o.signUpsPerDay, MailsPerHour: o.mailsPerHour}
	if email.SignUps {
		name := cmp.Or(cfg.SignUpPlan, "free")
		p, ok := cfg.Plans[name]
		if !ok {
			return nil, nil, fmt.Errorf("-signups open: the config has no plan %q for the accounts people open; name one as signUpPlan", name)
		}
		email.Plan = p.plan(name)
	}
	stopSending, err := jobs.SendMail(ctx, mailSenders, mailer)
	if err != nil {
		return nil, nil, fmt.Errorf("send the mail: %w", err)
	}
	email.Outbox = jobs
	return email, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		stopSending(ctx)
	}, nil
}

// buildDashboard builds the dashboard on the stores and the API's
// handler: sign-in by link, by email too with -smtp-url (and with it, on
// open sign-ups and the config's shareBonus, the share bonus, paid every
// shareBonusInterval), and the Billing page when the server sells.
func (p *process) buildDashboard(ctx context.Context) (http.Handler, error) {
	email, closeMail, err := p.o.mailOptions(ctx, p.cfg, p.store, p.jobs)
	if err != nil {
		return nil, err
	}
	p.email = email
	p.onClose(closeMail)
	if p.signIn, err = newSignIn(ctx, p.store, p.publicURL, email, p.o.trustedProxies); err != nil {
		return nil, err
	}
	if email != nil {
		p.registry.MustRegister(mailCounters(p.signIn)...)
	}
	dashboardCfg := dashboard.Config{
		SignIn: p.signIn, Keys: p.keys, Ledger: p.store, WebhookSecrets: p.store, Logger: p.logger,
		API: p.handler, APIURL: p.publicURL + "/api/v1/upscale", Brand: dashboard.Brand(p.cfg.Brand), History: p.store,
		WebhookLog: p.store, WebhookTester: p.handler,
		Samples: []dashboard.Sample{{Name: "A photo (256×256)", URL: sampleURL(p.publicURL, "photo.png")}, {Name: "Line art (250×361)", URL: sampleURL(p.publicURL, "lineart.png")}},
	}
	if p.cfg.ShareBonus != nil && email != nil && email.SignUps {
		bonus, err := accounts.NewShareBonus(accounts.ShareBonusOptions{Directory: p.store, Ledger: p.store, PerSignup: p.cfg.ShareBonus.PerSignup, MonthlyCap: p.cfg.ShareBonus.MonthlyCap})
		if err != nil {
			return nil, fmt.Errorf("the config's shareBonus: %w", err)
		}
		dashboardCfg.ShareBonus = bonus
		paying := periodic.Start(shareBonusInterval, func() {
			ctx, cancel := context.WithTimeout(context.Background(), shareBonusInterval)
			defer cancel()
			if _, err := bonus.Pay(ctx); err != nil {
				p.logger.Warn("standalone: pay the share bonus; tried again in a minute", "err", err)
			}
		})
		p.onClose(paying.Stop)
	}
	if p.seller != nil { // not a nil *Billing in the interface
		dashboardCfg.Seller = p.seller
	}
	dash, err := dashboard.New(dashboardCfg)
	if err != nil {
		return nil, err
	}
	caption := "the photo ×2 by the " + p.chosen.engine + " engine"
	p.front, err = dash.Storefront(dashboard.StorefrontOptions{Dashboard: "/dashboard/",
		Showcase: &dashboard.Showcase{Before: sampleURL(p.publicURL, showcaseSample), After: p.publicURL + showcasePath, Caption: caption}})
	if err != nil {
		return nil, err
	}
	return dash, nil
}

// mailCounters are signIn's counts of the links it mailed, of those past
// -mails-per-hour and of those for no account, as Prometheus counters.
func mailCounters(signIn *dashboard.SignIn) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "upscale_dashboard_mails_posted_total", Help: "Sign-in links posted to be mailed."},
			func() float64 { return float64(signIn.MailStats().Posted) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "upscale_dashboard_mails_over_budget_total", Help: "Sign-in links not mailed: -mails-per-hour was spent."},
			func() float64 { return float64(signIn.MailStats().OverBudget) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "upscale_dashboard_links_no_account_total", Help: "Sign-in links asked for addresses with no account while sign-ups are closed: none mailed."},
			func() float64 { return float64(signIn.MailStats().NoAccount) }),
	}
}

// mailSenders is how many mails a process sends at once.
const mailSenders = 2
