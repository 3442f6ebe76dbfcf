/*
 * null.c — the "null" backend: no model; latencies, token counts and faults
 * are scripted by options.
 *
 * Two uses:
 *   - runner overhead: with every delay at 0, a case's measured time is the
 *     runner's own cost (process, emit buffer, statistics);
 *   - failure handling: fail_at / crash_at / abort_at / hang_at /
 *     fail_on_create / crash_on_create / count_extra script the faults the
 *     runner must survive and flag (count_skew and text_only: outputs its
 *     output-length check must judge rightly); leak_mb (memory leaked
 *     without bound, until an allocation fails: then abort(), as an
 *     engine's unchecked out-of-memory does) and flood (far more
 *     emissions than tokens, as fast as emit() takes them) script the
 *     faults that attack the runner's resources rather than the case;
 *   - serving faults (`fault`): requests that fail with an error class
 *     (backend.h), which `tokbench serve` turns into HTTP behaviour — a 500
 *     or 429 status, a connection dropped mid-stream, garbage chunks — and a
 *     stall that makes a stream slow. Every `fault_every`-th request of a
 *     call (index % fault_every == 0) is faulty; it emits `fault_after`
 *     tokens first.
 *
 * Time model of one generate() call (n = max_new_tokens, R = n_requests):
 *   prefill: prefill_us + prefill_us_per_token * (prompt tokens of all R)
 *   AR (steps == 0): ceil(n / tokens_per_step) decode steps; each step emits
 *     min(tokens_per_step, left) tokens for every request;
 *   steps mode (steps > 0): `steps` denoising steps; step i commits
 *     n/steps + (i < n%steps) tokens per request (LLaDA's schedule), and a
 *     step that commits nothing emits nothing;
 *   one step: step_us + step_us_per_seq * R.
 * Each delay is scaled by (1 + jitter*u), u uniform in [-1, 1] from a PRNG
 * seeded by tb_request.seed. Delays are kept against absolute deadlines
 * counted from the start of each phase, so the cost of emitting (and of
 * waking up late) does not accumulate from step to step.
 *
 * Tokenizer: id k is the word "w<k>"; text is words joined by one space.
 * Any other word maps to a stable hash in [0, 1000).
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */

#include <tokbench/backend.h>

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define NULL_VERSION "1.0.0"

/* Longest single sleep (or spin) between cancellation polls, ns. */
#define NULL_POLL_NS 10000000LL

/* The word detokenize() appends count_skew times; tokenize() maps it to 0. */
#define NULL_SKEW_WORD "w0"

/* ---------------------------------------------------------------- options */

enum {
    OPT_PREFILL_US,
    OPT_PREFILL_US_PER_TOKEN,
    OPT_STEP_US,
    OPT_STEP_US_PER_SEQ,
    OPT_TOKENS_PER_STEP,
    OPT_JITTER,
    OPT_SPIN,
    OPT_MAX_BATCH,
    OPT_FAIL_AT,
    OPT_OOM_AT,
    OPT_CRASH_AT,
    OPT_ABORT_AT,
    OPT_HANG_AT,
    OPT_FAIL_ON_CREATE,
    OPT_CRASH_ON_CREATE,
    OPT_COUNT_SKEW,
    OPT_FAULT,
    OPT_FAULT_EVERY,
    OPT_FAULT_AFTER,
    OPT_FAULT_STALL_US,
    OPT_LEAK_MB,
    OPT_FLOOD,
    OPT_WORK_FLOPS,
    OPT_WORK_BYTES,
    OPT_PEAK_FLOPS,
    OPT_PEAK_BYTES_PER_S,
    OPT_LOG_LINES,
    OPT_SPEC_ACCEPT,
    OPT_SPEC_DRAFT,
    OPT_SPEC_DRAFT_SHARE,
    OPT_SPEC_FAULT,
    OPT_COUNT_EXTRA,
    OPT_TEXT_ONLY,
    N_OPTS
};

/* The `fault` option's values, each declared once, in the order its
 * choices list them: X(ID, name, error), where error is what a failing
 * request reports (class (backend.h): why) and NULL means it does not
 * fail (none; stall only slows its stream). The enum, the table looked
 * up by name and the option's "a|b|c" choices are all generated from it. */
#define NULL_FAULTS(X)                                                                 \
    X(NONE, "none", NULL)                                                              \
    X(HTTP_500, "http_500", "http_5xx: scripted fault (HTTP 500)")                     \
    X(HTTP_429, "http_429", "http_429: scripted fault (HTTP 429, too many requests)") \
    X(DROP, "drop", "dropped: scripted fault (connection closed mid-stream)")          \
    X(GARBAGE, "garbage", "malformed_stream: scripted fault (garbage chunk)")          \
    X(STALL, "stall", NULL)

#define NULL_FAULT_ENUM(id, name, error) FAULT_##id,
enum { NULL_FAULTS(NULL_FAULT_ENUM) N_FAULTS };
#undef NULL_FAULT_ENUM

typedef struct null_fault {
    const char *name;  /* the option's value */
    const char *error; /* a failing request's error; NULL: it does not fail */
} null_fault;

#define NULL_FAULT_ROW(id, name, error) [FAULT_##id] = {name, error},
static const null_fault null_faults[N_FAULTS] = {NULL_FAULTS(NULL_FAULT_ROW)};
#undef NULL_FAULT_ROW

/* "|none|http_500|...": the option's choices are this past its first '|'. */
#define NULL_FAULT_CHOICE(id, name, error) "|" name
static const char null_fault_choices[] = NULL_FAULTS(NULL_FAULT_CHOICE);
#undef NULL_FAULT_CHOICE

/* FAULT_* of a `fault` value by name; FAULT_NONE for one not declared
 * (the host has checked the value against the choices). */
