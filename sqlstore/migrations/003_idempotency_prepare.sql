-- A claim's token fences its Prepare, Keep and Forget against a takeover;
-- a prepared answer (status set, reservation_id not empty) names the
-- reservation whose commit decides whether its request was charged.
ALTER TABLE idempotency_keys ADD COLUMN claim_token TEXT NOT NULL DEFAULT '';
ALTER TABLE idempotency_keys ADD COLUMN reservation_id TEXT NOT NULL DEFAULT '';
-- Commit looks a settled reservation up by id to answer a repeated commit.
CREATE INDEX journal_by_request ON journal (request_id);
