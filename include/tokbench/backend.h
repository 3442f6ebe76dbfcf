/*
 * tokbench/backend.h — the one header a tokbench backend plugin sees.
 *
 * A backend is a shared object that exports exactly one symbol,
 * TB_BACKEND_ENTRY_SYMBOL ("tokbench_backend_entry"), of type
 * tb_backend_entry_fn. It returns a pointer to a static, const tb_backend_ops
 * table. Everything else crosses the boundary through that table (plugin →
 * host) and through tb_host (host → plugin), so a plugin never links against
 * the runner.
 *
 * Versioning has two axes, as in SQLite's sqlite3_vfs.iVersion:
 *   - abi_major must equal TB_ABI_MAJOR exactly: a different major means the
 *     layout of existing members changed, and the plugin is refused.
 *   - struct_size is sizeof(tb_backend_ops) as the plugin was compiled.
 *     Members are only ever appended; the host reads a member only when
 *     struct_size covers it (TB_STRUCT_HAS below). A table smaller than the
 *     first ABI-1 layout is refused.
 * The same rule holds for tb_host, tb_request and tb_result: each starts with
 * its own struct_size, set by whoever allocates it.
 *
 * Lifetime: probe() → create() → [generate()]* → destroy(). The host calls
 * these from one thread, in a process of its own for each backend (a crash or
 * hang in a plugin fails the case in flight, never the runner). A plugin must
 * never call exit(), never write to stdout, and never unload itself.
 *
 * Errors are values: a method returns tb_status; the text of the last failure
 * is available from last_error(ctx) until the next call on that ctx.
 *
 * Clock: every timestamp is the host's monotonic clock in nanoseconds, read
 * through tb_host.now_ns, so host and plugin timestamps compare directly.
 */
#ifndef TOKBENCH_BACKEND_H
#define TOKBENCH_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Exact-match major version of this ABI. */
#define TB_ABI_MAJOR 1

/* The one symbol a plugin exports. */
#define TB_BACKEND_ENTRY_SYMBOL "tokbench_backend_entry"

/* Whether a struct that starts with `uint32_t struct_size` is large enough to
 * hold `member` (i.e. the writer of the struct knew about that member). */
#define TB_STRUCT_HAS(ptr, type, member)                                       \
    ((ptr)->struct_size >= offsetof(type, member) + sizeof(((type *)0)->member))

/* ---------------------------------------------------------------- status */

typedef enum tb_status {
    TB_OK = 0,
    TB_ERR = 1,             /* unspecified failure; last_error says more */
    TB_ERR_INVALID = 2,     /* a request or option the backend rejects */
    TB_ERR_UNSUPPORTED = 3, /* valid, but this backend cannot do it */
    TB_ERR_NO_MEMORY = 4,   /* host or device memory exhausted */
    TB_ERR_IO = 5,          /* file, network or device I/O failed */
    TB_ERR_MODEL = 6,       /* the model is missing, malformed or unsupported */
    TB_ERR_CANCELLED = 7,   /* stopped because tb_host.cancelled() said so */
    TB_ERR_TIMEOUT = 8,     /* an operation inside the backend timed out */
} tb_status;

/* ---------------------------------------------------------- capabilities */

/* Bits of tb_backend_ops.capabilities: each is a promise about generate()
 * (or about a method being present). The runner skips, with the reason
 * shown, cases that need a capability the backend lacks. Claim a bit only
 * when the backend keeps its promise; for the two figures (device memory,
 * energy) the host stores no figure at all from a backend that does not
 * claim them. */
