-- Payments that fill accounts (upscale.BillingLedger): each effect once per
-- ID at the payment provider, written with the provider's event that
-- reported it.

CREATE TABLE billing_grants (
	id         TEXT PRIMARY KEY, -- the payment at its provider
	account_id TEXT   NOT NULL REFERENCES accounts (id),
	pool       TEXT   NOT NULL,
	units      BIGINT NOT NULL CHECK (units > 0),
	label      TEXT   NOT NULL,
	event      TEXT   NOT NULL,
	granted_at BIGINT NOT NULL, -- the provider's time
	-- What reversals took back of it, and what they could not take
	-- because it was spent: together never more than units.
	taken      BIGINT NOT NULL DEFAULT 0,
	shortfall  BIGINT NOT NULL DEFAULT 0,
	CHECK (taken >= 0 AND shortfall >= 0 AND taken + shortfall <= units)
);
CREATE INDEX billing_grants_by_account ON billing_grants (account_id, granted_at);

CREATE TABLE billing_reversals (
	id          TEXT PRIMARY KEY, -- the refund or dispute at its provider
	grant_id    TEXT   NOT NULL REFERENCES billing_grants (id),
	taken       BIGINT NOT NULL,
	shortfall   BIGINT NOT NULL,
	event       TEXT   NOT NULL,
	reversed_at BIGINT NOT NULL
);

-- An account's subscription as its provider last stated it; the plan it
-- puts the account on is accounts.plan.
CREATE TABLE billing_terms (
	account_id           TEXT PRIMARY KEY REFERENCES accounts (id),
	subscription         TEXT    NOT NULL,
	status               TEXT    NOT NULL,
	paid_through         BIGINT  NOT NULL,
	cancel_at_period_end INTEGER NOT NULL,
	as_of                BIGINT  NOT NULL, -- the provider's time
	event                TEXT    NOT NULL
);

-- What each checkout offered, recorded when it was made: a paid one
-- grants this, never what the provider's metadata says.
CREATE TABLE billing_checkouts (
	id         TEXT PRIMARY KEY, -- the checkout at its provider
	account_id TEXT   NOT NULL REFERENCES accounts (id),
	price      TEXT   NOT NULL,
	units      BIGINT NOT NULL,
	plan       TEXT   NOT NULL, -- '' for a pack
	label      TEXT   NOT NULL,
	created_at BIGINT NOT NULL
);

-- Which of the provider's customers each account is: one each.
CREATE TABLE billing_customers (
	account_id  TEXT PRIMARY KEY REFERENCES accounts (id),
	customer_id TEXT NOT NULL UNIQUE
);
