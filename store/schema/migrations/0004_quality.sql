-- Migration 4: quality next to speed (docs/METRICS.md, "Quality").
--
-- A suite with a [prompts] section runs the items of a JSONL prompt set
-- instead of synthetic prompts. The set is stored with the session
-- (`prompt`), each request says which item it ran and what it answered
-- (request.prompt_idx, output_text), per-request grades go to `score`,
-- and the per-case figures (accuracy, accuracy_TAG, repetition, distinct,
-- judge_ppl) are ordinary metric rows. `summary` gains their columns.

ALTER TABLE session ADD COLUMN prompt_set_path TEXT;     -- NULL: synthetic prompts
ALTER TABLE session ADD COLUMN prompt_set_sha256 TEXT;   -- of the JSONL file's bytes

-- The items of the session's prompt set that were used, as loaded.
CREATE TABLE prompt (
    session_id INTEGER NOT NULL REFERENCES session(id) ON DELETE CASCADE,
    idx        INTEGER NOT NULL,                 -- 0-based item
    line       INTEGER NOT NULL,                 -- in the JSONL file
    prompt     TEXT NOT NULL,
    answer     TEXT,                             -- NULL: nothing to grade
    scorer     TEXT,                             -- the scorer that grades it
    tags_json  TEXT NOT NULL,                    -- ["add", ...]
    PRIMARY KEY (session_id, idx)
) WITHOUT ROWID;

ALTER TABLE request ADD COLUMN prompt_idx INTEGER;       -- prompt.idx; NULL: synthetic
ALTER TABLE request ADD COLUMN scored INTEGER NOT NULL DEFAULT 0; -- 1: in the case's quality metrics
ALTER TABLE request ADD COLUMN output_text TEXT;         -- the answer as a reader sees it

-- Per-request grades: correct (0/1), repetition, distinct, judge_nll
-- (nats per token), judge_ppl.
CREATE TABLE score (
    request_id INTEGER NOT NULL REFERENCES request(id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    value      REAL NOT NULL,
    PRIMARY KEY (request_id, name)
) WITHOUT ROWID;

DROP VIEW summary;
CREATE VIEW summary AS
SELECT
    s.id                                         AS session,
    s.started_at                                 AS started_at,
    s.suite_name                                 AS suite,
    b.label                                      AS backend,
    b.model                                      AS model,
    b.plugin || ' ' || b.plugin_version          AS plugin,
    coalesce(json_extract(b.info_json, '$.dtype'), '')  AS dtype,
    CASE json_extract(b.info_json, '$.random_weights')
        WHEN 1 THEN 'yes' WHEN 0 THEN 'no' ELSE '' END AS random_weights,
    coalesce(json_extract(b.info_json, '$.device'), '') AS device,
    coalesce(m.gpu_name, 'none')                 AS gpu,
    m.gpu_count                                  AS gpus,
    coalesce(m.cuda_driver_version, '')          AS cuda_driver,
    s.cuda_build_version                         AS cuda_build,
    m.cpu_model                                  AS cpu,
    c.prompt_tokens                              AS prompt_tokens,
    c.max_new_tokens                             AS max_new_tokens,
    c.batch                                      AS batch,
    c.concurrency                                AS concurrency,
    c.steps                                      AS steps,
    c.block_length                               AS block_length,
    c.options_json                               AS swept_options,
    c.status                                     AS status,
    c.error                                      AS error,
    (SELECT n FROM metric WHERE case_id = c.id AND name = 'agg_tps') AS runs,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'req_tps') AS median_tps,
    (SELECT p5 FROM metric WHERE case_id = c.id AND name = 'req_tps') AS p95_tps,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'agg_tps') AS aggregate_tps,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'decode_tps') AS decode_tps,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'ttft_ms') AS ttft_ms,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'tpot_ms') AS tpot_ms,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'e2e_ms') AS e2e_ms,
    (SELECT p95 FROM metric WHERE case_id = c.id AND name = 'e2e_ms') AS e2e_p95_ms,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'forward_passes') AS nfe,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'tokens_per_forward') AS tokens_per_forward,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'steps_done') AS steps_done,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'answer_tokens') AS answer_tokens,
    (SELECT cv FROM metric WHERE case_id = c.id AND name = 'agg_tps') AS agg_tps_cv,
    (SELECT max(peak_device_bytes) / 1048576.0 FROM sample
         WHERE case_id = c.id AND warmup = 0) AS peak_device_mib,
    c.host_peak_rss_bytes / 1048576.0            AS host_peak_rss_mib,
    (SELECT count(*) FROM request r JOIN sample sa ON r.sample_id = sa.id
         WHERE sa.case_id = c.id AND sa.warmup = 0 AND r.count_mismatch)
                                                 AS count_mismatches,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'accuracy') AS accuracy,
    (SELECT ci_lo FROM metric WHERE case_id = c.id AND name = 'accuracy') AS accuracy_ci_lo,
    (SELECT ci_hi FROM metric WHERE case_id = c.id AND name = 'accuracy') AS accuracy_ci_hi,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'judge_ppl') AS judge_ppl,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'repetition') AS repetition
FROM bench_case c
JOIN backend b ON b.id = c.backend_id
JOIN session s ON s.id = c.session_id
JOIN machine m ON m.id = s.machine_id
ORDER BY s.id, c.ordinal;
