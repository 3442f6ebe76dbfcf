-- Migration 8: runs split over machines (`tokbench run --shard K/N
-- --start-at TIME`) and their join (`tokbench db merge`), docs/METRICS.md
-- "Sharded runs".
--
-- A shard's session says which share it ran and on what clock: its host's
-- monotonic clock (every stored time of its samples) plus clock_offset_ns
-- is that host's realtime clock, which the shards of a run share (NTP).
-- A joined session (shard_index NULL, shard_count N) pools the N shard
-- sessions; its clock is realtime itself (clock_offset_ns 0), and the
-- shard table lists the sessions it pools with their hosts' offsets.

ALTER TABLE session ADD COLUMN shard_index INTEGER;     -- K of --shard K/N (0-based); NULL: not a shard
ALTER TABLE session ADD COLUMN shard_count INTEGER;     -- N (a shard's, or the shards a joined session pools)
ALTER TABLE session ADD COLUMN start_at TEXT;           -- --start-at as UTC ISO 8601 (ms)
ALTER TABLE session ADD COLUMN clock_offset_ns INTEGER; -- CLOCK_REALTIME - CLOCK_MONOTONIC of its host, ns
ALTER TABLE session ADD COLUMN start_late_ns INTEGER;   -- its run began this long after start_at (realtime), ns

ALTER TABLE sample ADD COLUMN start_ns INTEGER;     -- the call's first submit, host monotonic ns (NULL: older rows)
ALTER TABLE sample ADD COLUMN client_busy REAL;     -- tb_result.client_busy as %, NULL: not reported

-- The shards a joined session pools, one row each.
CREATE TABLE shard (
    session_id      INTEGER NOT NULL REFERENCES session(id) ON DELETE CASCADE, -- the joined session
    shard_index     INTEGER NOT NULL,
    source_uuid     TEXT NOT NULL,          -- the shard's own session
    hostname        TEXT NOT NULL,
    seed            INTEGER NOT NULL,       -- the seed it ran with
    clock_offset_ns INTEGER NOT NULL,       -- its host's realtime - monotonic
    offset_to_first_ns INTEGER NOT NULL,    -- that minus shard 0's: how far this host's
                                            -- monotonic clock sits from shard 0's host's
    start_late_ns   INTEGER,                -- its run's start after start_at
    PRIMARY KEY (session_id, shard_index)
) WITHOUT ROWID;