static int fault_by_name(const char *name)
{
    for (int f = 0; name && f < N_FAULTS; f++)
        if (strcmp(name, null_faults[f].name) == 0)
            return f;
    return FAULT_NONE;
}

/* One hour in µs: the longest scripted delay. */
#define NULL_MAX_US 3.6e9

static const tb_option_decl null_options[N_OPTS] = {
    [OPT_PREFILL_US] = {"prefill_us", TB_OPT_INT, "1000",
                        "prompt-phase time of one generate() call, us", NULL,
                        0, NULL_MAX_US, 0},
    [OPT_PREFILL_US_PER_TOKEN] = {"prefill_us_per_token", TB_OPT_FLOAT, "0",
                                  "extra prompt-phase us per prompt token of "
                                  "each request",
                                  NULL, 0, 1e6, 0},
    [OPT_STEP_US] = {"step_us", TB_OPT_INT, "200",
                     "time of one decode step (AR) or denoising step "
                     "(steps > 0), us",
                     NULL, 0, NULL_MAX_US, 0},
    [OPT_STEP_US_PER_SEQ] = {"step_us_per_seq", TB_OPT_FLOAT, "0",
                             "extra us per step per request in the batch",
                             NULL, 0, 1e6, 0},
    [OPT_TOKENS_PER_STEP] = {"tokens_per_step", TB_OPT_INT, "1",
                             "tokens each request gets per AR decode step",
                             NULL, 1, 1e6, 0},
    [OPT_JITTER] = {"jitter", TB_OPT_FLOAT, "0",
                    "scale each delay by 1 + jitter*u, u uniform in [-1,1] "
                    "(seeded by the request seed)",
                    NULL, 0, 1, 0},
    [OPT_SPIN] = {"spin", TB_OPT_BOOL, "false",
                  "busy-wait instead of sleeping", NULL, 1, 0, 0},
    [OPT_MAX_BATCH] = {"max_batch", TB_OPT_INT, "0",
                       "refuse calls with more requests (TB_ERR_UNSUPPORTED); "
                       "0 = unlimited",
                       NULL, 0, 1e9, 0},
    [OPT_FAIL_AT] = {"fail_at", TB_OPT_INT, "0",
                     "the Nth generate() call on a context fails (TB_ERR); "
                     "0 = never",
                     NULL, 0, 1e9, TB_OPTF_LOAD},
    [OPT_OOM_AT] = {"oom_at", TB_OPT_INT, "0",
                    "the Nth generate() call on a context runs out of memory "
                    "(a real allocation of 2^50 bytes fails: TB_ERR_NO_MEMORY); "
                    "0 = never",
                    NULL, 0, 1e9, TB_OPTF_LOAD},
    [OPT_CRASH_AT] = {"crash_at", TB_OPT_INT, "0",
                      "the Nth generate() call on a context dies of SIGSEGV; "
                      "0 = never",
                      NULL, 0, 1e9, TB_OPTF_LOAD},
    [OPT_ABORT_AT] = {"abort_at", TB_OPT_INT, "0",
                      "the Nth generate() call on a context calls abort() "
                      "(SIGABRT, as a failed assertion does); 0 = never",
                      NULL, 0, 1e9, TB_OPTF_LOAD},
    [OPT_HANG_AT] = {"hang_at", TB_OPT_INT, "0",
                     "the Nth generate() call on a context never returns, "
                     "ignoring cancellation; 0 = never",
                     NULL, 0, 1e9, TB_OPTF_LOAD},
    [OPT_FAIL_ON_CREATE] = {"fail_on_create", TB_OPT_BOOL, "false",
                            "create() fails (TB_ERR)", NULL, 1, 0,
                            TB_OPTF_LOAD},
    [OPT_CRASH_ON_CREATE] = {"crash_on_create", TB_OPT_BOOL, "false",
                             "create() dies of SIGSEGV", NULL, 1, 0,
                             TB_OPTF_LOAD},
    [OPT_COUNT_SKEW] = {"count_skew", TB_OPT_INT, "0",
                        "detokenized text carries this many extra words "
                        "(negative: drops words), so re-counts disagree "
                        "with the ids (a count check only with text_only)",
                        NULL, -1e6, 1e6, 0},
    [OPT_FAULT] = {"fault", TB_OPT_ENUM, "none",
                   "faulty requests fail as HTTP 500 or 429, a dropped "
                   "connection or garbage chunks (as `tokbench serve` sends "
                   "them), or stall the stream for fault_stall_us",
                   null_fault_choices + 1, 1, 0, 0},
    [OPT_FAULT_EVERY] = {"fault_every", TB_OPT_INT, "1",
                         "requests with index % fault_every == 0 are faulty",
                         NULL, 1, 1e9, 0},
    [OPT_FAULT_AFTER] = {"fault_after", TB_OPT_INT, "0",
                         "tokens a faulty request emits before its fault",
                         NULL, 0, 1e9, 0},
    [OPT_FAULT_STALL_US] = {"fault_stall_us", TB_OPT_INT, "10000000",
                            "fault = stall: the pause after fault_after "
                            "tokens, us",
                            NULL, 0, NULL_MAX_US, 0},
    [OPT_LEAK_MB] = {"leak_mb", TB_OPT_INT, "0",
                     "MiB leaked (mapped, written, never freed) at every "
                     "decode step, without bound: when the memory runs out "
                     "the process abort()s; 0 = none",
                     NULL, 0, 1 << 20, 0},
    [OPT_FLOOD] = {"flood", TB_OPT_INT, "0",
                   "extra 1-token emissions per request at every decode "
                   "step, back to back (an engine flooding the event sink); "
                   "0 = none",
                   NULL, 0, 1e15, 0},
    /* Scripted roofline figures (tb_result.flops ...): what an engine
     * would count, so the runner's roofline_pct can be checked. */
    [OPT_WORK_FLOPS] = {"work_flops", TB_OPT_FLOAT, "0", "FLOPs reported per call (roofline); 0 = none", NULL, 0,
                        1e30, 0},
    [OPT_WORK_BYTES] = {"work_bytes", TB_OPT_FLOAT, "0", "device bytes reported per call (roofline); 0 = none",
                        NULL, 0, 1e30, 0},
    [OPT_PEAK_FLOPS] = {"peak_flops", TB_OPT_FLOAT, "0", "FLOP/s ceiling reported (roofline); 0 = none", NULL, 0,
                        1e30, 0},
    [OPT_PEAK_BYTES_PER_S] = {"peak_bytes_per_s", TB_OPT_FLOAT, "0",
                              "bandwidth ceiling reported, bytes/s (roofline); 0 = none", NULL, 0, 1e30, 0},
    [OPT_LOG_LINES] = {"log_lines", TB_OPT_INT, "0",
                       "lines written at every generate() call, first thing (before a scripted crash): every "
                       "other one through the host's log, the others straight to stderr (as a library would); "
                       "0 = none",
                       NULL, 0, 1000, 0},
    /* Scripted speculative decoding (tb_result.spec, draft_ns): the
     * counts an engine verifying drafts would report, so the runner's
     * speculative metrics can be checked without a model. */
    [OPT_SPEC_ACCEPT] = {"spec_accept", TB_OPT_STRING, "",
                         "speculative counts: draft tokens accepted per verification, a comma-separated pattern "
                         "cycled (request r starts at its r-th entry), each 0..spec_draft; a verification yields "
                         "accepted + 1 tokens; empty = not speculative",
                         NULL, 0, 0, 0},
    [OPT_SPEC_DRAFT] = {"spec_draft", TB_OPT_INT, "4", "spec_accept: draft tokens per verification",
                        NULL, 1, TB_SPEC_MAX_DRAFT, 0},
    [OPT_SPEC_DRAFT_SHARE] = {"spec_draft_share", TB_OPT_FLOAT, "0.25",
                              "spec_accept: draft_ns reported as this share of decode_ns", NULL, 0, 1, 0},
    [OPT_SPEC_FAULT] = {"spec_fault", TB_OPT_ENUM, "none",
                        "spec_accept: request 0 reports impossible counts (accepted over drafted, a position "
                        "accepted more than drafted, draft_len over the ABI's maximum)",
                        "none|accepted|position|draft_len", 1, 0, 0},
    /* The output-length check's cases (docs/METRICS.md, "Output-length
     * check"): a count that is not of the ids returned, and a backend
     * that returns text alone. */
    [OPT_COUNT_EXTRA] = {"count_extra", TB_OPT_INT, "0",
                         "n_output_tokens counts this many tokens more than the output ids returned (negative: "
                         "fewer; fewer than were emitted is an impossible figure)",
                         NULL, -1e6, 1e6, 0},
    [OPT_TEXT_ONLY] = {"text_only", TB_OPT_BOOL, "false",
                       "requests return their text (the ids detokenized, count_skew included) and no ids, as a "
                       "backend in front of a server does",
                       NULL, 1, 0, 0},
};

