-- Migration 16: canvas models (issue 41; docs/METRICS.md, "Canvas
-- models"). Per request its canvases in total (tb_canvas_counts: count,
-- denoising steps, committed tokens, positions evaluated) and each kept
-- canvas as JSON ([[steps, committed, positions, ms since submit], ...]);
-- NULL: no canvas records (not a canvas model, or a run stored before
-- this migration). Per request its stream's median tokens per chunk and
-- median gap between chunks (NULL: not streamed or too few chunks), and
-- whether it was canvas-bursty (0/1). The case's figures are metric rows
-- (steps_per_canvas, committed_per_step, canvas_gap_ms,
-- positions_per_token, tokens_per_chunk); the summary view is unchanged.

ALTER TABLE request ADD COLUMN canvases INTEGER;
ALTER TABLE request ADD COLUMN canvas_steps INTEGER;
ALTER TABLE request ADD COLUMN canvas_committed INTEGER;
ALTER TABLE request ADD COLUMN canvas_positions INTEGER;
ALTER TABLE request ADD COLUMN canvases_json TEXT;
ALTER TABLE request ADD COLUMN tokens_per_chunk REAL;
ALTER TABLE request ADD COLUMN chunk_gap_ms REAL;
ALTER TABLE request ADD COLUMN bursty INTEGER;
