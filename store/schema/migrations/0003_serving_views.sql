-- Migration 3: views for serving backends (plugins/http; docs/METRICS.md,
-- "Serving"). No table changes: the figures are metric rows and the error
-- class is the start of request.error.
--
-- `serving`: one row per case of a serving backend (concurrency or
-- request_rate set), its load and what the server sustained.
CREATE VIEW serving AS
SELECT
    s.id                                         AS session,
    b.label                                      AS backend,
    b.model                                      AS model,
    c.ordinal                                    AS ordinal,
    c.prompt_tokens                              AS prompt_tokens,
    c.max_new_tokens                             AS max_new_tokens,
    c.concurrency                                AS concurrency,
    c.request_rate                               AS request_rate,
    (SELECT max(n_requests) FROM sample WHERE case_id = c.id) AS requests,
    c.status                                     AS status,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'req_throughput') AS req_per_s,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'agg_tps') AS output_tps,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'goodput') AS goodput,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'error_rate') AS error_rate,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'ttft_ms') AS ttft_ms,
    (SELECT p95 FROM metric WHERE case_id = c.id AND name = 'ttft_ms') AS ttft_p95_ms,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'tpot_ms') AS tpot_ms,
    (SELECT p95 FROM metric WHERE case_id = c.id AND name = 'itl_ms') AS itl_p95_ms,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'e2e_ms') AS e2e_ms,
    (SELECT p95 FROM metric WHERE case_id = c.id AND name = 'e2e_ms') AS e2e_p95_ms
FROM bench_case c
JOIN backend b ON b.id = c.backend_id
JOIN session s ON s.id = c.session_id
WHERE c.concurrency IS NOT NULL OR c.request_rate IS NOT NULL
ORDER BY s.id, c.ordinal;

-- `request_error`: every failed request with its error class
-- (include/tokbench/backend.h, "error classes"; 'other' without one).
CREATE VIEW request_error AS
SELECT
    sa.case_id                                   AS case_id,
    sa.repetition                                AS repetition,
    sa.warmup                                    AS warmup,
    r.idx                                        AS idx,
    CASE WHEN instr(r.error, ': ') > 1
              AND substr(r.error, 1, instr(r.error, ': ') - 1) NOT GLOB '*[^a-z0-9_]*'
         THEN substr(r.error, 1, instr(r.error, ': ') - 1)
         ELSE 'other' END                        AS error_class,
    r.error                                      AS error
FROM request r
JOIN sample sa ON sa.id = r.sample_id
WHERE r.status = 'failed';
