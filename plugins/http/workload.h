/* workload.h — what the http backend sends: length distributions,
 * conversation datasets, shared-prefix groups and multi-turn sessions
 * (docs/METRICS.md, "Serving workloads").
 *
 * A call's requests are sessions x turns. Request r is turn r / S of
 * session r % S (S sessions), so the requests of one turn are a
 * contiguous run and are sent as one wave: turn t+1 of every session is
 * built once turn t of every session has its answer (the answer is part
 * of the next turn's prompt). With turns = 1 (the default) there is one
 * wave and each request is a session of its own.
 *
 * Everything here is deterministic in its seeds, so a repetition can be
 * run again; nothing allocates without a bound the caller gave (files:
 * TB_WL_MAX_FILE bytes). Errors are values: -1 with a message naming the
 * file, its line and the field; plugin code, so nothing aborts
 * (allocation failures are "out of memory"). */
#ifndef TB_HTTP_WORKLOAD_H
#define TB_HTTP_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "arrivals.h"
#include "prompts.h"
#include "tokenizer.h"

/* The largest dataset or histogram file read, bytes. */
#define TB_WL_MAX_FILE ((size_t)1 << 30)

/* ------------------------------------------------ length distributions */

typedef enum tb_len_kind {
    TB_LEN_FIXED,     /* always `mean` */
    TB_LEN_UNIFORM,   /* uniform on [mean - sqrt(3) stdev, mean + sqrt(3) stdev] */
    TB_LEN_NORMAL,    /* normal(mean, stdev) */
    TB_LEN_LOGNORMAL, /* lognormal with this mean and stdev (not of the log) */
    TB_LEN_HISTOGRAM, /* an empirical histogram from a file */
    TB_N_LEN_KINDS
} tb_len_kind;

/* "fixed|uniform|normal|lognormal|histogram" in tb_len_kind order. */
extern const char *const tb_len_kind_names[TB_N_LEN_KINDS];
/* TB_N_LEN_KINDS when not a name. */
tb_len_kind tb_len_kind_from_name(const char *name);

/* An empirical histogram: bins [lo, hi] of token lengths with weights. */
typedef struct tb_len_hist {
    uint32_t *lo, *hi;
    double *cum; /* cumulative weight up to and including bin i */
    size_t n;
    double mean; /* of the histogram itself (bins at their mid-points) */
} tb_len_hist;

/* Parse a histogram file: one bin a line, "TOKENS WEIGHT" or
 * "LO-HI WEIGHT" (lengths >= 1, LO <= HI, weight >= 0, at least one
 * positive), '#' comments and blank lines skipped. 0, or -1 with
 * "PATH:LINE: ..." in err. */
int tb_len_hist_load(const char *path, tb_len_hist **out, char *err, size_t err_size);
/* The same from text in memory (`name` for the messages). */
int tb_len_hist_parse(const char *name, const char *text, tb_len_hist **out, char *err, size_t err_size);
void tb_len_hist_free(tb_len_hist *h);

typedef struct tb_len_dist {
    tb_len_kind kind;
    double mean, stdev;      /* tokens (not used by HISTOGRAM) */
    uint32_t min, max;       /* every draw is clipped to [min, max] */
    const tb_len_hist *hist; /* HISTOGRAM */
} tb_len_dist;

/* One length drawn from d (clipped to [min, max]). */
uint32_t tb_len_draw(const tb_len_dist *d, tb_arrival_rng *r);

/* ------------------------------------------------ conversation datasets */

typedef struct tb_conv_turn {
    char *user;      /* what the user said */
    char *assistant; /* the reference answer; NULL when the conversation
                        ends with this user turn */
} tb_conv_turn;

typedef struct tb_conversation {
    char *system; /* NULL: none */
    tb_conv_turn *turns;
    size_t n_turns;
    size_t line; /* in the file, 1-based */
} tb_conversation;

typedef struct tb_dataset {
    tb_conversation *conv;
    size_t n;
} tb_dataset;

