-- FirstCharges asks, for each account charged since a time, whether it
-- was charged before it; this index answers that without reading the
-- account's whole journal.
CREATE INDEX journal_commits_by_account ON journal (account_id, reason, created_at);
