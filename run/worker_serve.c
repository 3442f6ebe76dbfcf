/* worker_serve.c — the worker in live mode, for `tokbench serve`
 * (serve_batch.c is the other side). The server asks for one batch of prompts at
 * a time (TB_MSG_GENERATE); every emission is sent at once (TB_MSG_EMIT)
 * with the text it adds, so that the server can stream it, and the batch
 * ends with TB_MSG_GENERATED: each request's status, token counts and
 * whole answer text. */
#define _GNU_SOURCE
#include "worker_serve.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "utf8.h"
#include "wire.h"

/* What was streamed of one request so far. */
struct tb_live_req {
    int32_t *ids; /* ids emitted so far (emit_output with ids) */
    size_t n_ids, cap_ids;
    /* Incremental detokenization (as vLLM and TGI do it): the text of
     * ids[prefix_off, read_off) was decoded; decoding from prefix_off
     * again gives the new ids the context their spacing depends on. */
    size_t prefix_off, read_off;
    int broken; /* detokenize failed: no more text for this request */
    /* The answer's text so far and how much of it was sent: the end that
     * may be the start of a stop sequence waits, and nothing is sent from
     * a stop sequence on. */
    tb_str text;
    size_t sent;
    int stopped;
    const char *const *stop;
    uint32_t n_stop;
};

/* Where the first of the stop sequences begins in s[n], or SIZE_MAX. */
static size_t first_stop(const char *s, size_t n, const char *const *stop, uint32_t n_stop)
{
    size_t at = SIZE_MAX;
    for (uint32_t k = 0; k < n_stop && s; k++) {
        if (!stop[k][0])
            continue; /* the parser refuses them; never a match at 0 */
        const char *p = memmem(s, n, stop[k], strlen(stop[k]));
        if (p && (size_t)(p - s) < at)
            at = (size_t)(p - s);
    }
    return at;
}

/* How much of L->text may be sent now (see tb_live_req). */
static size_t sendable(tb_live_req *L)
{
    if (L->stopped)
        return L->sent;
    size_t n = L->text.len;
    size_t at = first_stop(L->text.s, n, L->stop, L->n_stop);
    if (at != SIZE_MAX) {
        L->stopped = 1;
        return at > L->sent ? at : L->sent;
    }
    size_t hold = 0; /* the longest end of the text that begins a stop sequence */
    for (uint32_t k = 0; k < L->n_stop; k++) {
        if (!L->stop[k][0])
            continue;
        size_t m = strlen(L->stop[k]) - 1;
        for (size_t j = m < n ? m : n; j > hold; j--)
            if (memcmp(L->text.s + n - j, L->stop[k], j) == 0) {
                hold = j;
                break;
            }
    }
    return n - hold > L->sent ? n - hold : L->sent;
}

/* Bytes of s[0..n) that can be sent now: not a trailing incomplete UTF-8
 * sequence, nor a trailing U+FFFD (a decoder's stand-in for bytes that
 * the next token may complete). */
static size_t stable_prefix(const char *s, size_t n)
{
    if (n >= 3 && memcmp(s + n - 3, "\xEF\xBF\xBD", 3) == 0)
        return n - 3;
    size_t k = 0; /* continuation bytes at the end */
    while (k < 3 && k < n && ((unsigned char)s[n - 1 - k] & 0xC0) == 0x80)
        k++;
    if (k == n)
        return n;
    unsigned char lead = (unsigned char)s[n - 1 - k];
    size_t want = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    return want > k + 1 ? n - 1 - k : n;
}

