/* serve_batch.c — the dispatcher of `tokbench serve` (serve_batch.h):
 * the queue of waiting requests, batches formed from it, and the worker
 * process (worker_client.h) that runs them, its live emissions and final
 * answers handed to s->events (the HTTP side's) as they come. Runs on the
 * main thread; the connection threads only queue and wait. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve_batch.h"

/* ------------------------------------------------------ requests */

void tb_sreq_release(tb_sreq *r)
{
    if (--r->refs > 0)
        return;
    pthread_cond_destroy(&r->cv);
    free(r->prompt);
    for (uint32_t i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    tb_str_free(&r->text);
    tb_str_free(&r->out);
    free(r);
}

void tb_serve_enqueue(tb_server *s, tb_sreq *r)
{
    if (s->tail)
        s->tail->next = r;
    else
        s->head = r;
    s->tail = r;
    pthread_cond_signal(&s->queue_cv);
}

void tb_serve_client_gone(tb_server *s, tb_sreq *r, const char *why)
{
    if (r->gone || r->done)
        return;
    r->gone = 1;
    r->gone_why = why;
    tb_str_free(&r->out); /* nobody will read it */
    r->out_pos = 0;
    pthread_cond_signal(&s->queue_cv);
    pthread_cond_broadcast(&r->cv);
}

/* r ended (under s->mu): out of the running, counted under its outcome
 * (stats), done, its connection woken. */
static void end_req(tb_server *s, tb_sreq *r, uint64_t *outcome)
{
    if (r->running) {
        r->running = 0;
        s->stats.running--;
    }
    (*outcome)++;
    r->done = 1;
    pthread_cond_broadcast(&r->cv);
}

/* r enters the backend (under s->mu). */
static void start_req(tb_server *s, tb_sreq *r)
{
    r->running = 1;
    s->stats.running++;
}

/* Take the requests whose clients are gone out of the queue (they never
 * reached the backend). Under s->mu. */
static void drop_gone_queued(tb_server *s)
{
    tb_sreq **link = &s->head, *last = NULL;
    while (*link) {
        tb_sreq *r = *link;
        if (!r->gone) {
            last = r;
            link = &r->next;
            continue;
        }
        *link = r->next;
        fprintf(stderr, "tokbench serve: %s: %s before it was run; dropped from the queue\n", r->id, r->gone_why);
        end_req(s, r, &s->stats.gone);
        tb_sreq_release(r); /* the queue's reference */
    }
    s->tail = last;
}

void tb_serve_drain(tb_server *s)
{
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    while (s->head) {
        tb_sreq *r = s->head;
        s->head = r->next;
        pthread_cond_broadcast(&r->cv);
        tb_sreq_release(r); /* the dispatcher's reference */
    }
    pthread_mutex_unlock(&s->mu);
}

/* ------------------------------------------------------ the backend side */

int tb_serve_start_worker(tb_server *s, char **why)
{
    tb_wc_result r = tb_wc_start(&s->wc, why);
    if (r == TB_WC_REFUSED) {
        char *e = *why;
        *why = tb_xasprintf("cannot run on this host: %s", e);
        free(e);
        return -1;
    }
    int reused;
    char *info = NULL;
    if (r == TB_WC_OK)
        r = tb_wc_send(&s->wc, TB_MSG_LOAD, &s->case_index, sizeof s->case_index, why);
    if (r == TB_WC_OK)
        r = tb_wc_await_loaded(&s->wc, &reused, &info, why);
    if (r != TB_WC_OK) {
        tb_wc_kill(&s->wc);
        return -1;
    }
    if (info && info[0])
        fprintf(stderr, "tokbench serve: loaded %s\n", info);
    free(info);
    return 0;
}

/* Fail every request of the batch not done yet. */
static void fail_rest(tb_server *s, tb_sreq **batch, uint32_t k, const char *error)
{
    pthread_mutex_lock(&s->mu);
    for (uint32_t i = 0; i < k; i++) {
        tb_sreq *r = batch[i];
        if (r->done)
            continue;
        s->events->failed(s, r, error);
        end_req(s, r, r->gone ? &s->stats.gone : &s->stats.failed);
    }
    pthread_mutex_unlock(&s->mu);
}

/* A TB_MSG_EMIT frame buf[len]: one request's emission, with its text. */
static void on_emit(tb_server *s, tb_sreq **batch, uint32_t k, const char *buf, size_t len)
{
    tb_wire_emit e;
    if (len < sizeof e)
        return;
    memcpy(&e, buf, sizeof e);
    if (e.request >= k || sizeof e + e.text_len > len)
        return;
    tb_sreq *r = batch[e.request];
    if (!r)
        return; /* a slot with no request: nothing to tell */
    pthread_mutex_lock(&s->mu);
    r->n_emits++;
    s->events->emitted(s, r, buf + sizeof e, e.text_len);
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Request r's end as the worker reports it: q, and text[q->text_len]
 * when it went well. Under s->mu; marks r done and wakes it. */
static void answered(tb_server *s, tb_sreq *r, tb_wire_gen_req *q, const char *text)
{
    uint64_t *outcome = r->gone ? &s->stats.gone : &s->stats.failed;
    if (q->status == TB_OK) {
        s->events->finished(s, r, q, text);
        /* The token counters count the requests that ended well (their
         * usage): a client that left got no answer, whatever the backend
         * generated for it (a static batch runs on without it). */
        if (!r->gone) {
            int64_t pt = q->prompt_tokens >= 0 ? q->prompt_tokens : r->prompt_tokens; /* the HTTP side's count */
            s->stats.prompt_tokens += (uint64_t)(pt > 0 ? pt : 0);
            s->stats.generation_tokens += q->completion_tokens;
            outcome = &s->stats.ok;
        }
    } else {
        char msg[200];
        q->error[sizeof q->error - 1] = '\0';
        const char *e = q->error[0] ? q->error : tb_status_name(q->status);
        size_t cl = strspn(e, "abcdefghijklmnopqrstuvwxyz0123456789_");
        /* No class: a request the backend rejects is the client's
         * error (400), anything else the server's (500). */
        int has_class = cl && strncmp(e + cl, ": ", 2) == 0;
        snprintf(msg, sizeof msg, "%s%s",
                 has_class ? "" : q->status == TB_ERR_INVALID || q->status == TB_ERR_UNSUPPORTED ? "http_4xx: "
                                : q->status == TB_ERR_TIMEOUT                                    ? "timeout: "
                                                                                                 : "http_5xx: ",
                 e);
        s->events->failed(s, r, msg);
    }
    end_req(s, r, outcome);
}

/* The TB_MSG_GENERATED frame buf[len]: every request's end. */
static void on_generated(tb_server *s, tb_sreq **batch, uint32_t k, const char *buf, size_t len)
{
    tb_wire_gen_done d;
    if (len < sizeof d) {
        fail_rest(s, batch, k, "http_5xx: malformed answer from the backend process");
        return;
    }
    memcpy(&d, buf, sizeof d);
    const char *p = buf + sizeof d, *end = buf + len;
    pthread_mutex_lock(&s->mu);
    for (uint32_t i = 0; i < d.n_requests && i < k; i++) {
        tb_wire_gen_req q;
        if ((size_t)(end - p) < sizeof q)
            break;
        memcpy(&q, p, sizeof q);
        p += sizeof q;
        if ((size_t)(end - p) < q.text_len)
            break;
        answered(s, batch[i], &q, p);
        p += q.text_len;
    }
    pthread_mutex_unlock(&s->mu);
    fail_rest(s, batch, k, "http_5xx: the backend process did not answer for this request");
}

/* Run one batch on the worker, streaming its emissions. */
static void run_batch(tb_server *s, tb_sreq **batch, uint32_t k)
{
    char *why = NULL;
    if (!tb_wc_running(&s->wc) && tb_serve_start_worker(s, &why) != 0) {
        fprintf(stderr, "tokbench serve: backend unavailable: %s\n", why);
        char *msg = tb_xasprintf("http_5xx: backend unavailable: %s", why);
        fail_rest(s, batch, k, msg);
        free(msg);
        free(why);
        return;
    }
    tb_str b = {0};
    const tb_sreq *h = batch[0]; /* the batch shares its sampling (same_sampling) */
    tb_wire_gen g = {.case_index = s->case_index, .n_requests = k, .max_new_tokens = h->max_tokens,
                     .set = h->set, .temperature = h->temperature, .top_p = h->top_p,
                     .top_k = h->top_k};
    g.seed = h->has_seed ? h->seed : s->plan->suite->seed + s->batches;
    s->batches++;
    tb_str_appendn(&b, (const char *)&g, sizeof g);
    for (uint32_t i = 0; i < k; i++) {
        tb_str_appendn(&b, batch[i]->prompt, strlen(batch[i]->prompt) + 1);
        uint32_t n_stop = batch[i]->n_stop;
        tb_str_appendn(&b, (const char *)&n_stop, sizeof n_stop);
        for (uint32_t j = 0; j < n_stop; j++)
            tb_str_appendn(&b, batch[i]->stop[j], strlen(batch[i]->stop[j]) + 1);
    }
    tb_wc_result r = tb_wc_send(&s->wc, TB_MSG_GENERATE, b.s, b.len, &why);
    tb_str_free(&b);
    int64_t since = tb_now_ns();
    static const uint32_t answers[] = {TB_MSG_EMIT, TB_MSG_GENERATED};
    tb_wire_frame f;
    while (r == TB_WC_OK) {
        r = tb_wc_await(&s->wc, since, answers, 2, &f, &why);
        if (r == TB_WC_OK && f.type == TB_MSG_EMIT) {
            on_emit(s, batch, k, f.payload, f.len);
            continue;
        }
        if (r == TB_WC_OK) {
            on_generated(s, batch, k, f.payload, f.len);
            return;
        }
    }
    if (r == TB_WC_INTERRUPTED) { /* stopping: the batch is not waited for */
        tb_wc_kill(&s->wc);
        fail_rest(s, batch, k, "http_5xx: the server is stopping");
        free(why);
        return;
    }
    fprintf(stderr, "tokbench serve: %s\n", why);
    char *msg = tb_xasprintf("%s: %s", r == TB_WC_TIMEOUT ? "timeout" : "http_5xx", why);
    fail_rest(s, batch, k, msg);
    free(msg);
    free(why);
}

/* Whether b may run in one generate() call with a: the same max_tokens
 * and sampling options (a call has one of each), and no seed of its own
 * on either (a seeded request runs alone, so that its answer does not
 * depend on what it was batched with). */
static int same_sampling(const tb_sreq *a, const tb_sreq *b)
{
    return a->max_tokens == b->max_tokens && !a->has_seed && !b->has_seed && a->set == b->set &&
           (!(a->set & TB_GEN_TEMPERATURE) || a->temperature == b->temperature) &&
           (!(a->set & TB_GEN_TOP_P) || a->top_p == b->top_p) && (!(a->set & TB_GEN_TOP_K) || a->top_k == b->top_k);
}

/* ------------------------------------------------ continuous batching
 *
 * One stepped session on the worker (worker_serve.c): every iteration
 * sends the waiting requests that fit in free slots (FIFO) and takes
 * back the emissions and the requests that ended, whose slots the next
 * iteration refills. Requests share nothing but the session: each keeps
 * its own max_tokens, sampling fields and seed. */

int tb_serve_open_session(tb_server *s, char **why)
{
    if (!tb_wc_running(&s->wc) && tb_serve_start_worker(s, why) != 0)
        return -1;
    tb_wire_step_open o = {.case_index = s->case_index, .max_slots = s->max_batch};
    tb_wc_result r = tb_wc_send(&s->wc, TB_MSG_STEP_OPEN, &o, sizeof o, why);
    static const uint32_t answers[] = {TB_MSG_STEP_OPENED};
    tb_wire_frame f;
    if (r == TB_WC_OK)
        r = tb_wc_await(&s->wc, tb_now_ns(), answers, 1, &f, why);
    if (r != TB_WC_OK) {
        tb_wc_kill(&s->wc);
        return -1;
    }
    tb_wire_status st;
    if (f.len < sizeof st) {
        tb_wc_kill(&s->wc);
        *why = tb_xstrdup("malformed STEP_OPENED answer");
        return -1;
    }
    memcpy(&st, f.payload, sizeof st);
    st.message[sizeof st.message - 1] = '\0';
    if (st.status == TB_ERR_UNSUPPORTED)
        return 0;
    if (st.status != TB_OK) {
        *why = tb_xstrdup(st.message);
        return -1;
    }
    return 1;
}

/* Fail every request in a slot (the session is gone). */
static void fail_slots(tb_server *s, tb_sreq **slots, const char *error)
{
    pthread_mutex_lock(&s->mu);
    for (uint32_t i = 0; i < s->max_batch; i++) {
        tb_sreq *r = slots[i];
        if (!r)
            continue;
        if (!r->done) {
            s->events->failed(s, r, error);
            end_req(s, r, r->gone ? &s->stats.gone : &s->stats.failed);
        }
        tb_sreq_release(r);
        slots[i] = NULL;
    }
    s->stats.slots_used = 0;
    pthread_mutex_unlock(&s->mu);
}

/* What one step brought back, handed to the connections only after the
 * next step was sent, so that the worker computes while the server
 * streams. Each record names its request: a slot may be refilled by
 * then. emits: {tb_sreq *, uint32 n, n bytes of EMIT payload}; ended:
 * {tb_sreq *, tb_wire_gen_req, its text} (the slot's reference). */
typedef struct step_news {
    tb_str emits, ended;
    tb_str left; /* tb_sreq *: requests ended by step_leave (the slot's
                    reference, released after the news is handed over) */
} step_news;

/* stats.slots_used: the slots holding a request. Under s->mu. */
static void count_slots(tb_server *s, tb_sreq *const *slots)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->max_batch; i++)
        n += slots[i] != NULL;
    s->stats.slots_used = n;
}