typedef struct null_config {
    int64_t prefill_us;
    double prefill_us_per_token;
    int64_t step_us;
    double step_us_per_seq;
    int64_t tokens_per_step;
    double jitter;
    int spin;
    int64_t max_batch;
    int64_t fail_at, oom_at, crash_at, abort_at, hang_at; /* 1-based call numbers, 0 = never */
    int fail_on_create, crash_on_create;
    int64_t count_skew;
    int fault;             /* FAULT_* */
    int64_t fault_every, fault_after, fault_stall_us;
    int64_t leak_mb; /* MiB leaked per decode step */
    int64_t flood;   /* extra emissions per request per decode step */
    double work_flops, work_bytes, peak_flops, peak_bytes_per_s; /* roofline figures to report */
    int64_t log_lines; /* per call */
    /* spec_accept parsed: n_spec entries (0: not speculative); spec_bad:
     * the value did not parse (generate() fails, saying why) */
    uint32_t spec_accept[TB_SPEC_MAX_DRAFT], n_spec;
    int spec_bad;
    int64_t spec_draft;
    double spec_draft_share;
    int spec_fault; /* 0 none, 1 accepted, 2 position, 3 draft_len */
    int64_t count_extra; /* n_output_tokens - n_output_ids */
    int text_only;       /* output_text in place of output_ids */
} null_config;

static const null_config null_defaults = {
    .prefill_us = 1000,
    .step_us = 200,
    .tokens_per_step = 1,
    .fault_every = 1,
    .fault_stall_us = 10000000,
    .spec_draft = 4,
    .spec_draft_share = 0.25,
};

/* spec_accept's pattern into c: up to TB_SPEC_MAX_DRAFT numbers 0..64
 * (checked against spec_draft in generate()); a bad one sets spec_bad. */
static void spec_parse(null_config *c, const char *text)
{
    c->n_spec = 0;
    c->spec_bad = 0;
    for (const char *p = text ? text : ""; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > TB_SPEC_MAX_DRAFT || c->n_spec == TB_SPEC_MAX_DRAFT ||
            (*end && *end != ',')) {
            c->spec_bad = 1;
            return;
        }
        c->spec_accept[c->n_spec++] = (uint32_t)v;
        p = *end ? end + 1 : end;
    }
}

/* Apply option values (matched by name; unknown names are ignored: the host
 * has already checked them against the declarations). */
