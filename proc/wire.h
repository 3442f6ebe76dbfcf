/* wire.h — messages between the runner and a backend's worker process.
 *
 * Both ends are the same executable (the worker is a fork of the runner),
 * so payloads are plain structs copied byte for byte. A frame is
 * {uint32 type, uint32 length} followed by `length` payload bytes. Each
 * type has one meaning and one payload size (a header's, for those with
 * a variable rest); the worker refuses a frame of another size or an
 * unknown type, and ends (run/worker.c's message table). */
#ifndef TB_WIRE_H
#define TB_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "metrics.h"
#include "util.h"

typedef enum tb_msg {
    /* runner → worker */
    TB_MSG_CASE = 1, /* payload: uint32 index into plan->cases;
                        answered by LOADED, a PROGRESS per call, then
                        RESULT, or by CASE_ERROR */
    TB_MSG_QUIT = 2, /* no payload: destroy and exit */
    /* runner → worker, serving (`tokbench serve`) */
    TB_MSG_LOAD = 3,     /* payload: uint32 case index: load (or keep) the
                            context of that case; answered by LOADED */
    TB_MSG_GENERATE = 4, /* tb_wire_gen, then per request its
                            NUL-terminated prompt, a uint32 count of stop
                            sequences and those, NUL-terminated: one
                            batch; answered by EMIT frames as tokens
                            appear, then GENERATED */
    TB_MSG_JUDGE = 5,    /* tb_wire_judge, then n pairs of NUL-terminated
                            context and continuation texts; answered by
                            LOADED, then JUDGED */
    TB_MSG_STEP_OPEN = 6, /* tb_wire_step_open: start a stepped session
                             (continuous batching) on the loaded context;
                             answered by STEP_OPENED */
    TB_MSG_STEP = 7,      /* tb_wire_step, its leaves (uint32 slots), then
                             per join a tb_wire_join, its NUL-terminated
                             prompt and stop sequences: one iteration;
                             answered by EMIT frames (request = slot),
                             then STEPPED */
    TB_MSG_CASE_LOAD = 8, /* tb_wire_case_load: one run of a load search;
                             answered as CASE */
    /* worker → runner */
    TB_MSG_PROBE = 10,     /* tb_wire_status: can the backend run here */
    TB_MSG_LOADED = 11,    /* tb_wire_status, then describe() JSON text */
    TB_MSG_RESULT = 12,    /* tb_wire_case + calls, see below */
    TB_MSG_CASE_ERROR = 13, /* tb_wire_status: the case failed */
    TB_MSG_EMIT = 14,      /* tb_wire_emit, then text_len bytes */
    TB_MSG_GENERATED = 15, /* tb_wire_gen_done, then per request a
                              tb_wire_gen_req and its text_len bytes */
    TB_MSG_JUDGED = 16,    /* n tb_wire_loglik, in the JUDGE order */
    TB_MSG_STEP_OPENED = 17, /* tb_wire_status: TB_ERR_UNSUPPORTED when
                                the backend has no step ops */
    TB_MSG_STEPPED = 18,   /* tb_wire_stepped, then per ended request a
                              uint32 slot, a tb_wire_gen_req and its
                              text_len bytes */
    TB_MSG_PROGRESS = 19   /* tb_wire_progress: a call of the CASE in
                              flight is done (sent between calls, outside
                              the timed region); the RESULT follows the
                              last */
} tb_msg;

/* TB_MSG_CASE_LOAD: one run of a load search (search.h), case `index`
 * with its concurrency and request rate replaced. */
typedef struct tb_wire_case_load {
    uint32_t index;
    uint32_t concurrency; /* 0: none (open loop) */
    double request_rate;  /* 0: none (closed loop) */
} tb_wire_case_load;

typedef struct tb_wire_progress {
    uint32_t calls_done; /* warm-ups included */
    uint32_t n_calls;
} tb_wire_progress;

typedef struct tb_wire_status {
    int32_t status;   /* tb_status; TB_OK = fine */
    int32_t reused;   /* LOADED: 1 if the existing context was kept */
    int64_t load_ns;  /* LOADED: time create() took */
    char message[1024];
} tb_wire_status;

/* RESULT payload: one tb_wire_case, then for each call a tb_raw_call
 * (metrics.h) followed by its n_requests tb_raw_request, n_emissions tb_emission, and
 * the output texts of its requests (text_len bytes each, request order;
 * only in suites with a prompt set). */