/* Add the stepped session's join of r in `slot` to the STEP message b. */
static void put_join(tb_server *s, tb_str *b, uint32_t slot, const tb_sreq *r)
{
    tb_wire_join j = {.slot = slot, .max_new_tokens = r->max_tokens, .set = r->set, .temperature = r->temperature,
                      .top_p = r->top_p, .top_k = r->top_k};
    j.seed = r->has_seed ? r->seed : s->plan->suite->seed + s->batches++;
    tb_str_appendn(b, (const char *)&j, sizeof j);
    tb_str_appendn(b, r->prompt, strlen(r->prompt) + 1);
    tb_str_appendn(b, (const char *)&r->n_stop, sizeof r->n_stop);
    for (uint32_t k = 0; k < r->n_stop; k++)
        tb_str_appendn(b, r->stop[k], strlen(r->stop[k]) + 1);
}

/* Compose one STEP into *b (emptied first): the requests whose clients
 * are gone leave their slots (to n->left), then, where joins is set, the
 * oldest waiting requests join the free slots (their queue reference
 * becomes the slot's). */
static void compose_step(tb_server *s, tb_sreq **slots, step_news *n, int joins, tb_str *b)
{
    tb_wire_step h = {0};
    b->len = 0;
    tb_str_appendn(b, (const char *)&h, sizeof h);
    pthread_mutex_lock(&s->mu);
    for (uint32_t i = 0; i < s->max_batch; i++) {
        tb_sreq *r = slots[i];
        if (!r || !r->gone || r->done)
            continue;
        fprintf(stderr, "tokbench serve: %s: %s; its slot is freed after %u emissions (max_tokens %u)\n", r->id,
                r->gone_why, r->n_emits, r->max_tokens);
        end_req(s, r, &s->stats.gone);
        tb_str_appendn(b, (const char *)&i, sizeof i);
        h.n_leaves++;
        tb_str_appendn(&n->left, (const char *)&r, sizeof r);
        slots[i] = NULL;
    }
    drop_gone_queued(s);
    for (uint32_t i = 0; joins && i < s->max_batch && s->head; i++) {
        if (slots[i])
            continue;
        tb_sreq *r = s->head;
        s->head = r->next;
        r->next = NULL;
        slots[i] = r;
        put_join(s, b, i, r);
        start_req(s, r);
        h.n_joins++;
    }
    if (!s->head)
        s->tail = NULL;
    count_slots(s, slots);
    pthread_mutex_unlock(&s->mu);
    memcpy(b->s, &h, sizeof h);
}

