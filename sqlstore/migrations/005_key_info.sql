-- What the holder of an account may see of each of its keys
-- (upscale.KeyInfo): its hint (the key's start and last four characters),
-- a name, and when it last authenticated. A key's ID is the start of its
-- digest. Keys added before this migration have no hint.
ALTER TABLE api_keys ADD COLUMN hint TEXT NOT NULL DEFAULT '';
ALTER TABLE api_keys ADD COLUMN name TEXT NOT NULL DEFAULT '';
ALTER TABLE api_keys ADD COLUMN last_used_at BIGINT;
CREATE INDEX api_keys_by_account ON api_keys (account_id);
