-- Each account's share code (dashboard.AccountDirectory.ShareCode): the
-- opaque part of its share link, made on first ask.
CREATE TABLE share_codes (
	account_id TEXT PRIMARY KEY REFERENCES accounts (id),
	code       TEXT NOT NULL UNIQUE
);