static void stash_emit(step_news *n, tb_sreq **slots, uint32_t n_slots, const char *buf, size_t len)
{
    tb_wire_emit e;
    if (len < sizeof e || len > UINT32_MAX)
        return;
    memcpy(&e, buf, sizeof e);
    tb_sreq *r = e.request < n_slots ? slots[e.request] : NULL;
    if (!r || sizeof e + e.text_len > len)
        return;
    uint32_t n32 = (uint32_t)len;
    tb_str_appendn(&n->emits, (const char *)&r, sizeof r);
    tb_str_appendn(&n->emits, (const char *)&n32, sizeof n32);
    tb_str_appendn(&n->emits, buf, len);
}

/* The STEPPED frame buf[len]: the requests that ended leave their slots
 * for n->ended; *carried: the requests the step carried (those still in
 * the session after it and those that ended in it). Returns the step's
 * status (not OK: the worker closed the session). */
static int32_t stash_stepped(tb_server *s, step_news *n, tb_sreq **slots, const char *buf, size_t len,
                             uint32_t *carried)
{
    tb_wire_stepped d;
    *carried = 0;
    if (len < sizeof d)
        return TB_ERR;
    memcpy(&d, buf, sizeof d);
    /* at most the slots: the counts come from the worker */
    uint64_t in_step = (uint64_t)d.n_active + d.n_ended;
    *carried = in_step < s->max_batch ? (uint32_t)in_step : s->max_batch;
    const char *p = buf + sizeof d, *end = buf + len;
    for (uint32_t i = 0; i < d.n_ended; i++) {
        uint32_t slot;
        tb_wire_gen_req q;
        if ((size_t)(end - p) < sizeof slot + sizeof q)
            break;
        memcpy(&slot, p, sizeof slot);
        memcpy(&q, p + sizeof slot, sizeof q);
        p += sizeof slot + sizeof q;
        if ((size_t)(end - p) < q.text_len)
            break;
        tb_sreq *r = slot < s->max_batch ? slots[slot] : NULL;
        if (r) {
            tb_str_appendn(&n->ended, (const char *)&r, sizeof r);
            tb_str_appendn(&n->ended, (const char *)&q, sizeof q);
            tb_str_appendn(&n->ended, p, q.text_len);
            slots[slot] = NULL;
        }
        p += q.text_len;
    }
    d.message[sizeof d.message - 1] = '\0';
    if (d.status != TB_OK)
        fprintf(stderr, "tokbench serve: %s\n", d.message);
    return d.status;
}

