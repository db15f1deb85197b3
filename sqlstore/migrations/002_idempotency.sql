-- The answers of requests sent with an Idempotency-Key (upscale.IdempotencyStore).
CREATE TABLE idempotency_keys (
	account_id      TEXT    NOT NULL,
	idempotency_key TEXT    NOT NULL,
	fingerprint     TEXT    NOT NULL, -- hex SHA-256 of the decoded request
	status          INTEGER,          -- NULL while the request runs
	body            TEXT,             -- the JSON answer, once finished
	link_expires    BIGINT  NOT NULL DEFAULT 0,
	lease_ends      BIGINT  NOT NULL, -- an unfinished claim holds the key until then
	expires_at      BIGINT  NOT NULL,
	PRIMARY KEY (account_id, idempotency_key)
);
CREATE INDEX idempotency_keys_by_expiry ON idempotency_keys (expires_at);
