-- FirstCharges reads the commits after a time; without this index it
-- would read the whole journal on each pass of accounts.ShareBonus.
CREATE INDEX journal_commits_by_time ON journal (reason, created_at);