static void config_apply(null_config *c, const tb_option_value *v, uint32_t n)
{
    for (uint32_t k = 0; v && k < n; k++) {
        if (!v[k].name)
            continue;
        int opt = -1;
        for (int j = 0; j < N_OPTS; j++) {
            if (strcmp(v[k].name, null_options[j].name) == 0) {
                opt = j;
                break;
            }
        }
        switch (opt) {
        case OPT_PREFILL_US: c->prefill_us = v[k].i; break;
        case OPT_PREFILL_US_PER_TOKEN: c->prefill_us_per_token = v[k].f; break;
        case OPT_STEP_US: c->step_us = v[k].i; break;
        case OPT_STEP_US_PER_SEQ: c->step_us_per_seq = v[k].f; break;
        case OPT_TOKENS_PER_STEP: c->tokens_per_step = v[k].i; break;
        case OPT_JITTER: c->jitter = v[k].f; break;
        case OPT_SPIN: c->spin = v[k].i != 0; break;
        case OPT_MAX_BATCH: c->max_batch = v[k].i; break;
        case OPT_FAIL_AT: c->fail_at = v[k].i; break;
        case OPT_OOM_AT: c->oom_at = v[k].i; break;
        case OPT_CRASH_AT: c->crash_at = v[k].i; break;
        case OPT_ABORT_AT: c->abort_at = v[k].i; break;
        case OPT_HANG_AT: c->hang_at = v[k].i; break;
        case OPT_FAIL_ON_CREATE: c->fail_on_create = v[k].i != 0; break;
        case OPT_CRASH_ON_CREATE: c->crash_on_create = v[k].i != 0; break;
        case OPT_COUNT_SKEW: c->count_skew = v[k].i; break;
        case OPT_FAULT: c->fault = fault_by_name(v[k].text); break;
        case OPT_FAULT_EVERY: c->fault_every = v[k].i; break;
        case OPT_FAULT_AFTER: c->fault_after = v[k].i; break;
        case OPT_FAULT_STALL_US: c->fault_stall_us = v[k].i; break;
        case OPT_LEAK_MB: c->leak_mb = v[k].i; break;
        case OPT_FLOOD: c->flood = v[k].i; break;
        case OPT_WORK_FLOPS: c->work_flops = v[k].f; break;
        case OPT_WORK_BYTES: c->work_bytes = v[k].f; break;
        case OPT_PEAK_FLOPS: c->peak_flops = v[k].f; break;
        case OPT_PEAK_BYTES_PER_S: c->peak_bytes_per_s = v[k].f; break;
        case OPT_LOG_LINES: c->log_lines = v[k].i; break;
        case OPT_SPEC_ACCEPT: spec_parse(c, v[k].text); break;
        case OPT_SPEC_DRAFT: c->spec_draft = v[k].i; break;
        case OPT_SPEC_DRAFT_SHARE: c->spec_draft_share = v[k].f; break;
        case OPT_SPEC_FAULT:
            c->spec_fault = !v[k].text                        ? 0
                            : strcmp(v[k].text, "accepted") == 0 ? 1
                            : strcmp(v[k].text, "position") == 0 ? 2
                            : strcmp(v[k].text, "draft_len") == 0 ? 3
                                                                  : 0;
            break;
        case OPT_COUNT_EXTRA: c->count_extra = v[k].i; break;
        case OPT_TEXT_ONLY: c->text_only = v[k].i != 0; break;
        default: break;
        }
    }
    /* The host enforces the bounds; stay safe if a caller did not. */
    if (c->tokens_per_step < 1)
        c->tokens_per_step = 1;
    if (c->jitter < 0)
        c->jitter = 0;
    if (c->jitter > 1)
        c->jitter = 1;
    if (c->fault_every < 1)
        c->fault_every = 1;
    if (c->leak_mb < 0)
        c->leak_mb = 0;
    if (c->flood < 0)
        c->flood = 0;
    if (c->spec_draft < 1 || c->spec_draft > TB_SPEC_MAX_DRAFT)
        c->spec_draft = 4;
}

/* ---------------------------------------------------------------- context */

typedef struct null_ctx {
    const tb_host *host;
    null_config base;   /* from create() */
    null_config active; /* of the latest generate(); detokenize() reads it */
    uint64_t calls;     /* generate() calls so far, warm-ups included */
    uint64_t leaked_mb; /* leak_mb: MiB leaked so far */
    int32_t *ids;       /* [n_requests][max_new_tokens] of the last call */
    size_t ids_cap;     /* elements allocated in ids */
    char *texts;        /* text_only: the last call's texts, one after another */
    size_t texts_cap;
    char error[256];
} null_ctx;