typedef struct tb_wire_case {
    uint32_t n_calls;       /* warm-ups first, then measured repetitions */
    uint32_t pad;
    int64_t host_peak_rss;  /* worker's peak RSS so far, bytes */
} tb_wire_case;

/* Decode a RESULT payload (want_requests per call) into calls[*n_calls]
 * (malloc'd; each call's req and em arrays are copies, texts point into
 * buf) and the worker's peak RSS. 0, or -1 with *err (malloc'd) when the
 * payload is malformed. tb_wire_result_free() frees what it made. */
int tb_wire_decode_result(const char *buf, size_t len, uint32_t want_requests, tb_call_view **calls,
                          size_t *n_calls, int64_t *host_peak_rss, char **err);
void tb_wire_result_free(tb_call_view *calls, size_t n_calls);

/* Bytes of a RESULT payload of `calls` calls of n_requests requests with
 * `emissions` emissions per request and at most `canvas` bytes of canvas
 * record each (a canvas model's: TB_CANVAS_WIRE_BYTES(TB_CANVAS_MAX);
 * else 0) (output texts not counted); UINT64_MAX when that does not fit
 * in 64 bits. The whole payload is one frame, so a case whose result
 * exceeds TB_WIRE_MAX_FRAME cannot reach the runner: the plan refuses it
 * (plan.c). */
uint64_t tb_wire_result_bytes(uint64_t calls, uint64_t n_requests, uint64_t emissions, uint64_t canvas);

/* JUDGE payload header. */
#define TB_WIRE_JUDGE_LOAD UINT32_MAX
typedef struct tb_wire_judge {
    uint32_t case_index; /* a case of the judge backend: its load options;
                            TB_WIRE_JUDGE_LOAD: tb_plan.judge_load */
    uint32_t n;          /* pairs that follow */
} tb_wire_judge;

/* One loglik() answer. */
typedef struct tb_wire_loglik {
    int32_t status;      /* tb_status */
    uint32_t n_tokens;
    double sum_logprob;
} tb_wire_loglik;

/* GENERATE payload header. */
/* Stop sequences per GENERATE request, at most. */
#define TB_WIRE_MAX_STOP 4

/* tb_wire_gen.set: which option values the batch's requests override */
enum { TB_GEN_TEMPERATURE = 1u << 0, TB_GEN_TOP_P = 1u << 1, TB_GEN_TOP_K = 1u << 2 };

typedef struct tb_wire_gen {
    uint32_t case_index;     /* whose options and dimensions to use */
    uint32_t n_requests;
    uint32_t max_new_tokens; /* the answer's limit (a diffusion canvas is
                                rounded up to whole blocks) */
    uint32_t set;            /* TB_GEN_* */
    uint64_t seed;
    double temperature;      /* the options "temperature", "top_p" and */
    double top_p;            /* "top_k", where `set` says */
    uint32_t top_k;
    uint32_t pad;
} tb_wire_gen;

/* tb_wire_gen_req.finish */
enum { TB_FINISH_NONE = 0, TB_FINISH_STOP = 1, TB_FINISH_LENGTH = 2 };

/* A live emission of request `request` (index in the GENERATE batch). */
typedef struct tb_wire_emit {
    uint32_t request;
    uint32_t n_tokens;
    int64_t t_ns;
    uint32_t has_text; /* 0: the plugin said how many tokens, not which */
    uint32_t text_len; /* bytes of new output text that follow */
} tb_wire_emit;

typedef struct tb_wire_gen_done {
    int32_t status;   /* generate()'s status (of the last group on error) */
    uint32_t n_requests;
    char message[512];
} tb_wire_gen_done;

typedef struct tb_wire_gen_req {
    int32_t status;          /* tb_status of this request */
    uint32_t n_output_tokens; /* as the engine counts (a whole canvas) */
    int32_t prompt_tokens;   /* the plugin's tokenizer's count; -1: none */
    uint32_t text_len;       /* the answer text that follows */
    uint32_t completion_tokens; /* the answer's tokens: up to its EOS or
                                   stop sequence, at most max_new_tokens */
    uint32_t finish;         /* TB_FINISH_*: why the answer ended */
    char error[128];
} tb_wire_gen_req;

/* STEP_OPEN payload. */
typedef struct tb_wire_step_open {
    uint32_t case_index; /* the loaded case: its options and dimensions */
    uint32_t max_slots;  /* requests in flight at most */
} tb_wire_step_open;

/* STEP payload header. */
typedef struct tb_wire_step {
    uint32_t n_leaves; /* slots to end now (their clients are gone) */
    uint32_t n_joins;
} tb_wire_step;

