-- Migration 2: the views people query with sqlite3.
--
-- `summary`: one row per case with the record fields a published figure
-- needs (model, GPU, CUDA, dtype, batch, lengths, steps, median and p95
-- tokens/s, memory). "p95 tokens/s" is the slow tail — the rate 95% of
-- requests reach — i.e. the 5th percentile of per-request tokens/s.
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
                                                 AS count_mismatches
FROM bench_case c
JOIN backend b ON b.id = c.backend_id
JOIN session s ON s.id = c.session_id
JOIN machine m ON m.id = s.machine_id
ORDER BY s.id, c.ordinal;
