-- Migration 14: a case's scrapes of the [telemetry] metrics_url, as a
-- result (issue 39): how many were made, how many got nothing, and the
-- first failure's reason. NULL: the case scraped nothing (no
-- metrics_url, or stored before this migration).

ALTER TABLE bench_case ADD COLUMN scrapes INTEGER;
ALTER TABLE bench_case ADD COLUMN scrapes_failed INTEGER;
ALTER TABLE bench_case ADD COLUMN scrape_error TEXT;
