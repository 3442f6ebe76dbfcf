/* spec.c — see spec.h. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spec.h"

void ar_emit_token(const tb_host *h, uint32_t r, const int32_t *id, int64_t now)
{
    if (TB_STRUCT_HAS(h, tb_host, emit_output) && h->emit_output)
        h->emit_output(h, r, 1, now, id, NULL, 0);
    else
        h->emit(h, r, 1, now);
}

int32_t ar_spec_draw(const float *p, int V, uint64_t *rng)
{
    double mass = 0;
    for (int v = 0; v < V; v++)
        mass += p[v];
    double u = tb_rng_uniform(rng) * mass, acc = 0;
    int32_t last = 0;
    for (int v = 0; v < V; v++) {
        if (p[v] <= 0)
            continue;
        acc += p[v];
        last = v;
        if (u < acc)
            return v;
    }
    return last; /* u at the very top of the mass (rounding) */
}

int ar_spec_accept_greedy(const int32_t *d, const int32_t *t, int k, int forced, int32_t *bonus)
{
    int a = 0;
    if (forced > 0)
        a = forced < k ? forced : k;
    else
        while (a < k && d[a] == t[a])
            a++;
    *bonus = t[a];
    return a;
}

int ar_spec_accept_sampled(const int32_t *d, const float *p, const float *q, int k, int V, int forced,
                           uint64_t *rng, float *resid, int32_t *bonus)
{
    if (forced > 0) {
        int a = forced < k ? forced : k;
        *bonus = ar_spec_draw(p + (size_t)a * V, V, rng);
        return a;
    }
    for (int i = 0; i < k; i++) {
        const float *pi = p + (size_t)i * V, *qi = q + (size_t)i * V;
        int32_t x = d[i];
        /* accepted with probability min(1, p / q): u < p / q, u in [0, 1) */
        if (tb_rng_uniform(rng) * qi[x] < pi[x])
            continue;
        double mass = 0;
        for (int v = 0; v < V; v++) {
            resid[v] = pi[v] > qi[v] ? pi[v] - qi[v] : 0;
            mass += resid[v];
        }
        /* p <= q everywhere only where p == q up to rounding, which
         * accepts (almost) always; then p itself */
        *bonus = ar_spec_draw(mass > 0 ? resid : pi, V, rng);
        return i;
    }
    *bonus = ar_spec_draw(p + (size_t)k * V, V, rng);
    return k;
}

/* The call's host-side state. */
typedef struct spec_state {
    const ar_spec_call *c;
    size_t stride;         /* positions of a seq row: P + N */
    int32_t *seq;          /* [R][stride] request r's verified tokens: prompt, output */
    int *n;                /* [R] how many */
    uint32_t *n_out;       /* [R] outputs */
    int *done;             /* [R] 0 running, 1 finished */
    int *past_eos;         /* [R] produced EOS under ignore_eos */
} spec_state;

/* Request r's next output token t, emitted at `now`; the request ends at
 * its limit or at an EOS it does not ignore. 1 when it has ended. */
static int push(spec_state *s, uint32_t r, int32_t t, int64_t now)
{
    const ar_spec_call *c = s->c;
    const tb_model_config *cfg = &c->ld->model.cfg;
    int eos = tb_is_eos(cfg, t);
    int32_t *slot_out = c->out + (size_t)r * c->N;
    slot_out[s->n_out[r]++] = t;
    s->seq[(size_t)r * s->stride + s->n[r]++] = t;
    /* the answer's tokens with their ids; its EOS and after: counted only */
    ar_emit_token(c->host, r, s->past_eos[r] || eos ? NULL : &slot_out[s->n_out[r] - 1], now);
    if (eos)
        s->past_eos[r] = 1;
    if (s->n_out[r] >= c->N || (eos && !c->ignore_eos))
        s->done[r] = 1;
    return s->done[r];
}