/* Hand the stashed news to the connections: emissions, then ends. */
static void deliver(tb_server *s, step_news *n)
{
    pthread_mutex_lock(&s->mu);
    for (size_t at = 0; at < n->emits.len;) {
        tb_sreq *r;
        uint32_t len;
        tb_wire_emit e;
        memcpy(&r, n->emits.s + at, sizeof r);
        memcpy(&len, n->emits.s + at + sizeof r, sizeof len);
        const char *payload = n->emits.s + at + sizeof r + sizeof len;
        memcpy(&e, payload, sizeof e);
        r->n_emits++;
        s->events->emitted(s, r, payload + sizeof e, e.text_len);
        pthread_cond_broadcast(&r->cv);
        at += sizeof r + sizeof len + len;
    }
    for (size_t at = 0; at < n->ended.len;) {
        tb_sreq *r;
        tb_wire_gen_req q;
        memcpy(&r, n->ended.s + at, sizeof r);
        memcpy(&q, n->ended.s + at + sizeof r, sizeof q);
        answered(s, r, &q, n->ended.s + at + sizeof r + sizeof q);
        tb_sreq_release(r);
        at += sizeof r + sizeof q + q.text_len;
    }
    for (size_t at = 0; at < n->left.len; at += sizeof(tb_sreq *)) {
        tb_sreq *r;
        memcpy(&r, n->left.s + at, sizeof r);
        tb_sreq_release(r);
    }
    pthread_mutex_unlock(&s->mu);
    n->emits.len = n->ended.len = n->left.len = 0;
}

