-- What became of each account's webhooks (upscale.WebhookLog): one row
-- per account and webhook, its attempts counted, the last one's outcome
-- kept; rows past the store's CallRetention are swept.
CREATE TABLE webhook_deliveries (
	account_id  TEXT    NOT NULL,
	id          TEXT    NOT NULL,
	url         TEXT    NOT NULL,
	event       TEXT    NOT NULL,
	attempts    INTEGER NOT NULL,
	last_at     BIGINT  NOT NULL,
	last_status INTEGER NOT NULL,
	last_error  TEXT    NOT NULL,
	delivered   INTEGER NOT NULL,
	PRIMARY KEY (account_id, id)
);
CREATE INDEX webhook_deliveries_by_account_last ON webhook_deliveries (account_id, last_at);
CREATE INDEX webhook_deliveries_by_last ON webhook_deliveries (last_at);