tb_status ar_spec_generate(const ar_spec_call *c, tb_result *res, char *err, size_t err_size)
{
    const tb_host *host = c->host;
    const tb_model_config *cfg = &c->ld->model.cfg;
    const tb_engine_iface *e = c->eng->iface;
    void *ec = c->eng->ctx;
    const ar_drafter_ops *dops = c->drafter->ops;
    void *dc = c->drafter->ctx;
    const uint32_t R = c->R, N = c->N;
    const int k = c->k, w = k + 1, V = cfg->vocab_size, sampled = c->smp.temperature > 0;
    const size_t P = c->P, len = P + N + (size_t)w; /* a verification writes k + 1 past the last verified */
    err[0] = '\0';
    if (!e->verify_slots || !e->truncate_slot) {
        snprintf(err, err_size, "speculative decoding: this engine has no verify_slots/truncate_slot");
        return TB_ERR_UNSUPPORTED;
    }

    tb_loaded_memory_start(c->ld); /* the call's peak includes what it reserves */
    dops->memory_start(dc);
    size_t rows = R * P > (size_t)R * w ? R * P : (size_t)R * w;
    if (e->reserve(ec, (int)R, (int)len, (int)rows, err, err_size) != 0)
        return tb_status_of(err, TB_ERR);
    if (c->threads > 0) {
        e->set_threads(ec, c->threads);
        dops->set_threads(dc, c->threads);
    }
    if (e->set_padding(ec, NULL, 0) != 0) {
        snprintf(err, err_size, "%s", e->error(ec));
        return TB_ERR;
    }
    if (dops->reserve(dc, (int)R, (int)len, (int)P, k) != 0) {
        snprintf(err, err_size, "%s", dops->error(dc));
        return tb_status_of(err, TB_ERR);
    }
    dops->reset(dc);

    spec_state s = {.c = c, .stride = P + N};
    s.seq = malloc((size_t)R * s.stride * sizeof *s.seq);
    s.n = calloc(R, sizeof *s.n);
    s.n_out = calloc(R, sizeof *s.n_out);
    s.done = calloc(R, sizeof *s.done);
    s.past_eos = calloc(R, sizeof *s.past_eos);
    uint64_t *rng = malloc(R * sizeof *rng), *brng = malloc(R * sizeof *brng); /* brng: the round's, by slot order */
    int *slots = malloc(R * sizeof *slots), *ns = malloc(R * sizeof *ns);
    const int32_t **seqs = malloc(R * sizeof *seqs);
    int32_t *draft = malloc((size_t)R * k * sizeof *draft);
    int32_t *tokens = malloc((size_t)R * (w > (int)P ? (size_t)w : P) * sizeof *tokens);
    int32_t *targ = malloc((size_t)R * w * sizeof *targ);
    tb_spec_counts *counts = calloc(R, sizeof *counts);
    float *logits = NULL, *q = NULL, *p = NULL, *resid = NULL, *scratch = NULL;
    if (sampled) {
        logits = malloc((size_t)R * w * V * sizeof *logits); /* verification rows [R][w][V]; prefill's [R][V] */
        q = malloc((size_t)R * k * V * sizeof *q);
        p = malloc((size_t)w * V * sizeof *p);
        resid = malloc((size_t)V * sizeof *resid);
        scratch = malloc(2 * (size_t)V * sizeof *scratch);
    }
    tb_status rc = TB_OK;
    if (!s.seq || !s.n || !s.n_out || !s.done || !s.past_eos || !rng || !brng || !slots || !ns || !seqs || !draft ||
        !tokens || !targ || !counts || (sampled && (!logits || !q || !p || !resid || !scratch))) {
        snprintf(err, err_size, "out of memory for a speculative batch of %u x %zu positions", R, len);
        rc = TB_ERR_NO_MEMORY;
        goto out;
    }
    for (uint32_t r = 0; r < R; r++) {
        s.n[r] = (int)(P - (size_t)c->pad[r]);
        memcpy(s.seq + (size_t)r * s.stride, c->prompt + (size_t)r * P + c->pad[r], (size_t)s.n[r] * sizeof(int32_t));
        /* one stream a request: its draws do not depend on the others' */
        rng[r] = (c->seed ^ 0xA0761D6478BD642FULL) + 0x9E3779B97F4A7C15ULL * r;
    }

    int64_t t0 = host->now_ns(host), t_prefill_end = 0, forwards = 0, draft_ns = 0;
    tb_energy_mark e0 = tb_loaded_energy_mark(c->ld, t0);
    e->work_start(ec);
    double dflops, dbytes;
    dops->take_work(dc, &dflops, &dbytes); /* forgets the drafter's earlier work */

    /* Prefill: each request into its slot, those of one length in one
     * forward (prefill_slots takes one length); the first tokens. */
    {
        int *taken = calloc(R, sizeof *taken);
        if (!taken) {
            snprintf(err, err_size, "out of memory");
            rc = TB_ERR_NO_MEMORY;
            goto out;
        }
        for (uint32_t i = 0; i < R && rc == TB_OK; i++) {
            if (taken[i])
                continue;
            int L = s.n[i], B = 0;
            for (uint32_t j = i; j < R; j++)
                if (!taken[j] && s.n[j] == L) {
                    taken[j] = 1;
                    slots[B] = (int)j;
                    memcpy(tokens + (size_t)B * L, s.seq + (size_t)j * s.stride, (size_t)L * sizeof(int32_t));
                    B++;
                }
            if (e->prefill_slots(ec, tokens, slots, B, L, targ, logits) != 0) {
                snprintf(err, err_size, "%s", e->error(ec));
                rc = tb_status_of(err, TB_ERR);
                break;
            }
            forwards++;
            /* the drafter reads this prefill's capture before the next one */
            if (dops->prefilled && dops->prefilled(dc, slots, B, L) != 0) {
                snprintf(err, err_size, "%s", dops->error(dc));
                rc = tb_status_of(err, TB_ERR);
                break;
            }
            for (int b = 0; b < B; b++) {
                uint32_t r = (uint32_t)slots[b];
                ns[r] = sampled ? tb_sample(logits + (size_t)b * V, V, &c->smp, &rng[r], scratch)
                                : targ[b];
            }
        }
        free(taken);
        if (rc != TB_OK)
            goto out;
        t_prefill_end = host->now_ns(host);
        for (uint32_t r = 0; r < R; r++)
            push(&s, r, ns[r], t_prefill_end);
    }

    /* Rounds: draft, verify, accept, roll back. */
    for (uint32_t round = 0;; round++) {
        int B = 0;
        for (uint32_t r = 0; r < R; r++)
            if (!s.done[r]) {
                slots[B] = (int)r;
                seqs[B] = s.seq + (size_t)r * s.stride;
                ns[B] = s.n[r];
                B++;
            }
        if (B == 0)
            break;
        if (round > 0 && host->cancelled(host)) {
            snprintf(err, err_size, "cancelled after %u verifications", round);
            rc = TB_ERR_CANCELLED;
            break;
        }
        /* the drafter's rng of slot b is rng[slots[b]]: gathered, then back */
        for (int b = 0; b < B; b++)
            brng[b] = rng[slots[b]];
        int64_t td = host->now_ns(host);
        int derr = dops->propose(dc, slots, B, seqs, ns, k, &c->smp, brng, draft, q);
        draft_ns += host->now_ns(host) - td;
        for (int b = 0; b < B; b++)
            rng[slots[b]] = brng[b];
        if (derr) {
            snprintf(err, err_size, "%s", dops->error(dc));
            rc = tb_status_of(err, TB_ERR);
            break;
        }
        for (int b = 0; b < B; b++) {
            tokens[(size_t)b * w] = seqs[b][ns[b] - 1];
            memcpy(tokens + (size_t)b * w + 1, draft + (size_t)b * k, (size_t)k * sizeof(int32_t));
        }
        if (e->verify_slots(ec, tokens, slots, B, w, sampled ? NULL : targ, logits) != 0) {
            snprintf(err, err_size, "%s", e->error(ec));
            rc = tb_status_of(err, TB_ERR);
            break;
        }
        forwards++;
        int64_t now = host->now_ns(host);
        for (int b = 0; b < B; b++) {
            uint32_t r = (uint32_t)slots[b];
            const int32_t *db = draft + (size_t)b * k;
            int32_t bonus;
            int a;
            if (sampled) {
                for (int j = 0; j < w; j++)
                    tb_sample_dist(logits + ((size_t)b * w + j) * V, V, &c->smp, p + (size_t)j * V, scratch);
                a = ar_spec_accept_sampled(db, p, q + (size_t)b * k * V, k, V, c->forced, &rng[r], resid, &bonus);
            } else {
                a = ar_spec_accept_greedy(db, targ + (size_t)b * w, k, c->forced, &bonus);
            }
            tb_spec_counts *sc = &counts[r];
            sc->verifications++;
            sc->drafted += (uint32_t)k;
            sc->accepted += (uint32_t)a;
            if ((uint32_t)k > sc->draft_len)
                sc->draft_len = (uint32_t)k;
            for (int i = 0; i < k; i++)
                sc->drafted_at[i]++;
            for (int i = 0; i < a; i++)
                sc->accepted_at[i]++;
            /* the cache keeps [last verified, d_1 .. d_a]; the bonus is fed next round */
            if (e->truncate_slot(ec, (int)r, s.n[r] + a) != 0) {
                snprintf(err, err_size, "%s", e->error(ec));
                rc = tb_status_of(err, TB_ERR);
                break;
            }
            int ended = 0;
            for (int i = 0; i < a && !ended; i++)
                ended = push(&s, r, db[i], now);
            if (!ended)
                push(&s, r, bonus, now);
            ns[b] = s.n[r];
        }
        if (rc != TB_OK)
            break;
        td = host->now_ns(host);
        derr = dops->commit(dc, slots, B, ns);
        draft_ns += host->now_ns(host) - td;
        if (derr) {
            snprintf(err, err_size, "%s", dops->error(dc));
            rc = tb_status_of(err, TB_ERR);
            break;
        }
    }
    int64_t t_end = host->now_ns(host);
    res->prefill_ns = t_prefill_end ? t_prefill_end - t0 : -1;
    res->decode_ns = t_prefill_end ? t_end - t_prefill_end : -1;
    res->forward_passes = forwards;
    int64_t peak = tb_loaded_memory_peak(c->ld), dpeak = dops->memory_peak(dc);
    res->peak_device_bytes = peak >= 0 && dpeak > 0 ? peak + dpeak : peak; /* -1 on the CPU */
    res->energy_mj = tb_loaded_energy_mj(c->ld, e0, t_end);
    e->work_report(ec, res);
    /* the roofline counts the drafter's forwards beside the target's */
    dops->take_work(dc, &dflops, &dbytes);
    if (TB_STRUCT_HAS(res, tb_result, peak_bytes_per_s) && res->bytes > 0) {
        res->flops += dflops;
        res->bytes += dbytes;
    }
    if (TB_STRUCT_HAS(res, tb_result, draft_ns))
        res->draft_ns = draft_ns;
out:
    for (uint32_t r = 0; r < R; r++) {
        tb_request_result *qr = &res->requests[r];
        uint32_t no = s.n_out ? s.n_out[r] : 0;
        qr->n_output_tokens = no;
        qr->output_ids = c->out + (size_t)r * N;
        qr->n_output_ids = no;
        qr->n_answer_tokens = tb_answer_length(cfg, qr->output_ids, no);
        qr->status = rc;
        if (counts && TB_STRUCT_HAS(res, tb_result, spec) && res->spec)
            res->spec[r] = counts[r];
    }
    free(s.seq);
    free(s.n);
    free(s.n_out);
    free(s.done);
    free(s.past_eos);
    free(rng);
    free(brng);
    free(slots);
    free(ns);
    free(seqs);
    free(draft);
    free(tokens);
    free(targ);
    free(counts);
    free(logits);
    free(q);
    free(p);
    free(resid);
    free(scratch);
    return rc;
}