/* Wait until a request waits or the server stops; 0 when stopping. */
static int wait_for_work(tb_server *s)
{
    for (drop_gone_queued(s); !s->head && !*s->stop; drop_gone_queued(s)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200000000L; /* look at the stop flag this often */
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->queue_cv, &s->mu, &ts);
    }
    return !*s->stop;
}

/* Fail every waiting request (the session could not be opened). */
static void fail_queue(tb_server *s, const char *error)
{
    pthread_mutex_lock(&s->mu);
    while (s->head) {
        tb_sreq *r = s->head;
        s->head = r->next;
        s->events->failed(s, r, error);
        end_req(s, r, r->gone ? &s->stats.gone : &s->stats.failed);
        tb_sreq_release(r);
    }
    s->tail = NULL;
    pthread_mutex_unlock(&s->mu);
}

/* Whether the session has work: a request in a slot or in the queue. */
static int has_work(tb_server *s, tb_sreq *const *slots)
{
    int more = 0;
    for (uint32_t i = 0; i < s->max_batch; i++)
        more |= slots[i] != NULL;
    pthread_mutex_lock(&s->mu);
    more |= s->head != NULL;
    pthread_mutex_unlock(&s->mu);
    return more && !*s->stop;
}

/* Whether a request waits for a slot. */
static int queued(tb_server *s)
{
    pthread_mutex_lock(&s->mu);
    int q = s->head != NULL;
    pthread_mutex_unlock(&s->mu);
    return q;
}