enum {
    /* generate() takes n_requests > 1 and runs them as one batch. */
    TB_CAP_BATCH = 1u << 0,
    /* generate() keeps tb_request.concurrency requests in flight at once
     * (closed-loop serving); each request has its own submit time. */
    TB_CAP_CONCURRENCY = 1u << 1,
    /* Honors tb_request.steps (denoising steps of a diffusion sampler). */
    TB_CAP_STEPS = 1u << 2,
    /* Honors tb_request.block_length (semi-autoregressive blocks). */
    TB_CAP_BLOCKS = 1u << 3,
    /* Emits tokens before the request completes (AR decode steps, SSE
     * chunks, diffusion commits), with the backend's default options at
     * least (an option may turn it off, e.g. the http backend's stream =
     * false). Without it, the only emission is the final one and TTFT
     * equals E2E. */
    TB_CAP_STREAMING = 1u << 4,
    /* tokenize() and detokenize() are present: the runner re-counts every
     * output by detokenize → tokenize, and holds a count of text alone
     * to it (docs/METRICS.md, "Output-length check"). */
    TB_CAP_TOKENIZER = 1u << 5,
    /* Measures peak device memory: sets tb_result.peak_device_bytes (see
     * there for what it counts) on every call it runs on a device, and -1
     * on calls it cannot measure (e.g. the CPU path of a backend built
     * with CUDA). A backend that never fills the field must not claim it. */
    TB_CAP_DEVICE_MEMORY = 1u << 6,
    /* Measures energy: sets tb_result.energy_mj (see there) on every call
     * it can meter, and -1 on the others (no meter on this machine or
     * path, a call too short for the meter's resolution). A backend that
     * never fills the field must not claim it. */
    TB_CAP_ENERGY = 1u << 7,
    /* Honors tb_request.request_rate (open-loop arrivals). */
    TB_CAP_REQUEST_RATE = 1u << 8,
    /* loglik() is present: the backend can score text (a judge for
     * generative perplexity, docs/METRICS.md). */
    TB_CAP_LOGLIK = 1u << 9,
    /* --- appended in ABI 1 (a host that predates a bit ignores it) --- */
    /* `model =` names a file or folder on disk that create() loads,
     * unless it holds a ':' (a NAME:... spec such as preset:NAME, which
     * the backend resolves itself). The host checks, when it loads the
     * suite, that a model is given and that such a path exists, and
     * reports it at the suite's file:line before anything runs. */
    TB_CAP_MODEL_PATH = 1u << 10,
};

/* --------------------------------------------------------------- options */

typedef enum tb_option_type {
    TB_OPT_BOOL = 1,   /* true/false, yes/no, on/off, 1/0 */
    TB_OPT_INT = 2,    /* 64-bit signed integer, range [min, max] */
    TB_OPT_FLOAT = 3,  /* double, range [min, max] */
    TB_OPT_STRING = 4, /* any text */
    TB_OPT_ENUM = 5,   /* one of `choices` */
} tb_option_type;

/* Option flags. */
enum {
    /* The option shapes what create() loads (model, device, dtype...):
     * cases that differ in it need a fresh context. Options without this
     * flag may differ from case to case on one context; the runner passes
     * each case's values in tb_request.options. */
    TB_OPTF_LOAD = 1u << 0,
    /* The value is a secret (an API key, an authorization header): the
     * host never stores, logs or prints it; the database and reports show
     * "(secret)" in its place. A plugin must keep it out of describe(),
     * logs and error texts as well. */
    TB_OPTF_SECRET = 1u << 1,
    /* --- appended in ABI 1 (a host that predates a flag ignores it) --- */
    /* A TB_OPT_STRING whose value, when not empty, is a path on disk the
     * backend opens (a tokenizer.json, a folder): the host checks, when
     * it loads the suite, that every value a suite gives it exists,
     * relative to the working directory as the backend will open it, and
     * reports a missing one at the suite's file:line. */
    TB_OPTF_PATH = 1u << 2,
    /* A TB_OPT_STRING naming a model as `model =` does: NAME:... (a
     * preset:NAME) as written, else a path on disk that the host takes
     * relative to the suite file that sets it (as `model =`) and checks to
     * exist when it loads the suite (issue 40: draft_model). */
    TB_OPTF_MODEL = 1u << 3,
    /* A TB_OPT_STRING that, when not empty, gives the requests their
     * prompts (the http backend's `dataset`): such a case has no prompt
     * length of its own, and stores prompt_tokens 0 as a [prompts] set's
     * does; a suite's prompt_tokens for it is refused at load. */
    TB_OPTF_PROMPTS = 1u << 4,
};

/* One option a backend declares. The host checks every option a suite sets
 * against these declarations (unknown name, wrong type, out of range, not a
 * choice) before the backend sees it, and fills in defaults. */
typedef struct tb_option_decl {
    const char *name;          /* [a-z0-9_]+, unique within the backend */
    tb_option_type type;
    const char *default_value; /* as it would be written in a suite */
    const char *help;          /* one line, for `tokbench plugins NAME` */
    const char *choices;       /* TB_OPT_ENUM: "a|b|c"; NULL otherwise */
    double min, max;           /* INT/FLOAT bounds, inclusive; min > max
                                  means unbounded */
    uint32_t flags;            /* TB_OPTF_* */
} tb_option_decl;

/* An option's value as the host parsed it. Exactly the declared options
 * are passed, in declaration order, defaults filled in. */
typedef struct tb_option_value {
    const char *name; /* the declaration's name */
    const char *text; /* normalized text ("true"/"false" for BOOL) */
    int64_t i;        /* BOOL (0/1) and INT */
    double f;         /* FLOAT (and INT, converted) */
} tb_option_value;