/* One joining request of a STEP; its prompt, a uint32 count of stop
 * sequences and those (NUL-terminated) follow. */
typedef struct tb_wire_join {
    uint32_t slot;
    uint32_t max_new_tokens;
    uint32_t set; /* TB_GEN_* */
    uint32_t top_k; /* where set has TB_GEN_TOP_K */
    uint64_t seed;
    double temperature, top_p;
} tb_wire_join;

/* STEPPED payload header. */
typedef struct tb_wire_stepped {
    int32_t status;    /* the step's status: not OK ends the session */
    uint32_t n_ended;  /* requests that ended in this step */
    uint32_t n_active; /* requests still in the session after it */
    uint32_t pad;
    char message[512];
} tb_wire_stepped;

/* "ok", "out of memory", ... for a tb_status value: the words of a
 * status in the messages either end writes. */
const char *tb_status_name(int status);

/* Frames are bounded: a length beyond this is a protocol error, not an
 * allocation (a worker's memory may be corrupt). */
#define TB_WIRE_MAX_FRAME ((size_t)1 << 30)

/* What a read ended with. */
typedef enum tb_wire_rc {
    TB_WIRE_ERROR = -1,      /* read error (errno), or a frame over TB_WIRE_MAX_FRAME */
    TB_WIRE_FRAME = 0,       /* a whole frame */
    TB_WIRE_EOF = 1,         /* the other end closed its pipe */
    TB_WIRE_TIMEOUT = 2,     /* the deadline passed */
    TB_WIRE_INTERRUPTED = 3  /* *interrupted became nonzero */
} tb_wire_rc;

/* Write a whole frame; 0 or -1 (errno set). */
int tb_wire_send(int fd, uint32_t type, const void *payload, size_t len);
/* Frames built in a buffer (len < TB_WIRE_MAX_FRAME, as any frame), then
 * written with one write: several answers at the cost of one system
 * call. 0, or -1 (errno). */
void tb_wire_frame_append(tb_str *b, uint32_t type, const void *payload, size_t len);
int tb_wire_send_frames(int fd, const tb_str *frames);

/* A buffered reader of frames: one read() takes as many frames as the
 * pipe holds (a streamed batch sends one frame per emission, and a
 * read() per frame would cost more than the emissions). */
typedef struct tb_wire_reader {
    int fd;
    char *buf;
    size_t len, pos, cap; /* bytes held, first unread, allocated */
    /* tb_wire_reader_watch: another descriptor served while waiting */
    int side_fd;
    int (*side)(void *ctx);
    void *side_ctx;
    int side_turn; /* both were ready and the frames went first */
    int exit_fd;   /* tb_wire_reader_watch_exit: -1 none */
} tb_wire_reader;

/* One frame: the payload points into the reader's buffer and is valid
 * until the next read (or reset). Not aligned: memcpy out of it. */
typedef struct tb_wire_frame {
    uint32_t type;
    const char *payload;
    size_t len;
} tb_wire_frame;

/* Start reading fd (nothing buffered). */
void tb_wire_reader_init(tb_wire_reader *r, int fd);
void tb_wire_reader_free(tb_wire_reader *r);

/* While tb_wire_read waits, also watch fd (-1: none): when it is
 * readable (or closed), side(ctx) is called to read it; side returns -1
 * when fd is closed, and it is watched no more. (The worker client
 * relays a worker's stderr this way: worker_client.h.) Reset by
 * tb_wire_reader_init. */
void tb_wire_reader_watch(tb_wire_reader *r, int fd, int (*side)(void *ctx), void *ctx);

/* While tb_wire_read waits, also watch exit_fd (a pidfd of the writer,
 * proc.h; -1: none): once it is readable (the writer ended) and the pipe
 * holds nothing more, the read ends with TB_WIRE_EOF, as at the pipe's
 * end. A descendant of the writer that keeps the pipe open (a plugin's
 * forked child) then cannot turn the writer's crash into a timeout.
 * Reset by tb_wire_reader_init. */
void tb_wire_reader_watch_exit(tb_wire_reader *r, int exit_fd);

/* The next frame, waiting at most until deadline_ns (tb_now_ns clock; 0 =
 * forever) and giving up early when *interrupted (may be NULL) becomes
 * nonzero; it is looked at at least every 200 ms. */
tb_wire_rc tb_wire_read(tb_wire_reader *r, int64_t deadline_ns, volatile int *interrupted, tb_wire_frame *f);

#endif