void tb_worker_live_emit(tb_worker *w, uint32_t request, uint32_t n_tokens, int64_t t_ns,
                         const int32_t *ids, const char *text, size_t text_len)
{
    if (request >= w->live_n) {
        w->em.dropped++;
        return;
    }
    tb_live_req *L = &w->live[request];
    tb_wire_emit e = {.request = w->live_map[request], .n_tokens = n_tokens, .t_ns = t_ns};
    const char *delta = NULL;
    size_t delta_len = 0;
    if (text) {
        e.has_text = 1;
        delta = text;
        delta_len = text_len;
    } else if (ids && n_tokens && (w->ops->capabilities & TB_CAP_TOKENIZER) && !L->broken) {
        if (L->n_ids + n_tokens > L->cap_ids) {
            L->cap_ids = (L->n_ids + n_tokens) * 2;
            L->ids = tb_xrealloc(L->ids, L->cap_ids * sizeof *L->ids);
        }
        memcpy(L->ids + L->n_ids, ids, n_tokens * sizeof *ids);
        L->n_ids += n_tokens;
        /* both through tb_worker_decode_ids: special tokens' text left
         * out of either */
        int64_t prefix = L->read_off > L->prefix_off
                             ? tb_worker_decode_ids(w, L->ids + L->prefix_off, L->read_off - L->prefix_off)
                             : 0;
        int64_t full = tb_worker_decode_ids(w, L->ids + L->prefix_off, L->n_ids - L->prefix_off);
        if (prefix < 0 || full < 0) {
            L->broken = 1;
        } else {
            e.has_text = 1;
            /* Only whole characters: a token may end inside one. */
            if (full > prefix && stable_prefix(w->scratch, (size_t)full) == (size_t)full) {
                delta = w->scratch + prefix;
                delta_len = (size_t)(full - prefix);
                L->prefix_off = L->read_off;
                L->read_off = L->n_ids;
            }
        }
    }
    if (delta_len)
        tb_str_appendn(&L->text, delta, delta_len);
    size_t upto = sendable(L);
    const char *out = L->text.s + L->sent;
    e.text_len = (uint32_t)(upto - L->sent);
    L->sent = upto;
    tb_str b = {0};
    tb_str_appendn(&b, (const char *)&e, sizeof e);
    if (e.text_len)
        tb_str_appendn(&b, out, e.text_len);
    if (w->slots) /* a stepped session: sent with the step's answer, in one write */
        tb_wire_frame_append(&w->step_out, TB_MSG_EMIT, b.s, b.len);
    else if (tb_wire_send(w->fd_out, TB_MSG_EMIT, b.s, b.len) != 0)
        _exit(3); /* the server is gone */
    tb_str_free(&b);
}

/* What describe() says of the model's positions: context_length (0: not
 * said) and whether a prompt gets a BOS token before its own. */
static void model_limits(tb_worker *w, int64_t *context, int *bos)
{
    *context = 0;
    *bos = 0;
    const char *d = w->ops->describe && w->ctx ? w->ops->describe(w->ctx) : NULL;
    cJSON *j = d ? cJSON_Parse(d) : NULL;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "context_length");
    if (cJSON_IsNumber(c) && c->valuedouble > 0)
        *context = (int64_t)c->valuedouble;
    *bos = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "prompt_bos"));
    cJSON_Delete(j);
}

/* The answer's tokens that make its first `bytes` bytes of text: the
 * fewest output ids whose text is that long (the text was cut at a stop
 * sequence); a re-count of the text without ids. */
static uint32_t tokens_covering(tb_worker *w, const tb_request_result *r, uint32_t n, const char *text, size_t bytes)
{
    if (!(w->ops->capabilities & TB_CAP_TOKENIZER))
        return n;
    if (!r->output_ids) {
        int64_t k = w->ops->tokenize(w->ctx, text, NULL, 0);
        return k >= 0 && k < n ? (uint32_t)k : n;
    }
    uint32_t lo = 0, hi = n; /* decode(ids[0, hi)) covers it */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        int64_t len = mid ? tb_worker_decode_ids(w, r->output_ids, mid) : 0;
        if (len >= 0 && (size_t)len >= bytes)
            hi = mid;
        else
            lo = mid + 1;
    }
    return hi;
}

/* Request r's answer as the client gets it: the text up to the first EOS
 * (tb_worker_answer_text, what the in-process path grades), at most
 * `want` tokens, cut at a stop sequence; its token count and why it
 * ended. */
