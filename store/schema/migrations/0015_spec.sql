-- Migration 15: speculative decoding (issue 40; docs/METRICS.md,
-- "Speculative decoding"). Per request the drafting and verification
-- counts (tb_spec_counts): verifications, drafted and accepted tokens,
-- the longest draft, and per draft position [drafted_at, accepted_at]
-- as JSON ([[4,3],[4,2],...], position 1 first); the request's
-- acceptance_length and acceptance_rate as the runner computed them.
-- Per call the time spent drafting. NULL: not speculative (or not
-- reported, or a run stored before this migration).

ALTER TABLE request ADD COLUMN spec_verifications INTEGER;
ALTER TABLE request ADD COLUMN spec_drafted INTEGER;
ALTER TABLE request ADD COLUMN spec_accepted INTEGER;
ALTER TABLE request ADD COLUMN spec_draft_len INTEGER;
ALTER TABLE request ADD COLUMN spec_at TEXT;
ALTER TABLE request ADD COLUMN acceptance_length REAL;
ALTER TABLE request ADD COLUMN acceptance_rate REAL;
ALTER TABLE sample ADD COLUMN draft_ns INTEGER;