/* Read the answer of the oldest STEP in flight: its emissions (stashed,
 * unless discard) and its STEPPED. *status: the step's (not OK: the
 * worker closed the session); *carried: the requests it carried (0 when
 * discarded). */
static tb_wc_result await_stepped(tb_server *s, tb_sreq **slots, step_news *news, int discard, int32_t *status,
                                  uint32_t *carried, char **why)
{
    static const uint32_t answers[] = {TB_MSG_EMIT, TB_MSG_STEPPED};
    int64_t since = tb_now_ns();
    for (;;) {
        tb_wire_frame f;
        tb_wc_result r = tb_wc_await(&s->wc, since, answers, 2, &f, why);
        if (r != TB_WC_OK)
            return r;
        if (f.type == TB_MSG_EMIT) {
            if (!discard)
                stash_emit(news, slots, s->max_batch, f.payload, f.len);
            continue;
        }
        *carried = 0;
        if (!discard) {
            *status = stash_stepped(s, news, slots, f.payload, f.len, carried);
        } else { /* the session had ended: its requests failed already */
            tb_wire_stepped d;
            *status = f.len >= sizeof d ? (memcpy(&d, f.payload, sizeof d), d.status) : TB_ERR;
        }
        return TB_WC_OK;
    }
}

/* A STEP sent while another is in flight is at most this long: the one
 * before it, which the worker reads whole before it writes its answer,
 * has left the pipe by the time the worker can block writing, and a
 * pipe holds at least a page (4 KiB), so this write never blocks while
 * the worker blocks writing to us (neither would read again). */
#define SECOND_STEP_MAX 2048