static void serve_answer(tb_worker *w, const tb_request_result *r, uint32_t want, const char *const *stop,
                         uint32_t n_stop, tb_str *text, tb_wire_gen_req *o)
{
    tb_request_result t = *r;
    uint32_t n_out = t.output_ids ? t.n_output_ids : t.n_output_tokens;
    int known = t.n_answer_tokens != TB_UNKNOWN_COUNT;
    uint32_t ans = known && t.n_answer_tokens < n_out ? t.n_answer_tokens : n_out;
    int eos = known && t.n_answer_tokens < n_out;
    uint32_t finish;
    if (ans >= want) {
        ans = want; /* a diffusion canvas rounded up to whole blocks */
        finish = TB_FINISH_LENGTH;
    } else if (eos) {
        finish = TB_FINISH_STOP;
    } else { /* no EOS reported: short of max_tokens, the backend stopped */
        finish = t.n_output_tokens >= want ? TB_FINISH_LENGTH : TB_FINISH_STOP;
    }
    if (t.output_ids)
        t.n_answer_tokens = ans;
    tb_worker_answer_text(w, &t, text);
    size_t at = first_stop(text->s, text->len, stop, n_stop);
    if (at != SIZE_MAX) {
        text->len = at;
        text->s[at] = '\0';
        finish = TB_FINISH_STOP;
        ans = tokens_covering(w, &t, ans, text->s, at);
    }
    o->completion_tokens = ans;
    o->finish = finish;
}

/* The case's option values with a request's sampling fields in place of
 * those of the same names (vtext: their texts); NULL when it has none. */
static tb_option_value *request_options(const tb_case *c, uint32_t set, double temperature, double top_p,
                                        uint32_t top_k, char vtext[3][32])
{
    tb_option_value *opts = c && c->n_options ? tb_xcalloc(c->n_options, sizeof *opts) : NULL;
    for (uint32_t i = 0; opts && i < c->n_options; i++) {
        opts[i] = c->options[i];
        if ((set & TB_GEN_TEMPERATURE) && strcmp(opts[i].name, "temperature") == 0) {
            snprintf(vtext[0], 32, "%.17g", temperature);
            opts[i].f = temperature, opts[i].i = (int64_t)temperature, opts[i].text = vtext[0];
        } else if ((set & TB_GEN_TOP_P) && strcmp(opts[i].name, "top_p") == 0) {
            snprintf(vtext[1], 32, "%.17g", top_p);
            opts[i].f = top_p, opts[i].i = (int64_t)top_p, opts[i].text = vtext[1];
        } else if ((set & TB_GEN_TOP_K) && strcmp(opts[i].name, "top_k") == 0) {
            snprintf(vtext[2], 32, "%u", top_k);
            opts[i].f = top_k, opts[i].i = top_k, opts[i].text = vtext[2];
        }
    }
    return opts;
}

/* usage.prompt_tokens of a prompt of n_prompt tokens (-1: not counted):
 * every token the model reads, the BOS the backend puts before the
 * prompt included (as OpenAI and vLLM count). -1 when unknown. */
static int32_t usage_prompt_tokens(int64_t n_prompt, int bos)
{
    return n_prompt < 0 || n_prompt + bos > INT32_MAX ? -1 : (int32_t)(n_prompt + bos);
}

/* A request whose prompt (n_prompt tokens, + BOS) and output (max_tokens,
 * as a canvas of `canvas`) do not fit the model's context: refused with
 * the figures, before any work. */
static void refuse_context(tb_wire_gen_req *o, int64_t context, int64_t n_prompt, int bos, uint32_t max_tokens,
                           uint32_t canvas)
{
    o->status = TB_ERR_INVALID;
    char as[48] = "";
    if (canvas != max_tokens)
        snprintf(as, sizeof as, " as a canvas of %u", canvas);
    /* Built whole, then cut to the wire's field (at a byte). */
    char *msg = tb_xasprintf("http_4xx: the model's context is %lld tokens; this request needs %lld (prompt "
                             "%lld%s + max_tokens %u%s)",
                             (long long)context, (long long)(n_prompt + bos + canvas), (long long)n_prompt,
                             bos ? " + BOS" : "", max_tokens, as);
    tb_strlcpy(o->error, msg, sizeof o->error);
    free(msg);
}

/* One GENERATE batch: prompts of one token length run as one generate()
 * call (engines batch equal lengths), groups one after another. The
 * request's sampling fields replace the case's option values of the same
 * names; a diffusion canvas is max_tokens rounded up to whole blocks,
 * with the case's steps per block; a prompt that does not fit the
 * model's context with its output is refused before any work. */
