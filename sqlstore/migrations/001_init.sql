-- One schema for SQLite and PostgreSQL: only types and syntax both accept.
-- Times are Unix nanoseconds; flags are 0 or 1.

CREATE TABLE plans (
	name           TEXT PRIMARY KEY,
	paid           INTEGER NOT NULL,
	unlimited      INTEGER NOT NULL,
	monthly_images BIGINT  NOT NULL CHECK (monthly_images >= 0),
	max_file_bytes BIGINT  NOT NULL CHECK (max_file_bytes >= 0)
);

CREATE TABLE accounts (
	id          TEXT PRIMARY KEY,
	plan        TEXT   NOT NULL REFERENCES plans (name),
	credits     BIGINT NOT NULL CHECK (credits >= 0),
	share_bonus BIGINT NOT NULL CHECK (share_bonus >= 0),
	-- The free pool counts images used in free_month ("2006-01", UTC); a
	-- reservation in a later month starts the count again, so no job is
	-- needed at the turn of the month.
	free_month  TEXT   NOT NULL DEFAULT '',
	free_used   BIGINT NOT NULL DEFAULT 0 CHECK (free_used >= 0)
);

CREATE TABLE api_keys (
	digest     TEXT PRIMARY KEY, -- hex SHA-256 of the key; the key itself is never stored
	account_id TEXT   NOT NULL REFERENCES accounts (id),
	created_at BIGINT NOT NULL,
	revoked_at BIGINT
);

CREATE TABLE reservations (
	id         TEXT PRIMARY KEY,
	account_id TEXT   NOT NULL REFERENCES accounts (id),
	pool       TEXT   NOT NULL,
	month      TEXT   NOT NULL, -- the free pool's month when reserved
	expires_at BIGINT NOT NULL
);
CREATE INDEX reservations_by_expiry ON reservations (expires_at);

-- Append-only: every change to a balance, and every commit, is a row. The
-- balance of a pool equals its starting grant plus the sum of its deltas.
CREATE TABLE journal (
	id         TEXT PRIMARY KEY,
	account_id TEXT   NOT NULL,
	pool       TEXT   NOT NULL,
	delta      BIGINT NOT NULL,
	reason     TEXT   NOT NULL, -- grant, set, reserve, commit, release, expire
	request_id TEXT   NOT NULL, -- the reservation, or the admin operation
	month      TEXT   NOT NULL, -- the free pool's month the row counts against
	created_at BIGINT NOT NULL
);
CREATE INDEX journal_by_account ON journal (account_id, month);