/* ------------------------------------------------------------- host API */

typedef enum tb_log_level {
    TB_LOG_ERROR = 0,
    TB_LOG_WARN = 1,
    TB_LOG_INFO = 2,
    TB_LOG_DEBUG = 3,
} tb_log_level;

/* Services the host hands to the plugin at create(). Valid until destroy().
 * Functions may be called from the thread that called into the plugin only,
 * except now_ns() and cancelled(), which are safe from any thread. */
typedef struct tb_host {
    uint32_t struct_size; /* sizeof(tb_host) as the host compiled it */
    uint32_t abi_major;   /* TB_ABI_MAJOR of the host */

    /* Monotonic clock, nanoseconds (CLOCK_MONOTONIC). */
    int64_t (*now_ns)(const struct tb_host *host);

    /* Log a line (no trailing newline needed) to the runner's log. */
    void (*log)(const struct tb_host *host, tb_log_level level,
                const char *fmt, ...)
#if defined(__GNUC__)
        __attribute__((format(printf, 3, 4)))
#endif
        ;

    /* Record an emission: `n_tokens` new output tokens of request `request`
     * (index into tb_request's requests) became available at `t_ns`
     * (read from now_ns when they became available on the host).
     * n_tokens 0 is no emission: no token became available, and the host
     * ignores it (no TTFT, no inter-token gap, not in the emission list).
     * AR: once per decode step per request; diffusion: once per denoising
     * step that committed tokens; HTTP: once per streamed chunk. Cheap: it
     * appends to a preallocated buffer and never blocks. */
    void (*emit)(const struct tb_host *host, uint32_t request,
                 uint32_t n_tokens, int64_t t_ns);

    /* Nonzero once the runner wants the plugin to stop (Ctrl-C, deadline).
     * Long loops should poll it and return TB_ERR_CANCELLED. */
    int (*cancelled)(const struct tb_host *host);

    void *host_data; /* the host's own; plugins must not touch it */

    /* --- appended in ABI 1; test TB_STRUCT_HAS(host, tb_host,
     *     emit_output) before calling it (an older host lacks it) ------ */

    /* Like emit(), and also what the new tokens are, so that a host that
     * serves the backend over HTTP (`tokbench serve`) can stream their
     * text as it is produced. `ids`: the n_tokens new ids, or NULL;
     * `text`: the text_len bytes of UTF-8 they add at the end of the
     * output, or NULL (e.g. diffusion commits in the middle of the
     * canvas: pass ids or nothing). ids and text are the answer's: pass
     * neither for the EOS token that ends it nor for tokens after it
     * (ignore_eos), which a server must not show. Call it instead of
     * emit(), never both for one emission. A host that only measures treats it as emit();
     * both buffers are read before it returns. Emissions made with plain
     * emit() carry no text: a server then sends the output when the
     * request completes. */
    void (*emit_output)(const struct tb_host *host, uint32_t request,
                        uint32_t n_tokens, int64_t t_ns, const int32_t *ids,
                        const char *text, size_t text_len);

    /* --- appended in ABI 1; test TB_STRUCT_HAS(host, tb_host,
     *     request_error) before calling it (an older host lacks it) ---- */

    /* The whole message of request `request`'s failure in the generate()
     * call in progress, when it is longer than tb_request_result.error
     * holds (a server's JSON message, say): the host stores it in place
     * of the cut one (at least its first 512 bytes). Same form as error
     * ("class: ..."); set the request's status and error as well. Call it
     * from the thread that called generate(), before generate() returns;
     * `text` is read before it returns. A plugin keeps secrets out of it
     * as out of error. */
    void (*request_error)(const struct tb_host *host, uint32_t request,
                          const char *text);
} tb_host;

/* -------------------------------------------------------------- requests */

/* One generate() call: a batch of n_requests requests that share the case's
 * dimensions. Dimensions a backend has no capability for are 0. */