void tb_worker_serve_generate(tb_worker *w, const char *buf, size_t len)
{
    tb_wire_gen g;
    tb_wire_gen_done done = {0};
    memcpy(&g, buf, sizeof g);
    uint32_t n = g.n_requests;
    const char **prompts = tb_xcalloc(n ? n : 1, sizeof *prompts);
    const char *(*stops)[TB_WIRE_MAX_STOP] = tb_xcalloc(n ? n : 1, sizeof *stops);
    uint32_t *n_stops = tb_xcalloc(n ? n : 1, sizeof *n_stops);
    const char *p = buf + sizeof g, *end = buf + len;
    for (uint32_t i = 0; i < n; i++) {
        const char *nul = p < end ? memchr(p, '\0', (size_t)(end - p)) : NULL;
        uint32_t k = 0;
        if (nul && (size_t)(end - nul - 1) >= sizeof k)
            memcpy(&k, nul + 1, sizeof k);
        else
            nul = NULL;
        prompts[i] = p;
        p = nul ? nul + 1 + sizeof k : end;
        for (uint32_t s = 0; nul && s < k; s++) {
            const char *z = p < end ? memchr(p, '\0', (size_t)(end - p)) : NULL;
            if (!z || s >= TB_WIRE_MAX_STOP) {
                nul = NULL;
                break;
            }
            stops[i][n_stops[i]++] = p;
            p = z + 1;
        }
        if (!nul) {
            n = i; /* truncated: answer what is whole */
            break;
        }
    }
    done.n_requests = n;
    tb_wire_gen_req *res = tb_xcalloc(n ? n : 1, sizeof *res);
    tb_str *texts = tb_xcalloc(n ? n : 1, sizeof *texts);
    int64_t *lens = tb_xcalloc(n ? n : 1, sizeof *lens);
    int *taken = tb_xcalloc(n ? n : 1, sizeof *taken);
    const tb_case *c = g.case_index < w->plan->n_cases ? &w->plan->cases[g.case_index] : NULL;
    uint32_t caps = w->ops->capabilities;
    int tok = (caps & TB_CAP_TOKENIZER) != 0;

    /* the canvas and steps (diffusion), the options */
    uint32_t canvas = g.max_new_tokens, steps = c ? c->steps : 0;
    if (c && (caps & TB_CAP_BLOCKS) && c->block_length > 0) {
        uint32_t bl = c->block_length;
        if (canvas % bl)
            canvas = (canvas / bl + 1) * bl;
        if ((caps & TB_CAP_STEPS) && steps > 0 && c->max_new_tokens >= bl && c->max_new_tokens % bl == 0 &&
            steps % (c->max_new_tokens / bl) == 0)
            steps = steps / (c->max_new_tokens / bl) * (canvas / bl);
    }
    char vtext[3][32];
    tb_option_value *opts = request_options(c, g.set, g.temperature, g.top_p, g.top_k, vtext);
    int64_t context = 0;
    int bos = 0;
    if (w->ctx)
        model_limits(w, &context, &bos);
    for (uint32_t i = 0; i < n; i++) {
        lens[i] = tok && w->ctx ? w->ops->tokenize(w->ctx, prompts[i], NULL, 0) : -1;
        res[i].prompt_tokens = usage_prompt_tokens(lens[i], bos);
        if (context > 0 && lens[i] >= 0 && lens[i] + bos + canvas > context) {
            taken[i] = 1; /* refused before any work */
            refuse_context(&res[i], context, lens[i], bos, g.max_new_tokens, canvas);
        }
    }
    uint32_t *map = tb_xcalloc(n ? n : 1, sizeof *map);
    const char **gp = tb_xcalloc(n ? n : 1, sizeof *gp);
    tb_request_result *rr = tb_xcalloc(n ? n : 1, sizeof *rr);
    for (uint32_t i = 0; i < n; i++) {
        if (taken[i])
            continue;
        uint32_t k = 0;
        for (uint32_t j = i; j < n; j++)
            if (!taken[j] && lens[j] == lens[i]) {
                taken[j] = 1;
                map[k] = j;
                gp[k++] = prompts[j];
            }
        if (!c || !w->ctx) {
            for (uint32_t q = 0; q < k; q++) {
                res[map[q]].status = TB_ERR;
                snprintf(res[map[q]].error, sizeof res[map[q]].error, "no backend context");
            }
            continue;
        }
        tb_request req = {
            .struct_size = sizeof req,
            .n_requests = k,
            .prompt_tokens = lens[i] > 0 && lens[i] <= UINT32_MAX ? (uint32_t)lens[i] : 0,
            .max_new_tokens = canvas,
            .batch = k,
            .steps = steps,
            .block_length = c->block_length,
            .seed = g.seed,
            .prompt_text = gp,
            .options = opts,
            .n_options = c->n_options,
        };
        memset(rr, 0, k * sizeof *rr);
        for (uint32_t q = 0; q < k; q++)
            rr[q].n_answer_tokens = TB_UNKNOWN_COUNT;
        tb_result out = {.struct_size = sizeof out, .n_requests = k, .requests = rr, .prefill_ns = -1,
                         .decode_ns = -1, .peak_device_bytes = -1, .energy_mj = -1};
        w->live = tb_xcalloc(k, sizeof *w->live);
        for (uint32_t q = 0; q < k; q++) {
            w->live[q].stop = stops[map[q]];
            w->live[q].n_stop = n_stops[map[q]];
        }
        w->live_map = map;
        w->live_n = k;
        tb_status st = w->ops->generate(w->ctx, &req, &out);
        const char *le = st != TB_OK ? w->ops->last_error(w->ctx) : NULL;
        for (uint32_t q = 0; q < k; q++) {
            tb_wire_gen_req *o = &res[map[q]];
            o->status = st != TB_OK ? (int32_t)st : (int32_t)rr[q].status;
            o->n_output_tokens = rr[q].n_output_tokens;
            if (st != TB_OK)
                tb_utf8_copy_valid(o->error, sizeof o->error, le && *le ? le : tb_status_name(st), SIZE_MAX);
            else if (rr[q].status != TB_OK) /* within the plugin's error[128], made valid UTF-8 */
                tb_utf8_copy_valid(o->error, sizeof o->error, rr[q].error[0] ? rr[q].error : tb_status_name(rr[q].status),
                                   rr[q].error[0] ? sizeof rr[q].error : SIZE_MAX);
            if (st == TB_OK && rr[q].status == TB_OK)
                serve_answer(w, &rr[q], g.max_new_tokens, stops[map[q]], n_stops[map[q]], &texts[map[q]], o);
            free(w->live[q].ids);
            tb_str_free(&w->live[q].text);
        }
        free(w->live);
        w->live = NULL;
        w->live_n = 0;
        if (st != TB_OK) {
            done.status = st;
            snprintf(done.message, sizeof done.message, "generate() failed (%s): %s", tb_status_name(st),
                     le && *le ? le : "no message");
        }
    }
    tb_str b = {0};
    tb_str_appendn(&b, (const char *)&done, sizeof done);
    for (uint32_t i = 0; i < n; i++) {
        res[i].text_len = (uint32_t)texts[i].len;
        tb_str_appendn(&b, (const char *)&res[i], sizeof res[i]);
        if (texts[i].len)
            tb_str_appendn(&b, texts[i].s, texts[i].len);
        tb_str_free(&texts[i]);
    }
    if (tb_wire_send(w->fd_out, TB_MSG_GENERATED, b.s, b.len) != 0)
        _exit(3);
    tb_str_free(&b);
    free(prompts);
    free(stops);
    free(n_stops);
    free(opts);
    free(res);
    free(texts);
    free(lens);
    free(taken);
    free(map);
    free(gp);
    free(rr);
}

