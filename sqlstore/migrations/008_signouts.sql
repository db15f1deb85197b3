-- When each account last signed out of the dashboard
-- (dashboard.SessionStore): its sessions begun until then are refused on
-- every replica. One row per account, read by its key on each page.
CREATE TABLE signouts (
	account_id    TEXT PRIMARY KEY,
	signed_out_at BIGINT NOT NULL
);
