-- Migration 16: canvas models (issue 41; docs/METRICS.md, "Canvas
-- models"). Per request its canvases in total (tb_canvas_counts: count,
-- denoising steps, committed tokens, positions evaluated) and each kept
-- canvas as JSON ([[steps, committed, positions, ms since submit], ...]);
-- NULL: no canvas records (not a canvas model, or a run stored before
-- this migration). Per request its stream's median tokens per chunk and
-- median gap between chunks (NULL: not streamed or too few chunks), and
-- whether it was canvas-bursty (0/1). The case's figures are metric rows
-- (steps_per_canvas, committed_per_step, canvas_gap_ms,
-- positions_per_token, tokens_per_chunk).
--
-- The summary view gains their medians at its end (NULL for a case
-- without such figures), for the per-case CSV. Nothing else changes: the
-- view is migration 15's with these columns.

ALTER TABLE request ADD COLUMN canvases INTEGER;
ALTER TABLE request ADD COLUMN canvas_steps INTEGER;
ALTER TABLE request ADD COLUMN canvas_committed INTEGER;
ALTER TABLE request ADD COLUMN canvas_positions INTEGER;
ALTER TABLE request ADD COLUMN canvases_json TEXT;
ALTER TABLE request ADD COLUMN tokens_per_chunk REAL;
ALTER TABLE request ADD COLUMN chunk_gap_ms REAL;
ALTER TABLE request ADD COLUMN bursty INTEGER;

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
    c.request_rate                               AS request_rate,
    c.status                                     AS status,
    c.error                                      AS error,
    (SELECT n FROM metric WHERE case_id = c.id AND name = 'agg_tps') AS calls,
    (SELECT count(*) FROM request r JOIN sample sa ON r.sample_id = sa.id
         WHERE sa.case_id = c.id AND sa.warmup = 0) AS requests,
    (SELECT count(*) FROM request r JOIN sample sa ON r.sample_id = sa.id
         WHERE sa.case_id = c.id AND sa.warmup = 0 AND r.status <> 'ok') AS failed_requests,
    (SELECT CAST(sum(r.status <> 'ok') AS REAL) / count(*) FROM request r JOIN sample sa ON r.sample_id = sa.id
         WHERE sa.case_id = c.id AND sa.warmup = 0) AS error_rate,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'sent_rate') AS sent_per_s,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'req_throughput') AS req_per_s,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'goodput') AS goodput,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'req_tps') AS req_tps_median,
    (SELECT p5 FROM metric WHERE case_id = c.id AND name = 'req_tps') AS req_tps_p5,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'agg_tps') AS aggregate_tps,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'decode_tps') AS decode_tps,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'ttft_ms') AS ttft_ms,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'tpot_ms') AS tpot_ms,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'e2e_ms') AS e2e_ms,
    (SELECT p95 FROM metric WHERE case_id = c.id AND name = 'e2e_ms') AS e2e_p95_ms,
    (SELECT p90 FROM metric WHERE case_id = c.id AND name = 'ttft_ms') AS ttft_p90_ms,
    (SELECT p99 FROM metric WHERE case_id = c.id AND name = 'ttft_ms') AS ttft_p99_ms,
    (SELECT p90 FROM metric WHERE case_id = c.id AND name = 'tpot_ms') AS tpot_p90_ms,
    (SELECT p99 FROM metric WHERE case_id = c.id AND name = 'tpot_ms') AS tpot_p99_ms,
    (SELECT p90 FROM metric WHERE case_id = c.id AND name = 'itl_ms') AS itl_p90_ms,
    (SELECT p99 FROM metric WHERE case_id = c.id AND name = 'itl_ms') AS itl_p99_ms,
    (SELECT p90 FROM metric WHERE case_id = c.id AND name = 'e2e_ms') AS e2e_p90_ms,
    (SELECT p99 FROM metric WHERE case_id = c.id AND name = 'e2e_ms') AS e2e_p99_ms,
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
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'repetition') AS repetition,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'acceptance_length') AS acceptance_length,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'acceptance_rate') AS acceptance_rate,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'draft_time_share') AS draft_time_share,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'target_forwards_per_token')
                                                 AS target_forwards_per_token,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'steps_per_canvas') AS steps_per_canvas,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'committed_per_step') AS committed_per_step,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'canvas_gap_ms') AS canvas_gap_ms,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'positions_per_token') AS positions_per_token,
    (SELECT median FROM metric WHERE case_id = c.id AND name = 'tokens_per_chunk') AS tokens_per_chunk
FROM bench_case c
JOIN backend b ON b.id = c.backend_id
JOIN session s ON s.id = c.session_id
JOIN machine m ON m.id = s.machine_id
ORDER BY s.id, c.ordinal;
