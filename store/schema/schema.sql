-- tokbench database, schema version 1 (the baseline).
--
-- Later changes are forward migrations in db/migrations/NNNN_*.sql; the
-- database's PRAGMA user_version is the number of the last one applied
-- (this file is number 1). Times are ISO-8601 UTC text; durations are
-- integer nanoseconds (*_ns); rates are per second; bytes are bytes.

-- One row per distinct machine (by fingerprint of identifying fields).
CREATE TABLE machine (
    id                  INTEGER PRIMARY KEY,
    fingerprint         TEXT NOT NULL UNIQUE,   -- sha256 of identifying fields
    hostname            TEXT NOT NULL,
    cpu_model           TEXT NOT NULL,
    cpu_cores           INTEGER NOT NULL,       -- logical CPUs online
    ram_bytes           INTEGER NOT NULL,
    os                  TEXT NOT NULL,
    kernel              TEXT NOT NULL,
    arch                TEXT NOT NULL,
    gpu_count           INTEGER NOT NULL,       -- 0: none seen by NVML
    gpu_name            TEXT,                   -- first GPU; all in info_json
    gpu_memory_bytes    INTEGER,
    gpu_driver          TEXT,
    cuda_driver_version TEXT,
    compute_capability  TEXT,
    nvml_status         TEXT NOT NULL,          -- 'ok' or why no GPU data
    info_json           TEXT NOT NULL           -- the whole record
);

-- One `tokbench run` of one suite.
CREATE TABLE session (
    id               INTEGER PRIMARY KEY,
    uuid             TEXT NOT NULL UNIQUE,      -- stable across merged DBs
    machine_id       INTEGER NOT NULL REFERENCES machine(id),
    suite_name       TEXT NOT NULL,
    suite_path       TEXT NOT NULL,
    suite_sha256     TEXT NOT NULL,             -- of suite_text
    suite_text       TEXT NOT NULL,             -- the suite with includes inlined
    tokbench_version TEXT NOT NULL,
    git_commit       TEXT NOT NULL,
    compiler         TEXT NOT NULL,
    cuda_build_version TEXT NOT NULL,           -- toolkit tokbench was built with
    command_line     TEXT NOT NULL,
    started_at       TEXT NOT NULL,
    finished_at      TEXT,
    status           TEXT NOT NULL CHECK (status IN
                         ('running', 'completed', 'interrupted', 'failed')),
    warmup           INTEGER NOT NULL,
    repeat           INTEGER NOT NULL,
    seed             INTEGER NOT NULL
);

-- One backend section of the suite, as loaded in that session.
CREATE TABLE backend (
    id             INTEGER PRIMARY KEY,
    session_id     INTEGER NOT NULL REFERENCES session(id) ON DELETE CASCADE,
    label          TEXT NOT NULL,               -- the suite's section name
    plugin         TEXT NOT NULL,               -- ops->name
    plugin_path    TEXT NOT NULL,
    plugin_version TEXT NOT NULL,
    abi_major      INTEGER NOT NULL,
    capabilities   TEXT NOT NULL,               -- e.g. 'batch,steps,streaming'
    model          TEXT NOT NULL,
    options_json   TEXT NOT NULL,               -- every option's value
    info_json      TEXT,                        -- describe(): dtype, device...
    UNIQUE (session_id, label)
);

-- One point of the matrix for one backend.
CREATE TABLE bench_case (
    id             INTEGER PRIMARY KEY,
    session_id     INTEGER NOT NULL REFERENCES session(id) ON DELETE CASCADE,
    backend_id     INTEGER NOT NULL REFERENCES backend(id) ON DELETE CASCADE,
    ordinal        INTEGER NOT NULL,            -- position in the expanded suite
    prompt_tokens  INTEGER NOT NULL,
    max_new_tokens INTEGER NOT NULL,
    batch          INTEGER NOT NULL,
    concurrency    INTEGER,                     -- NULL: not applicable
    steps          INTEGER,                     -- NULL: not a diffusion backend
    block_length   INTEGER,
    request_rate   REAL,
    options_json   TEXT NOT NULL,               -- options swept by the matrix
    status         TEXT NOT NULL CHECK (status IN ('ok', 'failed', 'skipped')),
    error          TEXT,                        -- why failed or skipped
    started_at     TEXT,
    finished_at    TEXT,
    case_wall_ns   INTEGER,                     -- runner's view of the case
    host_peak_rss_bytes INTEGER,                -- backend process high-water
    UNIQUE (session_id, ordinal)
);