static void set_error(null_ctx *ctx, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void set_error(null_ctx *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->error, sizeof ctx->error, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------ randomness */

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1]. */
static double uniform_pm1(uint64_t *state)
{
    return (double)(splitmix64(state) >> 11) * (2.0 / 9007199254740991.0) -
           1.0;
}

/* Output id of request r at position pos: in [100, 1000). */
static int32_t output_id(uint64_t seed, uint32_t r, uint32_t pos)
{
    uint64_t s = seed ^ ((uint64_t)r << 32 | pos);
    return (int32_t)(100 + splitmix64(&s) % 900);
}

/* ----------------------------------------------------------------- timing */

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_until(int64_t t_ns)
{
    struct timespec ts = {.tv_sec = t_ns / 1000000000LL,
                          .tv_nsec = t_ns % 1000000000LL};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

/* Wait until `deadline` (CLOCK_MONOTONIC ns), sleeping or spinning. Waits
 * longer than NULL_POLL_NS poll host->cancelled() every NULL_POLL_NS.
 * Returns 0, or -1 if cancelled. */
static int wait_until(const tb_host *host, int64_t deadline, int spin)
{
    for (;;) {
        int64_t now = mono_ns();
        if (now >= deadline)
            return 0;
        int64_t until =
            deadline - now > NULL_POLL_NS ? now + NULL_POLL_NS : deadline;
        if (spin) {
            while (mono_ns() < until)
                ;
        } else {
            sleep_until(until);
        }
        if (until < deadline && host->cancelled(host))
            return -1;
    }
}

/* A delay of `us` microseconds in ns, scaled by the jitter factor. */
static int64_t delay_ns(double us, double jitter, uint64_t *rng)
{
    double ns = us * 1000.0;
    if (jitter > 0)
        ns *= 1.0 + jitter * uniform_pm1(rng);
    return ns > 0 ? (int64_t)(ns + 0.5) : 0;
}

/* ----------------------------------------------------------------- faults */

/* SIGSEGV: a volatile store (it cannot be dropped) through a pointer the
 * compiler cannot see is NULL (so it cannot become a trap instruction,
 * which would be SIGILL). Under ASan, ASan's SEGV handler turns the signal
 * into exit status 1 unless ASAN_OPTIONS has handle_segv=0. */
#if defined(__GNUC__)
__attribute__((no_sanitize("undefined"))) /* the store is the point */
#endif
static void crash_now(void)
{
    volatile int *volatile p = NULL;
    *p = 42;
}

/* A wedged engine: never returns, never looks at cancellation. */
static _Noreturn void hang_forever(void)
{
    for (;;) {
        struct timespec ts = {.tv_sec = 1, .tv_nsec = 0};
        nanosleep(&ts, NULL);
    }
}

/* A leak: `mb` MiB mapped and written (so it counts as resident, not just
 * reserved) and never unmapped; the address is dropped on purpose. mmap,
 * not malloc: the same in a sanitizer build, and a limit on the address
 * space (RLIMIT_AS) stops it as it would stop a real engine. When the
 * memory runs out the process aborts, as an engine's unchecked allocation
 * failure (C++ std::bad_alloc, Rust's alloc error) does. */
static void leak_now(const tb_host *host, int64_t mb, uint64_t *leaked_mb)
{
    size_t len = (size_t)mb << 20;
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        host->log(host, TB_LOG_ERROR, "leak_mb: out of memory after leaking %llu MiB; aborting",
                  (unsigned long long)*leaked_mb);
        abort();
    }
    memset(p, 0x5a, len); /* the pages become resident */
    *leaked_mb += (uint64_t)mb;
}

/* -------------------------------------------------------------- tokenizer */

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
           c == '\f';
}

static int32_t word_id(const char *w, size_t n)
{
    if (n >= 2 && w[0] == 'w') {
        int64_t v = 0;
        size_t i = 1;
        while (i < n && w[i] >= '0' && w[i] <= '9' && v <= INT32_MAX) {
            v = v * 10 + (w[i] - '0');
            i++;
        }
        if (i == n && v <= INT32_MAX)
            return (int32_t)v;
    }
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)w[i];
        h *= 0x100000001b3ull;
    }
    return (int32_t)(h % 1000);
}

/* Words in text: what tokenize() would return. */
static uint64_t count_words(const char *s)
{
    uint64_t n = 0;
    while (*s) {
        while (is_space(*s))
            s++;
        if (!*s)
            break;
        n++;
        while (*s && !is_space(*s))
            s++;
    }
    return n;
}

static int64_t null_tokenize(void *vctx, const char *text, int32_t *ids,
                             size_t cap)
{
    null_ctx *ctx = vctx;
    if (!text || (cap > 0 && !ids)) {
        set_error(ctx, "tokenize: %s is NULL", text ? "ids" : "text");
        return -1;
    }
    int64_t n = 0;
    const char *s = text;
    while (*s) {
        while (is_space(*s))
            s++;
        if (!*s)
            break;
        const char *w = s;
        while (*s && !is_space(*s))
            s++;
        if ((size_t)n < cap)
            ids[n] = word_id(w, (size_t)(s - w));
        n++;
    }
    return n;
}

/* Appends to out[cap] without ever writing past it, counting every byte. */
typedef struct text_out {
    char *out;
    size_t cap;
    size_t len; /* bytes the whole text needs, without the NUL */
} text_out;

static void text_put(text_out *t, const char *s, size_t n)
{
    if (t->cap > 0 && t->len < t->cap - 1) {
        size_t room = t->cap - 1 - t->len;
        memcpy(t->out + t->len, s, n < room ? n : room);
    }
    t->len += n;
}

static void text_word(text_out *t, int32_t id)
{
    char buf[16];
    int k = snprintf(buf, sizeof buf, "%sw%d", t->len ? " " : "", (int)id);
    text_put(t, buf, (size_t)k);
}

static int64_t null_detokenize(void *vctx, const int32_t *ids, size_t n,
                               char *out, size_t cap)
{
    null_ctx *ctx = vctx;
    if ((n > 0 && !ids) || (cap > 0 && !out)) {
        set_error(ctx, "detokenize: %s is NULL", ids ? "out" : "ids");
        return -1;
    }
    int64_t skew = ctx->active.count_skew;
    if (skew < 0)
        n = (uint64_t)-skew >= n ? 0 : n - (size_t)-skew;
    text_out t = {out, cap, 0};
    for (size_t i = 0; i < n; i++)
        text_word(&t, ids[i]);
    for (int64_t i = 0; i < skew; i++)
        text_put(&t, t.len ? " " NULL_SKEW_WORD : NULL_SKEW_WORD,
                 strlen(NULL_SKEW_WORD) + (t.len ? 1 : 0));
    if (cap > 0)
        out[t.len < cap ? t.len : cap - 1] = '\0';
    return (int64_t)t.len;
}

