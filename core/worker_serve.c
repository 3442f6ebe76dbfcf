/* worker_serve.c — the worker in live mode, for `tokbench serve`
 * (serve_batch.c is the other side). The server asks for one batch of prompts at
 * a time (TB_MSG_GENERATE); every emission is sent at once (TB_MSG_EMIT)
 * with the text it adds, so that the server can stream it, and the batch
 * ends with TB_MSG_GENERATED: each request's status, token counts and
 * whole answer text. */
#include "worker_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wire.h"
#include "worker.h"

/* What was streamed of one request so far. */
struct tb_live_req {
    int32_t *ids; /* ids emitted so far (emit_output with ids) */
    size_t n_ids, cap_ids;
    /* Incremental detokenization (as vLLM and TGI do it): the text of
     * ids[prefix_off, read_off) was sent; decoding from prefix_off again
     * gives the new ids the context their spacing depends on. */
    size_t prefix_off, read_off;
    int broken; /* detokenize failed: no more text for this request */
};

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
    if (text) {
        e.has_text = 1;
        delta = text;
        e.text_len = (uint32_t)text_len;
    } else if (ids && n_tokens && (w->ops->capabilities & TB_CAP_TOKENIZER) && !L->broken) {
        if (L->n_ids + n_tokens > L->cap_ids) {
            L->cap_ids = (L->n_ids + n_tokens) * 2;
            L->ids = tb_xrealloc(L->ids, L->cap_ids * sizeof *L->ids);
        }
        memcpy(L->ids + L->n_ids, ids, n_tokens * sizeof *ids);
        L->n_ids += n_tokens;
        int64_t prefix = L->read_off > L->prefix_off
                             ? w->ops->detokenize(w->ctx, L->ids + L->prefix_off, L->read_off - L->prefix_off, NULL, 0)
                             : 0;
        int64_t full = tb_worker_decode_ids(w, L->ids + L->prefix_off, L->n_ids - L->prefix_off);
        if (prefix < 0 || full < 0) {
            L->broken = 1;
        } else {
            e.has_text = 1;
            /* Only whole characters: a token may end inside one. */
            if (full > prefix && stable_prefix(w->scratch, (size_t)full) == (size_t)full) {
                delta = w->scratch + prefix;
                e.text_len = (uint32_t)(full - prefix);
                L->prefix_off = L->read_off;
                L->read_off = L->n_ids;
            }
        }
    }
    tb_str b = {0};
    tb_str_appendn(&b, (const char *)&e, sizeof e);
    if (e.text_len)
        tb_str_appendn(&b, delta, e.text_len);
    if (tb_wire_send(w->fd_out, TB_MSG_EMIT, b.s, b.len) != 0)
        _exit(3); /* the server is gone */
    tb_str_free(&b);
}

/* One GENERATE batch: prompts of one token length run as one generate()
 * call (engines batch equal lengths), groups one after another. */
void tb_worker_serve_generate(tb_worker *w, const char *buf, size_t len)
{
    tb_wire_gen g;
    tb_wire_gen_done done = {0};
    if (len < sizeof g) {
        snprintf(done.message, sizeof done.message, "malformed GENERATE message");
        done.status = TB_ERR_INVALID;
        tb_wire_send(w->fd_out, TB_MSG_GENERATED, &done, sizeof done);
        return;
    }
    memcpy(&g, buf, sizeof g);
    uint32_t n = g.n_requests;
    const char **prompts = tb_xcalloc(n ? n : 1, sizeof *prompts);
    const char *p = buf + sizeof g, *end = buf + len;
    for (uint32_t i = 0; i < n; i++) {
        const char *nul = p < end ? memchr(p, '\0', (size_t)(end - p)) : NULL;
        if (!nul) {
            n = i; /* truncated: answer what is whole */
            break;
        }
        prompts[i] = p;
        p = nul + 1;
    }
    done.n_requests = n;
    tb_wire_gen_req *res = tb_xcalloc(n ? n : 1, sizeof *res);
    tb_str *texts = tb_xcalloc(n ? n : 1, sizeof *texts);
    int64_t *lens = tb_xcalloc(n ? n : 1, sizeof *lens);
    int *taken = tb_xcalloc(n ? n : 1, sizeof *taken);
    const tb_case *c = g.case_index < w->plan->n_cases ? &w->plan->cases[g.case_index] : NULL;
    int tok = (w->ops->capabilities & TB_CAP_TOKENIZER) != 0;
    for (uint32_t i = 0; i < n; i++) {
        lens[i] = tok && w->ctx ? w->ops->tokenize(w->ctx, prompts[i], NULL, 0) : -1;
        res[i].prompt_tokens = lens[i] > INT32_MAX ? -1 : (int32_t)lens[i];
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
            .max_new_tokens = g.max_new_tokens,
            .batch = k,
            .steps = c->steps,
            .block_length = c->block_length,
            .seed = g.seed,
            .prompt_text = gp,
            .options = c->options,
            .n_options = c->n_options,
        };
        memset(rr, 0, k * sizeof *rr);
        for (uint32_t q = 0; q < k; q++)
            rr[q].n_answer_tokens = TB_UNKNOWN_COUNT;
        tb_result out = {.struct_size = sizeof out, .n_requests = k, .requests = rr, .prefill_ns = -1,
                         .decode_ns = -1, .peak_device_bytes = -1, .energy_mj = -1};
        w->live = tb_xcalloc(k, sizeof *w->live);
        w->live_map = map;
        w->live_n = k;
        tb_status st = w->ops->generate(w->ctx, &req, &out);
        const char *le = st != TB_OK ? w->ops->last_error(w->ctx) : NULL;
        for (uint32_t q = 0; q < k; q++) {
            tb_wire_gen_req *o = &res[map[q]];
            o->status = st != TB_OK ? (int32_t)st : (int32_t)rr[q].status;
            o->n_output_tokens = rr[q].n_output_tokens;
            if (st != TB_OK)
                snprintf(o->error, sizeof o->error, "%s", le && *le ? le : tb_status_name(st));
            else if (rr[q].status != TB_OK)
                tb_strlcpy(o->error, rr[q].error[0] ? rr[q].error : tb_status_name(rr[q].status), sizeof o->error);
            if (st == TB_OK)
                tb_worker_answer_text(w, &rr[q], &texts[map[q]]);
            free(w->live[q].ids);
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
    free(res);
    free(texts);
    free(lens);
    free(taken);
    free(map);
    free(gp);
    free(rr);
}