typedef struct tb_request {
    uint32_t struct_size;     /* sizeof(tb_request) as the host compiled it */
    uint32_t n_requests;      /* requests in this call (>= 1) */
    uint32_t prompt_tokens;   /* exact prompt length, tokens; 0 with text
                                 prompts (a suite's prompt set) */
    uint32_t max_new_tokens;  /* output tokens to produce per request */
    uint32_t batch;           /* batch size (== n_requests unless serving) */
    uint32_t concurrency;     /* requests in flight (TB_CAP_CONCURRENCY), 0 */
    uint32_t steps;           /* denoising steps (TB_CAP_STEPS), else 0 */
    uint32_t block_length;    /* block length (TB_CAP_BLOCKS), else 0 */
    double request_rate;      /* requests/s (TB_CAP_REQUEST_RATE), else 0 */
    uint64_t seed;            /* per-call seed: suite seed, case, repetition */
    uint32_t repetition;      /* 0-based index within the case */
    uint32_t is_warmup;       /* nonzero for warm-up calls */
    /* Prompts: NULL means "synthesize a deterministic prompt of exactly
     * prompt_tokens tokens from `seed`" (each request its own). Otherwise
     * n_requests UTF-8 strings, of any lengths: a batch backend pads them
     * (the engines left-pad and mask), or fails the call with
     * TB_ERR_UNSUPPORTED if it cannot. Scored suites read output_text (or
     * detokenized output_ids) of each request. */
    const char *const *prompt_text;
    /* This case's values of every declared option, declaration order. */
    const tb_option_value *options;
    uint32_t n_options;
} tb_request;

/* A count the backend did not report. */
#define TB_UNKNOWN_COUNT UINT32_MAX

/* What the plugin reports of one request. The host allocates the array and
 * zeroes it; the plugin fills each element. Because it is an array element,
 * this struct never grows within a major version: a change here bumps
 * TB_ABI_MAJOR. */
typedef struct tb_request_result {
    /* Host clock, ns: when the request was sent. A serving backend
     * (TB_CAP_CONCURRENCY or TB_CAP_REQUEST_RATE: a schedule of its own)
     * sets the scheduled send time, so a slow client cannot hide a slow
     * server; 0 = the time the host called generate(). A batch backend's
     * requests are sent when generate() is called: the host sets that
     * time itself, and ignores what such a backend writes here. */
    int64_t t_submit_ns;
    /* Host clock, ns: when the last output token was available. 0 = the
     * host uses the request's last emission. */
    int64_t t_done_ns;
    tb_status status;            /* TB_OK, or why this request failed */
    uint32_t n_output_tokens;    /* output tokens, as the engine counts;
                                    with output_ids, n_output_ids (the
                                    runner flags a difference) */
    /* Output token ids (TB_CAP_TOKENIZER backends) or NULL; owned by the
     * plugin, valid until the next generate() or destroy(). */
    const int32_t *output_ids;
    uint32_t n_output_ids;
    uint32_t steps_done;         /* denoising steps actually run, or 0
                                    (TB_CAP_STEPS backends only) */
    /* Output tokens before the first EOS (the answer a user reads), for
     * backends that fill fixed-length canvases (diffusion). The host sets
     * it to TB_UNKNOWN_COUNT before the call; leave it when not known. */
    uint32_t n_answer_tokens;
    /* Output text or NULL; same ownership as output_ids. */
    const char *output_text;
    char error[128];             /* short failure text when status != OK
                                    (the whole of a longer one: through
                                    tb_host.request_error) */
} tb_request_result;

/* Figures of one generate() call. Fields not measured stay at their zeroed
 * value (-1 where a 0 would be a real measurement). */
/* Speculative decoding (issue 40): one request's counts over a call. A
 * verification is one target forward that checked a draft of this request:
 * the draft's tokens d_0 .. d_{n-1} (n <= TB_SPEC_MAX_DRAFT) and the target's
 * own token after the longest accepted prefix (the bonus), so a
 * verification yields accepted + 1 tokens. drafted_at[i]: verifications
 * whose draft had a position i; accepted_at[i]: those that accepted it
 * (accepted_at[i] <= drafted_at[i], non-increasing in i). */
#define TB_SPEC_MAX_DRAFT 64
typedef struct tb_spec_counts {
    uint32_t verifications;  /* target forwards that verified a draft of it */
    uint32_t drafted;        /* draft tokens they carried, summed */
    uint32_t accepted;       /* of those, the ones the target accepted */
    uint32_t draft_len;      /* the most draft tokens one verification carried */
    uint32_t drafted_at[TB_SPEC_MAX_DRAFT];
    uint32_t accepted_at[TB_SPEC_MAX_DRAFT];
} tb_spec_counts;

