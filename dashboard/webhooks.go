package dashboard

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"

	"github.com/upscalekit/upscale"
)

// WebhookTester sends an account a signed test event at an address:
// upscale.Handler is one (SendTestWebhook).
type WebhookTester interface {
	SendTestWebhook(ctx context.Context, accountID, url string) (upscale.WebhookDelivery, error)
}

// webhooksPage shows whether the account has a webhook signing secret,
// by its last characters, a secret just made or asked to be shown, its
// webhooks' deliveries (Config.WebhookLog), and the test event just sent.
type webhooksPage struct {
	frame
	Hint, Made string
	// Shown are the secrets that sign now, when asked for (show).
	Shown      []string
	show       bool
	Deliveries []upscale.WebhookDelivery
	// Tester is whether the page sends test events; Tested the one just
	// sent, to TestURL, or TestProblem why it was not.
	Tester               bool
	Tested               *upscale.WebhookDelivery
	TestURL, TestProblem string
}

func (d *Dashboard) webhooks(w http.ResponseWriter, r *http.Request, account string) {
	d.renderWebhooks(w, r, account, http.StatusOK, webhooksPage{})
}

// renderWebhooks renders the webhooks page with the account's secret's
// hint and deliveries, and what page already holds.
func (d *Dashboard) renderWebhooks(w http.ResponseWriter, r *http.Request, account string, status int, page webhooksPage) {
	secrets, err := d.cfg.WebhookSecrets.WebhookSecrets(r.Context(), account)
	if err != nil {
		d.fail(w, r, account, "read the webhook secrets", err)
		return
	}
	page.frame, page.Tester = d.frame(r, account, "webhooks"), d.cfg.WebhookTester != nil
	if len(secrets) > 0 {
		page.Hint = "…" + secrets[0][max(len(secrets[0])-4, 0):]
	}
	if page.show {
		page.Shown = secrets
	}
	if d.cfg.WebhookLog != nil {
		if page.Deliveries, err = d.cfg.WebhookLog.Deliveries(r.Context(), account, 0); err != nil {
			d.fail(w, r, account, "read the webhook log", err)
			return
		}
	}
	d.render(w, r, status, "webhooks", page)
}

func (d *Dashboard) rotateWebhookSecret(w http.ResponseWriter, r *http.Request, account string) {
	secret, err := d.cfg.WebhookSecrets.RotateWebhookSecret(r.Context(), account)
	if err != nil {
		d.fail(w, r, account, "make a webhook secret", err)
		return
	}
	d.cfg.Logger.Info("dashboard: webhook secret made", "account", account)
	d.renderWebhooks(w, r, account, http.StatusCreated, webhooksPage{Made: secret})
}

// showWebhookSecrets shows the secrets that sign the account's webhooks,
// in the answer to the POST that asked, as a new one is shown: the one
// its first webhookUrl made was never shown.
func (d *Dashboard) showWebhookSecrets(w http.ResponseWriter, r *http.Request, account string) {
	d.cfg.Logger.Info("dashboard: webhook secrets shown", "account", account)
	d.renderWebhooks(w, r, account, http.StatusOK, webhooksPage{show: true})
}

// testEventsPerMinute is how many test events an account may send a
// minute, five at once: enough to try a receiver, too few to make the
// server post for anyone at will.
const testEventsPerMinute = 5

// sendTestWebhook posts a test event to the address the form gives,
// within the account's allowance of test events.
func (d *Dashboard) sendTestWebhook(w http.ResponseWriter, r *http.Request, account string) {
	page := webhooksPage{TestURL: r.PostFormValue("url")}
	allowed, err := d.testEvents.Allow(r.Context(), upscale.DigestKey("webhook-test "+account))
	if err != nil {
		d.fail(w, r, account, "count the test events", err)
		return
	}
	if !allowed.Allowed {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(allowed.RetryAfter.Seconds()))))
		page.TestProblem = fmt.Sprintf("At most %d test events a minute; send the next in %d seconds.", testEventsPerMinute, int(math.Ceil(allowed.RetryAfter.Seconds())))
		d.renderWebhooks(w, r, account, http.StatusTooManyRequests, page)
		return
	}
	delivery, err := d.cfg.WebhookTester.SendTestWebhook(r.Context(), account, page.TestURL)
	status := http.StatusOK
	switch {
	case errors.Is(err, upscale.ErrInvalidWebhookURL):
		status, page.TestProblem = http.StatusBadRequest, err.Error() // an explained refusal: a sentence for the caller
	case err != nil:
		d.fail(w, r, account, "send a test event", err)
		return
	default:
		page.Tested = &delivery
	}
	d.renderWebhooks(w, r, account, status, page)
}