/* ------------------------------------------------ stepped sessions
 *
 * Continuous batching (serve_batch.c drives it): the server opens a
 * session once (STEP_OPEN), then sends one STEP per iteration with the
 * requests that join and those whose clients left; the worker runs the
 * backend's step() and answers with the emissions (request = slot) and
 * the requests that ended. A request whose text reaches one of its stop
 * sequences is ended here, at once (step_leave): its generation stops,
 * not only its text. */

/* One request of the session, by slot. */
typedef struct tb_step_slot tb_step_slot;
struct tb_step_slot {
    int active;
    uint32_t max_tokens;    /* the client's limit */
    int32_t prompt_tokens;  /* -1: not counted */
    char *stop[TB_WIRE_MAX_STOP];
    uint32_t n_stop;
};

static int has_step_ops(const tb_backend_ops *o)
{
    return TB_STRUCT_HAS(o, tb_backend_ops, step_close) && o->step_open && o->step_join && o->step &&
           o->step_leave && o->step_close;
}

static void slot_clear(tb_worker *w, uint32_t i)
{
    tb_step_slot *S = &w->slots[i];
    for (uint32_t k = 0; k < S->n_stop; k++)
        free(S->stop[k]);
    memset(S, 0, sizeof *S);
    tb_live_req *L = &w->live[i];
    free(L->ids);
    tb_str_free(&L->text);
    memset(L, 0, sizeof *L);
}