/* Canvas models (issue 41: diffusion samplers): a canvas is the unit a
 * sampler finishes and commits as a whole -- a block of a block sampler
 * or of a semi-autoregressive masked sampler, the whole generation of a
 * single-block sampler (Dream, flow), DiffusionGemma's 256-token canvas.
 * One canvas of one request:
 *   steps      its denoising steps (forwards whose proposals it used);
 *              the request's canvases' steps sum to its steps_done
 *   committed  the output positions it finalised (of the n_output_tokens
 *              the request reports: they sum to it)
 *   positions  the canvas positions the forwards evaluated for it (rows
 *              computed for this request, summed over its steps; a
 *              forward over prompt + canvas counts every row it ran, a
 *              cached one only the rows it ran, classifier-free guidance
 *              twice); a block's store or commit forward is not a step
 *   t_done_ns  host clock (tb_host.now_ns) when it was committed: the
 *              time of the emission of its last tokens, so within the
 *              request (a commit after the request's done, or after its
 *              last emission when it gives no done time, fails it).
 * How a sampler fills it (docs/METRICS.md, steps_per_canvas and after):
 * when TB_STRUCT_HAS(res, tb_result, canvas) and res->canvas is not NULL,
 * call tb_canvas_push(&res->canvas[i], steps, committed, positions,
 * now_ns) once per canvas of request i, in commit order. The first
 * TB_CANVAS_MAX canvases are kept one by one; later ones are counted in
 * n_past and summed into `past`. All zero: not a canvas model. */
#define TB_CANVAS_MAX 256
typedef struct tb_canvas {
    uint32_t steps;
    uint32_t committed;
    uint64_t positions;
    int64_t t_done_ns;
} tb_canvas;
typedef struct tb_canvas_counts {
    uint32_t n;        /* canvases in at[] (<= TB_CANVAS_MAX) */
    uint32_t n_past;   /* canvases finished after at[] was full */
    tb_canvas past;    /* those summed; t_done_ns: the last one's */
    tb_canvas at[TB_CANVAS_MAX];
} tb_canvas_counts;

static inline void tb_canvas_push(tb_canvas_counts *c, uint32_t steps, uint32_t committed, uint64_t positions,
                                  int64_t t_done_ns)
{
    if (c->n < TB_CANVAS_MAX) {
        tb_canvas *k = &c->at[c->n++];
        k->steps = steps, k->committed = committed, k->positions = positions, k->t_done_ns = t_done_ns;
        return;
    }
    c->n_past++;
    c->past.steps += steps, c->past.committed += committed, c->past.positions += positions;
    c->past.t_done_ns = t_done_ns;
}

