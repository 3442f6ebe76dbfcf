-- Migration 13: why a session stopped early. A run stops when the
-- database refuses a case (full disk, a lock held past the wait): the
-- session ends 'failed' and error says which case and why (NULL
-- otherwise), so that its stored cases are known to be a part.

ALTER TABLE session ADD COLUMN error TEXT;
