-- Each account's webhook signing secret, and the one it replaced at
-- rotated_at, which signs beside it for upscale.WebhookSecretOverlap.
CREATE TABLE webhook_secrets (
	account_id      TEXT PRIMARY KEY REFERENCES accounts (id),
	current_secret  TEXT   NOT NULL,
	previous_secret TEXT   NOT NULL,
	rotated_at      BIGINT NOT NULL
);