static void session_free(tb_worker *w)
{
    for (uint32_t i = 0; i < w->n_slots; i++)
        slot_clear(w, i);
    free(w->slots);
    free(w->live);
    free(w->step_map);
    free(w->step_ends);
    tb_str_free(&w->step_out);
    w->slots = NULL;
    w->live = NULL;
    w->step_map = NULL;
    w->step_ends = NULL;
    w->live_map = NULL;
    w->live_n = w->n_slots = 0;
}

void tb_worker_serve_step_close(tb_worker *w)
{
    if (!w->slots)
        return;
    if (w->ctx)
        w->ops->step_close(w->ctx);
    session_free(w);
}

void tb_worker_serve_step_open(tb_worker *w, const char *buf, size_t len)
{
    tb_wire_status out = {0};
    tb_wire_step_open o;
    (void)len; /* sizeof o: the message table checked it */
    memcpy(&o, buf, sizeof o);
    tb_worker_serve_step_close(w);
    if (!has_step_ops(w->ops)) {
        out.status = TB_ERR_UNSUPPORTED;
        snprintf(out.message, sizeof out.message, "plugin %s has no step ops (static batches only)", w->ops->name);
    } else if (!w->ctx || o.case_index >= w->plan->n_cases || o.max_slots < 1) {
        out.status = TB_ERR_INVALID;
        snprintf(out.message, sizeof out.message, "no loaded context for case %u, or no slots", o.case_index);
    } else {
        const tb_case *c = &w->plan->cases[o.case_index];
        int64_t context = 0;
        int bos = 0;
        model_limits(w, &context, &bos);
        /* the most any request may ask: what the model's positions allow
         * (the backend may hold fewer, and refuses a join beyond) */
        uint32_t most = context > 1 && context < (int64_t)1 << 30 ? (uint32_t)context - 1 : 1u << 30;
        tb_request shape = {
            .struct_size = sizeof shape,
            .n_requests = o.max_slots,
            .max_new_tokens = most,
            .batch = o.max_slots,
            .steps = c->steps,
            .block_length = c->block_length,
            .seed = w->plan->suite->seed,
            .options = c->options,
            .n_options = c->n_options,
        };
        tb_status st = w->ops->step_open(w->ctx, &shape, o.max_slots);
        out.status = st;
        if (st != TB_OK) {
            const char *le = w->ops->last_error(w->ctx);
            char raw[sizeof out.message];
            snprintf(raw, sizeof raw, "step_open(%u slots) failed (%s): %s", o.max_slots, tb_status_name(st),
                     le && *le ? le : "no message");
            tb_utf8_copy_valid(out.message, sizeof out.message, raw, sizeof raw); /* plugin text */
        } else {
            w->n_slots = o.max_slots;
            w->step_case = o.case_index;
            w->step_context = context; /* for every join's check */
            w->step_bos = bos;
            w->slots = tb_xcalloc(o.max_slots, sizeof *w->slots);
            w->live = tb_xcalloc(o.max_slots, sizeof *w->live);
            w->step_map = tb_xcalloc(o.max_slots, sizeof *w->step_map);
            w->step_ends = tb_xcalloc(o.max_slots, sizeof *w->step_ends);
            for (uint32_t i = 0; i < o.max_slots; i++)
                w->step_map[i] = i;
            w->live_map = w->step_map;
            w->live_n = o.max_slots;
        }
    }
    if (tb_wire_send(w->fd_out, TB_MSG_STEP_OPENED, &out, sizeof out) != 0)
        _exit(3);
}

/* Append one ended request to the STEPPED payload b. */
static void put_ended(tb_str *b, uint32_t slot, tb_wire_gen_req *o, const tb_str *text)
{
    o->text_len = text ? (uint32_t)text->len : 0;
    tb_str_appendn(b, (const char *)&slot, sizeof slot);
    tb_str_appendn(b, (const char *)o, sizeof *o);
    if (o->text_len)
        tb_str_appendn(b, text->s, text->len);
}