/* Load a JSONL file of conversations, one a line, in either common form:
 *   ShareGPT:    {"conversations": [{"from": "human", "value": "..."},
 *                                   {"from": "gpt", "value": "..."}, ...]}
 *                (from: system | human, user | gpt, assistant, chatgpt,
 *                bard, bing, model)
 *   OpenAI chat: {"messages": [{"role": "system", "content": "..."},
 *                              {"role": "user", "content": "..."}, ...]}
 *                (role: system, developer | user | assistant; content a
 *                string or a list of {"type": "text", "text": "..."})
 * Other keys are ignored. A system message may only come first; then
 * user and assistant turns alternate, starting with the user. Blank lines
 * are skipped. 0, or -1 with "PATH:LINE: field FIELD: ..." in err. */
int tb_dataset_load(const char *path, tb_dataset **out, char *err, size_t err_size);
int tb_dataset_parse(const char *name, const char *text, tb_dataset **out, char *err, size_t err_size);
void tb_dataset_free(tb_dataset *d);

/* ------------------------------------------------ sessions of a call */

/* The synthetic prompts a call may make, checked at suite load (http.c's
 * validate()): the longest request's prompt (shared prefix, and in a
 * multi-turn session every earlier turn and answer) at most
 * TB_HTTP_MAX_PROMPT_TOKENS, past the context of any served model; all
 * the call's requests together at most TB_HTTP_MAX_CALL_PROMPT_TOKENS,
 * what the client holds as text at once (up to 9 bytes a token: 2.4 GB). */
#define TB_HTTP_MAX_PROMPT_TOKENS (1u << 21)
#define TB_HTTP_MAX_CALL_PROMPT_TOKENS (1ull << 28)

typedef struct tb_workload {
    tb_len_dist prompt;        /* a synthetic user turn's length */
    tb_len_dist output;        /* a request's max_tokens */
    uint32_t prefix_groups;    /* 0: no shared prefix */
    uint32_t prefix_tokens;    /* the shared system prompt's length */
    uint32_t turns;            /* >= 1 */
    const tb_dataset *dataset; /* NULL: synthetic user turns */
    int output_from_reference; /* dataset: max_tokens = the reference
                                  answer's tokens (needs `tok`) */
} tb_workload;

/* One session: its system text and its turns (the user's words and the
 * max_tokens of each), and the answers as they come back. */
typedef struct tb_session {
    char *system;      /* NULL: none */
    char **user;       /* [turns] */
    uint32_t *max_tokens; /* [turns] */
    char **answer;     /* [turns], NULL until that turn's answer is in */
    uint32_t turns;
    size_t conv;       /* dataset: which conversation; SIZE_MAX: none */
} tb_session;

/* The sessions of one call. call_seed varies with the repetition (or
 * not: unique prompts off); prefix_seed does not, so that group g's
 * system prompt is the same in every call (what a prefix cache keeps).
 * vocab/tok make the synthetic texts (tok may be NULL). 0, or -1 with a
 * message (out of memory; a dataset without a conversation of `turns`
 * user turns). */
int tb_sessions_make(const tb_workload *w, const tb_prompt_vocab *vocab, const tb_tokenizer *tok,
                     uint64_t call_seed, uint64_t prefix_seed, uint32_t n_sessions, tb_session **out, char *err,
                     size_t err_size);
void tb_sessions_free(tb_session *s, uint32_t n);

/* A message of turn t of session s, in order: the system text (if any),
 * then user 0, answer 0, ..., user t. */
typedef struct tb_message {
    const char *role; /* "system", "user", "assistant" */
    const char *content;
} tb_message;

/* The messages of turn t (at most 2 t + 2): how many, into msgs. */
size_t tb_session_messages(const tb_session *s, uint32_t t, tb_message *msgs);

/* The prompt of turn t for /v1/completions: the messages' contents one
 * after another, nothing between them (a synthetic text's words start
 * with a space; a dataset's texts are joined by "\n"). malloc'd; NULL
 * when out of memory. */
char *tb_session_prompt(const tb_session *s, uint32_t t);

/* How many dataset conversations have at least `turns` user turns. */
size_t tb_dataset_eligible(const tb_dataset *d, uint32_t turns);

#endif
