-- Secrets every replica must share, by name, made on first use (the
-- dashboard's signing key).
CREATE TABLE secrets (
	name  TEXT PRIMARY KEY,
	value TEXT NOT NULL
);