/* Parse and start one joining request at *p (advanced); an ended
 * request is appended to b when it is refused. Returns -1 when the
 * message is malformed. */
static int join_one(tb_worker *w, const char **p, const char *end, tb_str *b, uint32_t *n_ended)
{
    tb_wire_join j;
    if ((size_t)(end - *p) < sizeof j)
        return -1;
    memcpy(&j, *p, sizeof j);
    *p += sizeof j;
    const char *prompt = *p;
    const char *nul = memchr(*p, '\0', (size_t)(end - *p));
    uint32_t k;
    if (!nul || (size_t)(end - nul - 1) < sizeof k)
        return -1;
    memcpy(&k, nul + 1, sizeof k);
    *p = nul + 1 + sizeof k;
    const char *stops[TB_WIRE_MAX_STOP];
    for (uint32_t i = 0; i < k; i++) {
        const char *z = *p < end ? memchr(*p, '\0', (size_t)(end - *p)) : NULL;
        if (!z || i >= TB_WIRE_MAX_STOP)
            return -1;
        stops[i] = *p;
        *p = z + 1;
    }
    if (j.slot >= w->n_slots || w->slots[j.slot].active)
        return -1;
    tb_wire_gen_req o = {0};
    int tok = (w->ops->capabilities & TB_CAP_TOKENIZER) != 0;
    int64_t n_prompt = tok ? w->ops->tokenize(w->ctx, prompt, NULL, 0) : -1;
    int64_t context = w->step_context;
    int bos = w->step_bos;
    o.prompt_tokens = usage_prompt_tokens(n_prompt, bos);
    if (context > 0 && n_prompt >= 0 && n_prompt + bos + j.max_new_tokens > context) {
        refuse_context(&o, context, n_prompt, bos, j.max_new_tokens, j.max_new_tokens);
        put_ended(b, j.slot, &o, NULL);
        (*n_ended)++;
        return 0;
    }
    char vtext[3][32];
    const tb_case *c = &w->plan->cases[w->step_case];
    tb_option_value *opts = request_options(c, j.set, j.temperature, j.top_p, j.top_k, vtext);
    tb_step_join sj = {.struct_size = sizeof sj, .max_new_tokens = j.max_new_tokens, .prompt_text = prompt,
                       .seed = j.seed, .options = opts, .n_options = c->n_options};
    char why[128] = "";
    tb_status st = w->ops->step_join(w->ctx, j.slot, &sj, why, sizeof why);
    free(opts);
    if (st != TB_OK) {
        o.status = st;
        tb_utf8_copy_valid(o.error, sizeof o.error, why[0] ? why : tb_status_name(st), why[0] ? sizeof why : SIZE_MAX);
        put_ended(b, j.slot, &o, NULL);
        (*n_ended)++;
        return 0;
    }
    tb_step_slot *S = &w->slots[j.slot];
    S->active = 1;
    S->max_tokens = j.max_new_tokens;
    S->prompt_tokens = o.prompt_tokens;
    S->n_stop = k;
    for (uint32_t i = 0; i < k; i++)
        S->stop[i] = tb_xstrdup(stops[i]);
    tb_live_req *L = &w->live[j.slot];
    L->stop = (const char *const *)S->stop;
    L->n_stop = k;
    return 0;
}