typedef struct tb_result {
    uint32_t struct_size;        /* sizeof(tb_result) as the host compiled */
    uint32_t n_requests;         /* == tb_request.n_requests */
    tb_request_result *requests; /* n_requests elements, host-allocated */
    /* Phase times of the whole call, ns. prefill: prompt-only work (prompt
     * forward, KV/prefix-cache build); decode: decode steps or denoising
     * steps. -1 when the backend cannot split phases. */
    int64_t prefill_ns;
    int64_t decode_ns;
    int64_t forward_passes;      /* model forward evaluations (NFE) */
    /* TB_CAP_DEVICE_MEMORY: the most device memory the backend held at
     * any moment of this call, bytes; -1 if unknown. It is a high-water
     * mark, not what is held at the end: it includes what was resident
     * when the call began (weights, caches kept from earlier calls) and
     * every buffer allocated during the call, transient ones freed before
     * it returned included (library workspaces such as cuBLAS's, staging).
     * It counts what the backend allocates itself, in the sizes it asks
     * for; it excludes what the backend cannot see: the CUDA context and
     * its kernels' code, what libraries allocate for themselves (cuBLAS
     * handles), CUDA graphs, the allocator's rounding and caching, host
     * memory (pinned included), other processes. So it is below
     * nvidia-smi's figure for the process. */
    int64_t peak_device_bytes;
    /* TB_CAP_ENERGY: the energy the device drew over the call,
     * millijoules; -1 if unknown. Read from the device's own counter
     * before and after the call's work: the whole device's draw (idle
     * power and other processes included), not this backend's share. */
    int64_t energy_mj;
    /* --- appended in ABI 1; write only when TB_STRUCT_HAS(res, tb_result,
     * ...) says the host has them. The roofline (docs/METRICS.md): the
     * work of the call by the engine's own count and the device's
     * ceilings; 0 = not reported. */
    double flops;                /* floating-point operations (multiply-add = 2) */
    double bytes;                /* device-memory bytes the forwards must move: weights, KV cache */
    double peak_flops;           /* the device's FLOP/s ceiling (measured) */
    double peak_bytes_per_s;     /* its memory-bandwidth ceiling (measured) */
    /* --- appended in ABI 1; write only when TB_STRUCT_HAS(res, tb_result,
     * prompt_hash) and it is not NULL. n_requests elements, host-allocated
     * and zeroed: what prompt each request was given, so that the host
     * compares outputs only between requests of the same prompt (an
     * output that differs between repetitions of one prompt and seed is
     * flagged, docs/METRICS.md). A backend that makes its own prompts
     * (prompt_text NULL) other than as a function of seed, request index
     * and prompt_tokens alone -- e.g. a different prompt every repetition
     * -- must write a nonzero hash of each request's prompt as sent (any
     * 64-bit hash of its bytes or ids). 0 = the host's rule: a hash of the
     * given prompt_text, or else the synthetic prompt's seed, index and
     * length. */
    uint64_t *prompt_hash;
    /* --- appended in ABI 1 (issue 21: serving workloads); write only
     * when TB_STRUCT_HAS(res, tb_result, ...) says the host has them and
     * the array is not NULL. A backend that draws each request's lengths
     * itself (a length distribution, a conversation dataset, a shared
     * prefix, a multi-turn session) says what each request was given:
     * prompt_tokens[i], the prompt's length as sent, tokens (0: unknown:
     * the host stores NULL; at most one a byte of a prompt_text, else the
     * call's prompt_tokens, + 16, unless the backend serves: docs/PLUGINS.md); max_tokens[i], the output tokens request i
     * asked for (0: the call's max_new_tokens). n_requests elements each,
     * host-allocated and zeroed. */
    uint32_t *prompt_tokens;
    uint32_t *max_tokens;
    /* A load bounded by a duration: requests [n_requests - n_unsent,
     * n_requests) were never sent (the time ran out first); the host
     * drops them from the call. At most n_requests - 1: a call sends at
     * least one request. */
    uint32_t n_unsent;
    /* --- appended in ABI 1 (issue 21: the client's CPU); write only when TB_STRUCT_HAS(res, tb_result,
     * client_busy). A backend that is a client of a server (it measures
     * the server through its own event loops, e.g. http): how busy its
     * own CPU was over the call, 0..1, as the larger of (a) its busiest
     * event loop's thread CPU time over the load's wall time and (b) its
     * process's CPU time over wall time x the CPUs it may run on. Near 1
     * the figures are the client's ceiling, not the server's
     * (docs/METRICS.md, client_busy). 0 = not measured. Outside 0..1
     * (beyond the clocks' rounding) it fails the case. */
    double client_busy;
    /* --- appended in ABI 1 (issue 19: block diffusion); write only when
     * TB_STRUCT_HAS(res, tb_result, blocks_done) and it is not NULL.
     * n_requests elements, host-allocated and zeroed: the blocks request i
     * decoded (a block sampler's blocks that held a masked position of the
     * request's canvas, through the one where it stopped; docs/METRICS.md,
     * blocks_done). 0: not a block-decoding backend; only a TB_CAP_BLOCKS
     * backend reports more, at most the request's output tokens. */
    uint32_t *blocks_done;
    /* --- appended in ABI 1 (issue 22: mixture of experts); write only
     * when TB_STRUCT_HAS(res, tb_result, moe_tokens). An engine whose model
     * has MoE layers: expert_reads, the distinct routed experts each MoE
     * layer call read, summed over the call's MoE layer calls; moe_tokens,
     * the rows (tokens) those layer calls processed, summed likewise
     * (docs/METRICS.md, experts_per_token). The roofline's `bytes` then
     * count only the experts read. 0 and 0: a dense model, or not
     * reported. */
    double expert_reads;
    double moe_tokens;
    /* --- appended in ABI 1 (issue 40: speculative decoding); write only
     * when TB_STRUCT_HAS(res, tb_result, spec) and it is not NULL.
     * n_requests elements, host-allocated and zeroed: each request's
     * drafting and verification counts (tb_spec_counts; docs/METRICS.md,
     * acceptance_length and the metrics after it). All zero: the request
     * was not decoded speculatively. */
    tb_spec_counts *spec;
    /* The call's wall time spent drafting, ns: the drafter's forwards and
     * the host work that makes its proposals (0: not speculative). The
     * rest of decode_ns is verification and bookkeeping. */
    int64_t draft_ns;
    /* --- appended in ABI 1 (issue 41: canvas models); write only when
     * TB_STRUCT_HAS(res, tb_result, canvas) and it is not NULL.
     * n_requests elements, host-allocated and zeroed: each request's
     * canvases (tb_canvas_counts, filled by tb_canvas_push). tokbench
     * passes it to backends that declare TB_CAP_STEPS (canvas models:
     * ~6 KB a request) and NULL to the others. */
    tb_canvas_counts *canvas;
} tb_result;

/* ------------------------------------------- iteration-level serving */

