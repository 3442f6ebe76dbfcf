-- Migration 8 (issue 21, "serving workloads and load searches").
--
-- request.prompt_tokens: the prompt's length as the backend sent it,
-- tokens (a length distribution, a conversation dataset, a shared
-- prefix or a multi-turn history make it differ request by request);
-- NULL where the backend did not say (every backend before this, and
-- prompts whose length it cannot count). request.requested_tokens, from
-- now on, is the output tokens that request asked for (before: always
-- the case's max_new_tokens, which it still is unless the backend drew
-- a length of its own).
ALTER TABLE request ADD COLUMN prompt_tokens INTEGER;

-- Load searches (core/search.h; docs/METRICS.md, "Load searches"): a
-- case written `request_rate = sweep` or `request_rate = slo` runs as a
-- series of ordinary cases (bench_case rows pointing here), and the
-- search's answer is stored here.
CREATE TABLE search (
    id          INTEGER PRIMARY KEY,
    session_id  INTEGER NOT NULL REFERENCES session(id) ON DELETE CASCADE,
    backend_id  INTEGER NOT NULL REFERENCES backend(id) ON DELETE CASCADE,
    ordinal     INTEGER NOT NULL,     -- the suite's case it ran in place of
    kind        TEXT NOT NULL CHECK (kind IN ('sweep', 'slo')),
    limits_json TEXT NOT NULL,        -- what it looked for: {"ttft_p99_ms": .., "tpot_p99_ms": ..,
                                      -- "goodput_pct": .., "iterations": ..} or {"sweep_rates": K}
    status      TEXT NOT NULL CHECK (status IN ('running', 'done', 'found', 'above', 'below', 'failed',
                                                'interrupted')),
    sync_rate   REAL,                 -- achieved requests/s, one request at a time
    max_rate    REAL,                 -- achieved requests/s, every request at once
    slo_rate    REAL,                 -- slo_max_rate: the highest probed rate that met the limits
    error       TEXT,
    UNIQUE (session_id, ordinal)
);
ALTER TABLE bench_case ADD COLUMN search_id INTEGER REFERENCES search(id) ON DELETE CASCADE;
-- synchronous | throughput | rate (a sweep's) | probe (an slo search's)
ALTER TABLE bench_case ADD COLUMN search_role TEXT;
-- a probe: 1 it met the limits, 0 it did not; NULL otherwise
ALTER TABLE bench_case ADD COLUMN search_pass INTEGER;
