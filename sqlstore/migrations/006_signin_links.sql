-- The dashboard's sign-in links used so far (dashboard.LinkStore), each
-- kept until it expires: a link works once.
CREATE TABLE signin_links (
	id         TEXT PRIMARY KEY,
	expires_at BIGINT NOT NULL
);
CREATE INDEX signin_links_by_expiry ON signin_links (expires_at);