-- One generate() call (a repetition or a warm-up) of a case.
CREATE TABLE sample (
    id                INTEGER PRIMARY KEY,
    case_id           INTEGER NOT NULL REFERENCES bench_case(id) ON DELETE CASCADE,
    repetition        INTEGER NOT NULL,         -- 0-based, warm-ups first
    warmup            INTEGER NOT NULL,         -- 1: excluded from statistics
    n_requests        INTEGER NOT NULL,
    wall_ns           INTEGER NOT NULL,         -- first submit .. last done
    prefill_ns        INTEGER,                  -- backend-reported, NULL unknown
    decode_ns         INTEGER,
    output_tokens     INTEGER NOT NULL,         -- sum over requests (engine)
    recount_tokens    INTEGER,                  -- sum re-counted, NULL: no tokenizer
    aggregate_tps     REAL,                     -- output_tokens / wall
    decode_tps        REAL,                     -- output_tokens / (wall - prefill)
    forward_passes    INTEGER,
    tokens_per_forward REAL,
    peak_device_bytes INTEGER,
    energy_mj         INTEGER,
    n_emissions       INTEGER NOT NULL,
    runner_ns         INTEGER NOT NULL,         -- runner time outside generate()
    UNIQUE (case_id, repetition)
);

-- One request of a sample.
CREATE TABLE request (
    id              INTEGER PRIMARY KEY,
    sample_id       INTEGER NOT NULL REFERENCES sample(id) ON DELETE CASCADE,
    idx             INTEGER NOT NULL,
    status          TEXT NOT NULL,              -- 'ok' or 'failed' (error: why)
    error           TEXT,
    submit_offset_ns INTEGER NOT NULL,          -- submit - sample start
    ttft_ns         INTEGER,
    e2e_ns          INTEGER,
    tpot_ns         REAL,                       -- NULL when fewer than 2 tokens
    tps             REAL,                       -- per-request tokens/s
    requested_tokens INTEGER NOT NULL,
    output_tokens   INTEGER NOT NULL,           -- engine's count
    recount_tokens  INTEGER,                    -- detokenize -> tokenize
    count_mismatch  INTEGER NOT NULL DEFAULT 0, -- 1: recount != engine count
    steps_done      INTEGER,
    answer_tokens   INTEGER,                    -- before the first EOS (diffusion
                                                -- canvases); NULL: = output_tokens
    output_hash     TEXT,                       -- FNV-1a of output ids: equal
                                                -- outputs across repetitions
    -- [[t_ms_since_submit, n_tokens], ...]: every emission, for ITL plots.
    emissions_json  TEXT NOT NULL,
    UNIQUE (sample_id, idx)
);

-- Statistics over the measured samples of a case (warm-ups excluded),
-- one row per metric. See docs/METRICS.md for each name and unit.
CREATE TABLE metric (
    case_id INTEGER NOT NULL REFERENCES bench_case(id) ON DELETE CASCADE,
    name    TEXT NOT NULL,
    unit    TEXT NOT NULL,
    n       INTEGER NOT NULL,
    median  REAL, p5 REAL, p95 REAL, mean REAL, stdev REAL, cv REAL,
    min     REAL, max REAL, ci_lo REAL, ci_hi REAL,
    PRIMARY KEY (case_id, name)
) WITHOUT ROWID;

CREATE INDEX case_by_session ON bench_case(session_id, backend_id);
CREATE INDEX sample_by_case ON sample(case_id);
CREATE INDEX request_by_sample ON request(sample_id);
