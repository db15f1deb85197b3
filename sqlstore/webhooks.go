package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/upscalekit/upscale"
)

// WebhookSecrets implements upscale.WebhookSecrets.
func (s *Store) WebhookSecrets(ctx context.Context, accountID string) ([]string, error) {
	var current, previous string
	var rotated int64
	err := s.db.QueryRowContext(ctx, `SELECT current_secret, previous_secret, rotated_at FROM webhook_secrets WHERE account_id = $1`, accountID).
		Scan(&current, &previous, &rotated)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, classify(ctx, err)
	}
	if previous != "" && s.opts.Now().Before(time.Unix(0, rotated).Add(upscale.WebhookSecretOverlap)) {
		return []string{current, previous}, nil
	}
	return []string{current}, nil
}

// RotateWebhookSecret implements upscale.WebhookSecrets: the account must
// exist.
func (s *Store) RotateWebhookSecret(ctx context.Context, accountID string) (string, error) {
	secret := upscale.NewWebhookSecret()
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var id string
		if err := tx.QueryRowContext(ctx, `SELECT id FROM accounts WHERE id = $1`, accountID).Scan(&id); err != nil {
			return noRows(err, "account", accountID)
		}
		_, err := tx.ExecContext(ctx, `
			INSERT INTO webhook_secrets (account_id, current_secret, previous_secret, rotated_at) VALUES ($1, $2, '', $3)
			ON CONFLICT (account_id) DO UPDATE SET
				previous_secret = webhook_secrets.current_secret, current_secret = excluded.current_secret, rotated_at = excluded.rotated_at`,
			accountID, secret, s.opts.Now().UnixNano())
		return err
	})
	if err != nil {
		return "", err
	}
	return secret, nil
}