void tb_worker_serve_step(tb_worker *w, const char *buf, size_t len)
{
    tb_wire_stepped done = {0};
    tb_str b = {0};
    tb_str_appendn(&b, (const char *)&done, sizeof done);
    tb_wire_step h;
    const char *p = buf, *end = buf + len;
    int malformed = !w->slots; /* no session; len >= sizeof h (the message table) */
    if (!malformed) {
        memcpy(&h, p, sizeof h);
        p += sizeof h;
        malformed = h.n_leaves > w->n_slots || (size_t)(end - p) < (size_t)h.n_leaves * sizeof(uint32_t);
    }
    for (uint32_t i = 0; !malformed && i < h.n_leaves; i++) {
        uint32_t slot;
        memcpy(&slot, p, sizeof slot);
        p += sizeof slot;
        if (slot < w->n_slots && w->slots[slot].active) {
            w->ops->step_leave(w->ctx, slot);
            slot_clear(w, slot);
        }
    }
    for (uint32_t i = 0; !malformed && i < h.n_joins; i++)
        malformed = join_one(w, &p, end, &b, &done.n_ended) != 0;
    if (malformed) {
        done.status = TB_ERR_INVALID;
        snprintf(done.message, sizeof done.message, "malformed STEP message");
    }
    uint32_t active = 0;
    for (uint32_t i = 0; i < w->n_slots; i++)
        active += w->slots[i].active;
    uint32_t n_ends = 0;
    tb_status st = TB_OK;
    if (!malformed && active)
        st = w->ops->step(w->ctx, w->step_ends, &n_ends);
    if (st != TB_OK) { /* the session is over: every request in it failed */
        const char *le = w->ops->last_error(w->ctx);
        done.status = st;
        char raw[sizeof done.message];
        snprintf(raw, sizeof raw, "step() failed (%s): %s", tb_status_name(st), le && *le ? le : "no message");
        tb_utf8_copy_valid(done.message, sizeof done.message, raw, sizeof raw); /* plugin text */
        n_ends = 0;
    }
    for (uint32_t e = 0; e < n_ends && e < w->n_slots; e++) {
        const tb_step_end *E = &w->step_ends[e];
        if (E->slot >= w->n_slots || !w->slots[E->slot].active)
            continue; /* a slot the backend never had: ignored */
        tb_step_slot *S = &w->slots[E->slot];
        tb_wire_gen_req o = {.status = E->status, .n_output_tokens = E->n_output_tokens,
                             .prompt_tokens = S->prompt_tokens};
        tb_str text = {0};
        if (E->status == TB_OK) {
            tb_request_result rr = {.status = TB_OK, .n_output_tokens = E->n_output_tokens,
                                    .output_ids = E->output_ids, .n_output_ids = E->n_output_ids,
                                    .n_answer_tokens = E->n_answer_tokens};
            serve_answer(w, &rr, S->max_tokens, (const char *const *)S->stop, S->n_stop, &text, &o);
        } else {
            tb_utf8_copy_valid(o.error, sizeof o.error, E->error[0] ? E->error : tb_status_name(E->status),
                               E->error[0] ? sizeof E->error : SIZE_MAX);
        }
        put_ended(&b, E->slot, &o, &text);
        tb_str_free(&text);
        done.n_ended++;
        slot_clear(w, E->slot);
    }
    /* A stop sequence reached: the request ends now. */
    for (uint32_t i = 0; i < w->n_slots; i++) {
        tb_live_req *L = &w->live[i];
        tb_step_slot *S = &w->slots[i];
        if (!S->active || !(L->stopped || st != TB_OK))
            continue;
        tb_wire_gen_req o = {.prompt_tokens = S->prompt_tokens, .n_output_tokens = (uint32_t)L->n_ids};
        tb_str text = {0};
        if (st != TB_OK) {
            o.status = st;
            tb_strlcpy(o.error, done.message, sizeof o.error);
        } else {
            w->ops->step_leave(w->ctx, i);
            size_t at = first_stop(L->text.s, L->text.len, L->stop, L->n_stop);
            at = at == SIZE_MAX ? L->sent : at;
            tb_str_appendn(&text, L->text.s ? L->text.s : "", at);
            tb_request_result rr = {.status = TB_OK, .output_ids = L->ids, .n_output_ids = (uint32_t)L->n_ids,
                                    .n_output_tokens = (uint32_t)L->n_ids};
            o.completion_tokens = tokens_covering(w, &rr, (uint32_t)L->n_ids, text.s ? text.s : "", at);
            o.finish = TB_FINISH_STOP;
        }
        put_ended(&b, i, &o, &text);
        tb_str_free(&text);
        done.n_ended++;
        slot_clear(w, i);
    }
    done.n_active = 0;
    for (uint32_t i = 0; i < w->n_slots; i++)
        done.n_active += w->slots[i].active;
    memcpy(b.s, &done, sizeof done);
    /* the step's emissions (an AR step emits every token at once, after
     * its forward), then its answer: one write */
    tb_wire_frame_append(&w->step_out, TB_MSG_STEPPED, b.s, b.len);
    int sent = tb_wire_send_frames(w->fd_out, &w->step_out);
    w->step_out.len = 0;
    if (st != TB_OK)
        tb_worker_serve_step_close(w);
    if (sent != 0)
        _exit(3);
    tb_str_free(&b);
}