/* A request joining a stepped batch (tb_backend_ops.step_join). */
typedef struct tb_step_join {
    uint32_t struct_size;      /* sizeof(tb_step_join) as the host compiled it */
    uint32_t max_new_tokens;   /* this request's limit (<= step_open's) */
    const char *prompt_text;   /* UTF-8, tokenized by the backend */
    uint64_t seed;             /* this request's sampling seed */
    /* The case's option values with this request's overrides (a server's
     * per-request temperature, top_p), declaration order. */
    const tb_option_value *options;
    uint32_t n_options;
} tb_step_join;

/* A request that ended during a step (tb_backend_ops.step). The host
 * provides the array; ids are the backend's until its next step or
 * step_close. */
typedef struct tb_step_end {
    uint32_t slot;
    tb_status status;           /* TB_OK, or why it failed */
    uint32_t n_output_tokens;   /* generated, EOS and tokens after it included */
    uint32_t n_answer_tokens;   /* before the first EOS (TB_UNKNOWN_COUNT: not known) */
    const int32_t *output_ids;  /* n_output_ids ids, or NULL */
    uint32_t n_output_ids;
    int64_t t_done_ns;          /* host clock: its last token */
    char error[128];
} tb_step_end;

/* ------------------------------------------------------------ ops table */

typedef struct tb_backend_ops {
    /* --- ABI 1, required --------------------------------------------- */
    uint32_t abi_major;   /* TB_ABI_MAJOR */
    uint32_t struct_size; /* sizeof(tb_backend_ops) */
    const char *name;     /* short name: what `plugin =` in a suite says */
    const char *version;  /* the plugin's own version, free form */
    const char *description; /* one line */
    uint32_t capabilities;   /* TB_CAP_* bits */
    const tb_option_decl *options; /* declared options (may be NULL if 0) */
    uint32_t n_options;

    /* Optional (may be NULL = can always run). Whether the backend can run
     * on this host; on failure writes a reason (e.g. "no CUDA device")
     * into why[why_size]. Called in the process that will run the cases. */
    tb_status (*probe)(char *why, size_t why_size);

    /* Required. Load `model` (path, preset name or URL: the backend's
     * business) with `options` (every declared option, declaration order).
     * On failure returns a status and, when *ctx_out could not be made,
     * writes a message into err[err_size]. */
    tb_status (*create)(const tb_host *host, const char *model,
                        const tb_option_value *options, uint32_t n_options,
                        void **ctx_out, char *err, size_t err_size);

    /* Required. Release everything create() made. */
    void (*destroy)(void *ctx);

    /* Required. Run one batch of requests to completion, emitting tokens
     * through host->emit and filling `result`. Must honor host->cancelled()
     * in long loops. */
    tb_status (*generate)(void *ctx, const tb_request *request,
                          tb_result *result);

    /* Required. Text of the last failure on `ctx` ("" if none). */
    const char *(*last_error)(void *ctx);

    /* Optional. A JSON object describing what was loaded, stored with the
     * run: {"model_name":..., "dtype":"bf16", "device":"NVIDIA H200",
     * "random_weights":true, "engine_version":..., "params":8030261248}.
     * Owned by ctx. Keys "dtype", "device" and "random_weights" are shown
     * in reports. At most TB_DESCRIBE_MAX bytes: a longer one fails the
     * load. */
    const char *(*describe)(void *ctx);

    /* Optional (TB_CAP_TOKENIZER). Tokenize `text` (no special tokens
     * added) into ids[cap]; returns the token count (which may exceed cap:
     * call again with more room), or -1 with last_error set. ids may be
     * NULL when cap is 0 (the host asks for the count only). */
    int64_t (*tokenize)(void *ctx, const char *text, int32_t *ids,
                        size_t cap);

    /* Optional (TB_CAP_TOKENIZER). Decode ids into out[cap] as UTF-8,
     * NUL-terminated when cap > 0; returns the byte length needed without
     * the NUL (which may be >= cap: call again), or -1. out may be NULL
     * when cap is 0. */
    int64_t (*detokenize)(void *ctx, const int32_t *ids, size_t n,
                          char *out, size_t cap);

    /* --- appended in ABI 1; read only when TB_STRUCT_HAS says so ------ */

    /* Optional. Check one case before anything runs (at suite load, in a
     * process of its own, without a context): `request` carries the case's
     * dimensions and options (n_requests = batch, no prompts). Returns
     * TB_OK, or TB_ERR_INVALID with the reason in why[why_size] — e.g.
     * "gen_length 100 is not a multiple of block_length 32". */
    tb_status (*validate)(const tb_request *request, char *why,
                          size_t why_size);

    /* Optional (TB_CAP_LOGLIK). Log-likelihood of `continuation` after
     * `context` (both UTF-8; context may be ""): the sum over the
     * continuation's tokens of ln p(token | all tokens before it), and the
     * number of tokens summed. The two texts are tokenized separately and
     * concatenated (no special tokens), so n_tokens is the continuation's
     * own token count; with an empty context the first token is
     * conditioned on the model's BOS token when it has one, else it is not
     * scored (n_tokens one less). An empty continuation gives 0 and 0.
     * Not timed: the host calls it outside any measurement. */
    tb_status (*loglik)(void *ctx, const char *context,
                        const char *continuation, double *sum_logprob,
                        uint32_t *n_tokens);

    /* --- appended in ABI 1, all five or none (read only when
     * TB_STRUCT_HAS(ops, tb_backend_ops, step_close) and step_open is not
     * NULL): iteration-level ("continuous") batching, for `tokbench
     * serve`. A stepped session holds up to max_slots requests; a request
     * joins at the next step and ends at its EOS or limit, and its slot
     * (its KV cache) is reused by the next one. A backend without these
     * is served in static batches through generate().
     *
     * step_open: start a session for the case `shape` (dimensions and
     * options; max_new_tokens = the most any request may ask). The
     * backend may allocate its caches for max_slots requests here.
     * step_join: queue a request into free slot `slot` (< max_slots); its
     * prefill runs at the next step. TB_ERR_INVALID with the reason in
     * why (prompt too long for the model, ...) refuses it: the slot stays
     * free. step: one iteration: prefill the requests that joined, one
     * decode step for the others; emissions through host->emit_output (or
     * emit) with `request` = the slot; every request that ended in it
     * (EOS unless ignore_eos, its limit, a failure) is written to
     * ends[*n_ends] (ends has max_slots elements) and its slot is free
     * again. A failure of the whole step returns non-OK: the host then
     * closes the session. step_leave: end the request in `slot` now
     * (its client left, a stop sequence matched); nothing is reported
     * for it. step_close: end the session and every request in it. */
    tb_status (*step_open)(void *ctx, const tb_request *shape, uint32_t max_slots);
    tb_status (*step_join)(void *ctx, uint32_t slot, const tb_step_join *join, char *why, size_t why_size);
    tb_status (*step)(void *ctx, tb_step_end *ends, uint32_t *n_ends);
    void (*step_leave)(void *ctx, uint32_t slot);
    void (*step_close)(void *ctx);

    /* --- appended in ABI 1 (read only when TB_STRUCT_HAS says so) ---- */

    /* Optional (TB_CAP_TOKENIZER). Whether token `id` is a special token
     * (a tokenizer.json added token marked "special": BOS, EOS, a mask, a
     * chat template's markers): 1 or 0. The host leaves such tokens' text
     * out of the answer text it grades and `tokbench serve` returns, as
     * vLLM's skip_special_tokens does; detokenize() still decodes them
     * (the re-count check reads every token). NULL: none is special. */
    int (*is_special)(void *ctx, int32_t id);
} tb_backend_ops;