/* -------------------------------------------------------------- lifecycle */

static tb_status null_create(const tb_host *host, const char *model,
                             const tb_option_value *options,
                             uint32_t n_options, void **ctx_out, char *err,
                             size_t err_size)
{
    (void)model; /* nothing to load */
    if (ctx_out)
        *ctx_out = NULL;
    if (!ctx_out || !host || host->abi_major != TB_ABI_MAJOR ||
        !TB_STRUCT_HAS(host, tb_host, cancelled) || !host->now_ns ||
        !host->emit || !host->cancelled) {
        if (err && err_size)
            snprintf(err, err_size, "null: host table missing or too old");
        return TB_ERR_INVALID;
    }
    null_config cfg = null_defaults;
    config_apply(&cfg, options, n_options);
    if (cfg.crash_on_create)
        crash_now();
    if (cfg.fail_on_create) {
        if (err && err_size)
            snprintf(err, err_size, "scripted failure in create()");
        return TB_ERR;
    }
    null_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        if (err && err_size)
            snprintf(err, err_size, "null: out of memory");
        return TB_ERR_NO_MEMORY;
    }
    ctx->host = host;
    ctx->base = cfg;
    ctx->active = cfg;
    *ctx_out = ctx;
    return TB_OK;
}

static void null_destroy(void *vctx)
{
    null_ctx *ctx = vctx;
    if (!ctx)
        return;
    free(ctx->ids);
    free(ctx->texts);
    free(ctx);
}

static const char *null_last_error(void *vctx)
{
    null_ctx *ctx = vctx;
    return ctx ? ctx->error : "";
}

static const char *null_describe(void *vctx)
{
    (void)vctx;
    return "{\"model_name\":\"null\",\"dtype\":\"none\",\"device\":\"cpu\","
           "\"random_weights\":false,\"engine_version\":\"tokbench-null "
           NULL_VERSION "\"}";
}

/* Prompt tokens of request r: words of its text, or prompt_tokens when the
 * host leaves prompts to us. */
static uint64_t prompt_len(const tb_request *req, uint32_t r)
{
    if (req->prompt_text && req->prompt_text[r])
        return count_words(req->prompt_text[r]);
    return req->prompt_tokens;
}

/* Tokens each request gets at step i, `done` tokens in. */
static uint32_t step_tokens(const tb_request *req, const null_config *cfg,
                            uint32_t i, uint32_t done)
{
    uint32_t n = req->max_new_tokens;
    if (req->steps > 0)
        return n / req->steps + (i < n % req->steps);
    uint32_t left = n - done;
    return (uint64_t)left < (uint64_t)cfg->tokens_per_step
               ? left
               : (uint32_t)cfg->tokens_per_step;
}

/* The counts of a speculative decode that produced each request's
 * tokens (spec_accept's pattern, request r from its r-th entry): one
 * verification of spec_draft tokens yields accepted + 1 tokens; the last
 * may overshoot, as a real one's surplus is cut at max_tokens. The
 * target's forwards: the prompt's and the longest request's
 * verifications (the batch verifies together); draft_ns the
 * spec_draft_share of decode_ns. spec_fault spoils request 0's counts. */
static void spec_report(const null_config *cfg, uint32_t R, tb_result *res)
{
    if (!TB_STRUCT_HAS(res, tb_result, draft_ns) || !res->spec)
        return;
    uint32_t k = (uint32_t)cfg->spec_draft, most = 0;
    for (uint32_t r = 0; r < R; r++) {
        tb_spec_counts *c = &res->spec[r];
        memset(c, 0, sizeof *c);
        c->draft_len = k;
        for (uint64_t made = 0, j = r; made < res->requests[r].n_output_tokens; j++) {
            uint32_t a = cfg->spec_accept[j % cfg->n_spec];
            made += a + 1;
            c->verifications++;
            c->drafted += k;
            c->accepted += a;
            for (uint32_t i = 0; i < k; i++) {
                c->drafted_at[i]++;
                c->accepted_at[i] += i < a;
            }
        }
        if (c->verifications > most)
            most = c->verifications;
    }
    res->forward_passes = 1 + (int64_t)most;
    res->draft_ns = res->decode_ns > 0 ? (int64_t)(cfg->spec_draft_share * (double)res->decode_ns) : 0;
    tb_spec_counts *c0 = &res->spec[0];
    if (cfg->spec_fault == 1)
        c0->accepted = c0->drafted + 1;
    else if (cfg->spec_fault == 2)
        c0->accepted_at[0] = c0->drafted_at[0] + 1;
    else if (cfg->spec_fault == 3)
        c0->draft_len = TB_SPEC_MAX_DRAFT + 1;
}

/* count_extra: the count reported for `done` ids (0 at least). */
static uint32_t counted(uint32_t done, int64_t extra)
{
    int64_t k = (int64_t)done + extra;
    return k < 0 ? 0 : k > UINT32_MAX - 1 ? UINT32_MAX - 1 : (uint32_t)k;
}

/* text_only: each request's ids detokenized (count_skew's words
 * included), returned as its output_text in place of the ids. 0, or -1
 * when out of memory. */
static int texts_for_ids(null_ctx *ctx, tb_result *res, uint32_t R)
{
    size_t need = 0;
    for (uint32_t r = 0; r < R; r++) {
        const tb_request_result *rr = &res->requests[r];
        need += (size_t)null_detokenize(ctx, rr->output_ids, rr->n_output_ids, NULL, 0) + 1;
    }
    if (need > ctx->texts_cap) {
        char *t = realloc(ctx->texts, need);
        if (!t)
            return -1;
        ctx->texts = t;
        ctx->texts_cap = need;
    }
    size_t at = 0;
    for (uint32_t r = 0; r < R; r++) {
        tb_request_result *rr = &res->requests[r];
        char *text = ctx->texts + at;
        at += (size_t)null_detokenize(ctx, rr->output_ids, rr->n_output_ids, text, need - at) + 1;
        rr->output_text = text;
        rr->output_ids = NULL;
        rr->n_output_ids = 0;
    }
    return 0;
}

