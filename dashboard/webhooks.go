package dashboard

import (
	"net/http"
)

// webhooksPage shows whether the account has a webhook signing secret,
// by its last characters, and a secret just made, once.
type webhooksPage struct {
	frame
	Hint, Made string
}

func (d *Dashboard) webhooks(w http.ResponseWriter, r *http.Request, account string) {
	d.renderWebhooks(w, r, account, http.StatusOK, "")
}

// renderWebhooks renders the webhooks page, with made, the secret just
// made, when there is one.
func (d *Dashboard) renderWebhooks(w http.ResponseWriter, r *http.Request, account string, status int, made string) {
	secrets, err := d.cfg.WebhookSecrets.WebhookSecrets(r.Context(), account)
	if err != nil {
		d.fail(w, r, account, "read the webhook secrets", err)
		return
	}
	page := webhooksPage{frame: d.frame(r, account, "webhooks"), Made: made}
	if len(secrets) > 0 {
		page.Hint = "…" + secrets[0][max(len(secrets[0])-4, 0):]
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
	d.renderWebhooks(w, r, account, http.StatusCreated, secret)
}
