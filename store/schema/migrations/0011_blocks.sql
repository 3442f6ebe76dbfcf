-- Migration 10: the blocks a block-diffusion request decoded
-- (tb_result.blocks_done; docs/METRICS.md, blocks_done). NULL: not a
-- block-decoding backend, or a run stored before this column.

ALTER TABLE request ADD COLUMN blocks_done INTEGER;
