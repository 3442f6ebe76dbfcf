-- Migration 9: time series sampled while a case ran (core/telemetry.h,
-- the suite's [telemetry]): a server's Prometheus /metrics endpoint
-- scraped every `period`, and the local GPUs' NVML readings.

CREATE TABLE telemetry_series (
    id      INTEGER PRIMARY KEY,
    case_id INTEGER NOT NULL REFERENCES bench_case(id) ON DELETE CASCADE,
    source  TEXT NOT NULL,   -- the scraped URL, or 'nvml'
    name    TEXT NOT NULL,   -- metric{label="v",...} as scraped, or gpuN:reading
                             -- (util_pct, mem_util_pct, mem_used_mib, power_w,
                             -- sm_clock_mhz, mem_clock_mhz, temp_c)
    UNIQUE (case_id, source, name)
);

CREATE TABLE telemetry_point (
    series_id INTEGER NOT NULL REFERENCES telemetry_series(id) ON DELETE CASCADE,
    t_ns      INTEGER NOT NULL,  -- since the sampler started (the case's backend loaded), ns
    value     REAL,              -- NULL: NaN or an infinity
    PRIMARY KEY (series_id, t_ns)
) WITHOUT ROWID;

CREATE INDEX telemetry_series_by_case ON telemetry_series(case_id);