static tb_status null_generate(void *vctx, const tb_request *req,
                               tb_result *res)
{
    null_ctx *ctx = vctx;
    const tb_host *host = ctx->host;
    uint64_t call = ++ctx->calls;
    ctx->error[0] = '\0';

    if (!req || !res || !TB_STRUCT_HAS(req, tb_request, n_options) ||
        !TB_STRUCT_HAS(res, tb_result, energy_mj)) {
        set_error(ctx, "generate: request or result missing or too small");
        return TB_ERR_INVALID;
    }
    null_config cfg = ctx->base;
    config_apply(&cfg, req->options, req->n_options);
    ctx->active = cfg;

    for (int64_t i = 0; i < cfg.log_lines; i++) {
        if (i % 2 == 0)
            host->log(host, TB_LOG_INFO, "call %llu: scripted log line %lld", (unsigned long long)call,
                      (long long)i + 1);
        else
            fprintf(stderr, "null: call %llu: scripted stderr line %lld\n", (unsigned long long)call,
                    (long long)i + 1);
    }
    if (cfg.crash_at && (uint64_t)cfg.crash_at == call)
        crash_now();
    if (cfg.abort_at && (uint64_t)cfg.abort_at == call)
        abort(); /* SIGABRT, unless a handler of the host's catches it */
    if (cfg.hang_at && (uint64_t)cfg.hang_at == call)
        hang_forever();
    if (cfg.oom_at && (uint64_t)cfg.oom_at == call) {
        /* volatile size: the compiler may not fold away a failing malloc */
        volatile size_t huge = (size_t)1 << 50;
        void *p = malloc(huge);
        if (!p) {
            set_error(ctx, "out of memory: cannot allocate %zu bytes for the batch", (size_t)huge);
            return TB_ERR_NO_MEMORY;
        }
        free(p); /* overcommit let it through: behave as a normal call */
    }
    if (cfg.fail_at && (uint64_t)cfg.fail_at == call) {
        set_error(ctx, "scripted failure at call %llu",
                  (unsigned long long)call);
        return TB_ERR;
    }

    if (cfg.spec_bad) {
        set_error(ctx, "spec_accept: not a comma-separated list of at most %d numbers 0..%d", TB_SPEC_MAX_DRAFT,
                  TB_SPEC_MAX_DRAFT);
        return TB_ERR_INVALID;
    }
    for (uint32_t j = 0; j < cfg.n_spec; j++)
        if (cfg.spec_accept[j] > (uint64_t)cfg.spec_draft) {
            set_error(ctx, "spec_accept: entry %u accepts %u draft tokens of spec_draft = %lld", j + 1,
                      cfg.spec_accept[j], (long long)cfg.spec_draft);
            return TB_ERR_INVALID;
        }

    uint32_t R = req->n_requests, n = req->max_new_tokens;
    if (R == 0 || !res->requests || res->n_requests < R) {
        set_error(ctx, "generate: %u requests, result room for %u", R,
                  res->n_requests);
        return TB_ERR_INVALID;
    }
    if (cfg.max_batch > 0 && R > cfg.max_batch) {
        set_error(ctx, "batch of %u requests exceeds max_batch = %lld", R,
                  (long long)cfg.max_batch);
        return TB_ERR_UNSUPPORTED;
    }
    size_t need = (size_t)R * n;
    if (need > SIZE_MAX / sizeof(int32_t)) {
        set_error(ctx, "%u requests of %u tokens: too many ids", R, n);
        return TB_ERR_NO_MEMORY;
    }
    if (need > ctx->ids_cap) {
        int32_t *ids = realloc(ctx->ids, need * sizeof *ids);
        if (!ids) {
            set_error(ctx, "out of memory for %zu output ids", need);
            return TB_ERR_NO_MEMORY;
        }
        ctx->ids = ids;
        ctx->ids_cap = need;
    }

    uint64_t per_step = (uint64_t)cfg.tokens_per_step;
    uint32_t n_steps = req->steps > 0
                           ? req->steps
                           : (uint32_t)(((uint64_t)n + per_step - 1) / per_step);
    uint64_t prompt_total = 0;
    for (uint32_t r = 0; r < R; r++)
        prompt_total += prompt_len(req, r);
    /* Timing noise differs per call, as on a real machine; the output ids
     * depend on the seed alone, so repetitions produce identical outputs. */
    uint64_t rng = req->seed ^ (call * 0x9E3779B97F4A7C15ULL);
    double step_us = (double)cfg.step_us + cfg.step_us_per_seq * R;

    res->prefill_ns = -1;
    res->decode_ns = -1;
    res->forward_passes = 0;
    res->peak_device_bytes = -1;
    res->energy_mj = -1;

    tb_status st = TB_OK;
    uint32_t done = 0; /* tokens each request has so far */
    /* Hosts that serve us stream the ids' text (tb_host.emit_output);
     * text_only has no ids to stream. */
    int with_ids = TB_STRUCT_HAS(host, tb_host, emit_output) && host->emit_output && !cfg.text_only;
    int failing = null_faults[cfg.fault].error != NULL, stalled = 0;
    uint64_t fault_after = (uint64_t)cfg.fault_after;
    int64_t t0 = host->now_ns(host);
    int64_t deadline = mono_ns();
    int64_t t_prefill = t0;

    deadline += delay_ns((double)cfg.prefill_us +
                             cfg.prefill_us_per_token * (double)prompt_total,
                         cfg.jitter, &rng);
    if (wait_until(host, deadline, cfg.spin) != 0) {
        st = TB_ERR_CANCELLED;
        goto out;
    }
    t_prefill = host->now_ns(host);
    res->prefill_ns = t_prefill - t0;
    res->forward_passes = 1;
    /* Decode deadlines count from the real end of prefill: a late wake-up
     * there must not shorten the decode phase. */
    deadline = mono_ns();

    for (uint32_t i = 0; i < n_steps; i++) {
        if (host->cancelled(host)) {
            st = TB_ERR_CANCELLED;
            goto out;
        }
        uint32_t k = step_tokens(req, &cfg, i, done);
        /* Make this step's ids while "the step runs": the cost hides in
         * the wait instead of adding to it. */
        for (uint32_t r = 0; r < R; r++)
            for (uint32_t p = done; p < done + k; p++)
                ctx->ids[(size_t)r * n + p] = output_id(req->seed, r, p);
        deadline += delay_ns(step_us, cfg.jitter, &rng);
        if (cfg.fault == FAULT_STALL && !stalled && done >= fault_after) {
            stalled = 1; /* a stream that stops for a while */
            deadline += cfg.fault_stall_us * 1000;
        }
        if (wait_until(host, deadline, cfg.spin) != 0) {
            st = TB_ERR_CANCELLED;
            goto out;
        }
        res->forward_passes++;
        if (cfg.leak_mb > 0)
            leak_now(host, cfg.leak_mb, &ctx->leaked_mb);
        /* A flood: far more events than tokens, as fast as emit() takes
         * them (cancellation polled now and then, as a real loop would). */
        for (int64_t f = 0; f < cfg.flood; f++) {
            if ((f & 0xFFFF) == 0xFFFF && host->cancelled(host)) {
                st = TB_ERR_CANCELLED;
                goto out;
            }
            int64_t t = host->now_ns(host);
            for (uint32_t r = 0; r < R; r++)
                host->emit(host, r, 1, t);
        }
        if (k > 0) {
            int64_t t = host->now_ns(host);
            for (uint32_t r = 0; r < R; r++) {
                uint32_t kr = k;
                if (failing && r % cfg.fault_every == 0) /* stops at its fault */
                    kr = done >= fault_after ? 0 : (uint32_t)(fault_after - done < k ? fault_after - done : k);
                if (!kr)
                    continue;
                if (with_ids)
                    host->emit_output(host, r, kr, t, ctx->ids + (size_t)r * n + done, NULL, 0);
                else
                    host->emit(host, r, kr, t);
            }
            done += k;
        }
    }
    res->decode_ns = host->now_ns(host) - t_prefill;

out:
    if (st == TB_ERR_CANCELLED)
        set_error(ctx, "cancelled after %u of %u tokens", done, n);
    if (TB_STRUCT_HAS(res, tb_result, peak_bytes_per_s)) {
        res->flops = cfg.work_flops;
        res->bytes = cfg.work_bytes;
        res->peak_flops = cfg.peak_flops;
        res->peak_bytes_per_s = cfg.peak_bytes_per_s;
    }
    for (uint32_t r = 0; r < R; r++) {
        tb_request_result *rr = &res->requests[r];
        rr->status = st;
        rr->n_output_tokens = counted(done, cfg.count_extra);
        rr->output_ids = done ? ctx->ids + (size_t)r * n : NULL;
        rr->n_output_ids = done;
        rr->steps_done =
            req->steps > 0 && res->forward_passes > 0
                ? (uint32_t)(res->forward_passes - 1)
                : 0;
        rr->output_text = NULL;
        if (st == TB_OK && failing && r % cfg.fault_every == 0) {
            uint32_t got = done < fault_after ? done : (uint32_t)fault_after;
            rr->status = TB_ERR;
            rr->n_output_tokens = got;
            rr->n_output_ids = got;
            rr->output_ids = got ? rr->output_ids : NULL;
            snprintf(rr->error, sizeof rr->error, "%s", null_faults[cfg.fault].error);
        }
        if (st != TB_OK) {
            size_t len = strnlen(ctx->error, sizeof rr->error - 1);
            memcpy(rr->error, ctx->error, len);
            rr->error[len] = '\0';
        }
    }
    if (st == TB_OK && cfg.n_spec)
        spec_report(&cfg, R, res);
    if (cfg.text_only && texts_for_ids(ctx, res, R) != 0) {
        set_error(ctx, "out of memory for the output texts");
        return TB_ERR_NO_MEMORY;
    }
    return st;
}

/* ------------------------------------------------------------------ entry */

static const tb_backend_ops null_ops = {
    .abi_major = TB_ABI_MAJOR,
    .struct_size = sizeof(tb_backend_ops),
    .name = "null",
    .version = NULL_VERSION,
    .description = "no model: scripted latencies and faults (runner "
                   "overhead, failure tests)",
    .capabilities = TB_CAP_BATCH | TB_CAP_STEPS | TB_CAP_STREAMING |
                    TB_CAP_TOKENIZER,
    .options = null_options,
    .n_options = N_OPTS,
    .probe = NULL, /* runs anywhere */
    .create = null_create,
    .destroy = null_destroy,
    .generate = null_generate,
    .last_error = null_last_error,
    .describe = null_describe,
    .tokenize = null_tokenize,
    .detokenize = null_detokenize,
};

__attribute__((visibility("default"))) const tb_backend_ops *
tokbench_backend_entry(void);

__attribute__((visibility("default"))) const tb_backend_ops *
tokbench_backend_entry(void)
{
    return &null_ops;
}