/* Send what may go now: a held STEP once no step is in flight, then
 * STEPs while there is work, up to two in flight: a first that joins
 * waiting requests, a second, while none waits, that only leaves slots
 * (held for later when it is over SECOND_STEP_MAX). sent_ns[]: their
 * send times, after those of the steps in flight. */
static tb_wc_result send_steps(tb_server *s, tb_sreq **slots, step_news *news, tb_str *msg, tb_str *held,
                               int64_t *sent_ns, int *in_flight, char **why)
{
    if (!*in_flight && held->len) {
        tb_wc_result r = tb_wc_send(&s->wc, TB_MSG_STEP, held->s, held->len, why);
        held->len = 0;
        if (r != TB_WC_OK)
            return r;
        sent_ns[(*in_flight)++] = tb_now_ns();
    }
    while (*in_flight < 2 && !held->len && has_work(s, slots)) {
        int second = *in_flight == 1;
        if (second && queued(s))
            break; /* a request waits: it joins once the step in flight answers */
        compose_step(s, slots, news, !second, msg);
        if (second && msg->len > SECOND_STEP_MAX) {
            tb_str_appendn(held, msg->s, msg->len); /* many leaves at once */
            break;
        }
        tb_wc_result r = tb_wc_send(&s->wc, TB_MSG_STEP, msg->s, msg->len, why);
        if (r != TB_WC_OK)
            return r;
        sent_ns[(*in_flight)++] = tb_now_ns();
    }
    return TB_WC_OK;
}

/* The continuous dispatcher. Returns 0 when it served until the stop, 1
 * when the backend has no step ops (the static dispatcher takes over).
 *
 * While no request waits for a slot, a second STEP goes out behind the
 * one the worker is running, so the worker finds it waiting when it
 * answers the last and never idles through the round trip to the server
 * (what made continuous batching at concurrency 1 slower than static,
 * docs/PERFORMANCE.md). That second STEP only leaves slots (clients
 * gone), it never joins: joins are composed with no step in flight,
 * knowing every slot that ended. So a request that waits turns the
 * dispatcher back to one STEP at a time until it has joined (a slot
 * that ends is refilled by the very next STEP), and it joins at most one
 * step later than with one STEP in flight. */
