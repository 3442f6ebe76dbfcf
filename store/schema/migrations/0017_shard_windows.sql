-- Migration 17: how far apart a sharded run's shards really ran
-- (docs/METRICS.md, "Sharded runs"). --start-at aligns each shard's first
-- call; later calls go at each shard's own pace, so the windows the join
-- pools into one call may not coincide. For each shard of a joined
-- session: the most its window of a joined measured call (its first
-- submit, on the wall clock) began after the earliest shard's window of
-- that call, over every case and measured repetition; 0 for the shard
-- that led each time. NULL: joined before this migration.
ALTER TABLE shard ADD COLUMN window_lag_ns INTEGER;
