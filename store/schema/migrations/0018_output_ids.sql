-- Migration 18: the output-length check by what the backend returned
-- (docs/METRICS.md, "Output-length check"). output_ids: the number of
-- output ids the backend returned for the request, which its count
-- (output_tokens) must equal; NULL when it returned text alone (a
-- server's usage: its count is held to recount_tokens), or for a request
-- stored before this migration. count_mismatch becomes the check's
-- verdict (tb_count_mismatch): 0 the count held, 1 it is not the number
-- of ids returned, 2 it is not its text's re-count. A flag stored before
-- (1) was always a re-count that differed, whatever the backend
-- returned: it becomes 2.

ALTER TABLE request ADD COLUMN output_ids INTEGER;
UPDATE request SET count_mismatch = 2 WHERE count_mismatch = 1;
