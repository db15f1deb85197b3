-- Each account's recent calls, requests and jobs, for its history page
-- (upscale.CallHistory): one row per account and call ID, the latest
-- record of it; rows past the store's CallRetention are swept.
CREATE TABLE calls (
	account_id     TEXT    NOT NULL,
	id             TEXT    NOT NULL,
	key_id         TEXT    NOT NULL,
	job            INTEGER NOT NULL,
	ended_at       BIGINT  NOT NULL,
	scale          INTEGER NOT NULL,
	image_type     TEXT    NOT NULL,
	denoise        TEXT    NOT NULL,
	status         INTEGER NOT NULL,
	code           TEXT    NOT NULL,
	pool           TEXT    NOT NULL,
	engine         TEXT    NOT NULL,
	took           BIGINT  NOT NULL,
	source_bytes   BIGINT  NOT NULL,
	result_bytes   BIGINT  NOT NULL,
	result_url     TEXT    NOT NULL,
	result_expires BIGINT  NOT NULL,
	PRIMARY KEY (account_id, id)
);
CREATE INDEX calls_by_account_end ON calls (account_id, ended_at);
CREATE INDEX calls_by_end ON calls (ended_at);