/* The longest describe() text the host takes, bytes (1 MiB). */
#define TB_DESCRIBE_MAX (1u << 20)

/* The smallest ops table the host accepts: ABI 1 through `detokenize`. */
#define TB_OPS_MIN_SIZE                                                       \
    (offsetof(tb_backend_ops, detokenize) + sizeof(void *))

/* The entry point a plugin exports under TB_BACKEND_ENTRY_SYMBOL. */
typedef const tb_backend_ops *(*tb_backend_entry_fn)(void);

/* --------------------------------------------------- error classes
 *
 * A failed request's tb_request_result.error may start with a class: a
 * word of [a-z0-9_] followed by ": ", e.g. "http_429: HTTP 429: slow
 * down". The runner counts failed requests per class (metric
 * errors_CLASS, docs/METRICS.md); a served backend's class picks the
 * HTTP behaviour (`tokbench serve`). The classes in use:
 *   connect           no connection (refused, DNS, connect timeout)
 *   timeout           the request outlived its total timeout
 *   http_429          HTTP 429 Too Many Requests
 *   http_4xx          another HTTP 4xx status
 *   http_5xx          an HTTP 5xx status
 *   server_error      an error object inside a 200 stream
 *   malformed_stream  a response that is not what the protocol says
 *                     (bad SSE, bad JSON, wrong shape, a usage count
 *                     the stream contradicts)
 *   dropped           the connection closed before the response ended,
 *                     or a stream ended with neither [DONE] nor a
 *                     finish_reason
 * An error without a class counts as "other". */
#define TB_ERROR_CLASS_SEP ": "

#ifdef __cplusplus
}
#endif

#endif /* TOKBENCH_BACKEND_H */
