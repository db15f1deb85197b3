-- The accounts opened through the dashboard by email
-- (dashboard.AccountDirectory): one per address, case-folded. referrer is
-- the account whose share link brought it, '' for none; opened_at, Unix
-- nanoseconds, lists sign-ups by day.
CREATE TABLE email_accounts (
	email      TEXT PRIMARY KEY,
	account_id TEXT NOT NULL UNIQUE REFERENCES accounts (id),
	referrer   TEXT NOT NULL,
	opened_at  BIGINT NOT NULL
);