static int dispatch_continuous(tb_server *s)
{
    tb_sreq **slots = tb_xcalloc(s->max_batch, sizeof *slots);
    step_news news = {0};
    tb_str msg = {0}, held = {0}; /* a STEP being sent; one held for no step in flight */
    int open = s->session_open, fallback = 0, in_flight = 0;
    int64_t sent_ns[2] = {0, 0}; /* when the steps in flight were sent, oldest first */
    int64_t last_done_ns = 0;    /* when the last STEPPED arrived */
    s->session_open = 0;
    pthread_mutex_lock(&s->mu);
    s->stats.slots = s->max_batch;
    pthread_mutex_unlock(&s->mu);
    for (;;) {
        char *why = NULL;
        tb_wc_result r = TB_WC_OK;
        if (!in_flight && !held.len) { /* nothing runs: wait for a request */
            pthread_mutex_lock(&s->mu);
            int go = wait_for_work(s);
            pthread_mutex_unlock(&s->mu);
            if (!go)
                break;
            if (!open) {
                int o = tb_serve_open_session(s, &why);
                if (o == 0) {
                    fallback = 1;
                    break;
                }
                if (o < 0) { /* the waiting requests fail; the next ones retry */
                    fprintf(stderr, "tokbench serve: backend unavailable: %s\n", why);
                    char *msg_text = tb_xasprintf("http_5xx: backend unavailable: %s", why);
                    fail_queue(s, msg_text);
                    free(msg_text);
                    free(why);
                    continue;
                }
                open = 1;
            }
        }
        r = send_steps(s, slots, &news, &msg, &held, sent_ns, &in_flight, &why);
        /* the oldest step's emissions and answer */
        int32_t status = TB_OK;
        uint32_t carried = 0;
        if (r == TB_WC_OK && in_flight) {
            r = await_stepped(s, slots, &news, 0, &status, &carried, &why);
            if (r == TB_WC_OK) {
                /* its own time, as the server sees it: from when the worker
                 * could start it (sent, and the step before it answered) to
                 * its answer */
                int64_t now = tb_now_ns(), began = sent_ns[0] > last_done_ns ? sent_ns[0] : last_done_ns;
                last_done_ns = now;
                pthread_mutex_lock(&s->mu);
                tb_serve_stats_step(&s->stats, (double)(now - began) / 1e9, carried);
                count_slots(s, slots);
                pthread_mutex_unlock(&s->mu);
                sent_ns[0] = sent_ns[1];
                in_flight--;
            }
        }
        /* the next step goes out before the news is handed over */
        if (r == TB_WC_OK && status == TB_OK)
            r = send_steps(s, slots, &news, &msg, &held, sent_ns, &in_flight, &why);
        deliver(s, &news);
        if (r == TB_WC_OK && status == TB_OK)
            continue;
        /* the session is over: its requests fail, the next ones reopen. A
         * STEP still in flight (it only leaves slots) is answered, as a
         * malformed STEP when the worker closed the session, and read past */
        while (r == TB_WC_OK && in_flight) {
            int32_t ignored;
            uint32_t none;
            r = await_stepped(s, slots, &news, 1, &ignored, &none, &why);
            in_flight--;
        }
        held.len = 0; /* its leavers were in news.left, released by deliver */
        const char *what = r == TB_WC_INTERRUPTED ? "the server is stopping"
                           : r == TB_WC_OK        ? "the backend's step failed"
                                                  : why;
        char *msg_text = tb_xasprintf("%s: %s", r == TB_WC_TIMEOUT ? "timeout" : "http_5xx", what);
        if (r != TB_WC_OK && r != TB_WC_INTERRUPTED)
            fprintf(stderr, "tokbench serve: %s\n", why);
        if (r != TB_WC_OK)
            tb_wc_kill(&s->wc);
        fail_slots(s, slots, msg_text);
        free(msg_text);
        free(why);
        in_flight = 0;
        last_done_ns = 0;
        open = 0;
    }
    if (!fallback)
        fail_slots(s, slots, "http_5xx: the server is stopping");
    tb_str_free(&news.emits);
    tb_str_free(&news.ended);
    tb_str_free(&news.left);
    tb_str_free(&msg);
    tb_str_free(&held);
    free(slots);
    return fallback;
}

void tb_serve_dispatch(tb_server *s)
{
    if (s->continuous) {
        if (dispatch_continuous(s) == 0)
            return;
        fprintf(stderr, "tokbench serve: plugin %s has no step ops: static batches\n", s->ops->name);
        s->continuous = 0;
        pthread_mutex_lock(&s->mu);
        s->stats.slots = 0;
        pthread_mutex_unlock(&s->mu);
    }
    tb_sreq **batch = tb_xcalloc(s->max_batch, sizeof *batch);
    for (;;) {
        pthread_mutex_lock(&s->mu);
        if (!wait_for_work(s)) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        /* FIFO, those that can share the head's generate() call. */
        uint32_t k = 0;
        tb_sreq *head = s->head;
        tb_sreq **link = &s->head, *last = NULL;
        while (*link && k < s->max_batch) {
            tb_sreq *r = *link;
            if (r == head || same_sampling(head, r)) {
                *link = r->next;
                r->next = NULL;
                start_req(s, r);
                batch[k++] = r;
            } else {
                last = r;
                link = &r->next;
            }
        }
        s->tail = last;
        for (tb_sreq *r = s->head; r; r = r->next)
            s->tail = r;
        pthread_mutex_unlock(&s->mu);

        run_batch(s, batch, k);
        pthread_mutex_lock(&s->mu);
        for (uint32_t i = 0; i < k; i++)
            tb_sreq_release(batch[i]);
        pthread_mutex_unlock(&s->mu);
    }
    free(batch);
}
