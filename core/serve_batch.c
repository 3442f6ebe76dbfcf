/* serve_batch.c — the dispatcher of `tokbench serve` (serve_internal.h):
 * the queue of waiting requests, batches formed from it, and the worker
 * process (worker_client.h) that runs them, its live emissions and final
 * answers handed to serve_http.c's tb_sreq_* as they come. Runs on the
 * main thread; the connection threads only queue and wait. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve_internal.h"

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
        tb_sreq_failed(s, r, error);
        r->done = 1;
        pthread_cond_broadcast(&r->cv);
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
    pthread_mutex_lock(&s->mu);
    tb_sreq_emitted(s, r, buf + sizeof e, e.text_len);
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&s->mu);
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
        tb_sreq *r = batch[i];
        if (q.status == TB_OK) {
            tb_sreq_finished(s, r, &q, p);
        } else {
            char msg[200];
            q.error[sizeof q.error - 1] = '\0';
            const char *e = q.error[0] ? q.error : tb_status_name(q.status);
            size_t cl = strspn(e, "abcdefghijklmnopqrstuvwxyz0123456789_");
            /* No class: a request the backend rejects is the client's
             * error (400), anything else the server's (500). */
            int has_class = cl && strncmp(e + cl, ": ", 2) == 0;
            snprintf(msg, sizeof msg, "%s%s",
                     has_class ? "" : q.status == TB_ERR_INVALID || q.status == TB_ERR_UNSUPPORTED ? "http_4xx: "
                                    : q.status == TB_ERR_TIMEOUT                                   ? "timeout: "
                                                                                                   : "http_5xx: ",
                     e);
            tb_sreq_failed(s, r, msg);
        }
        p += q.text_len;
        r->done = 1;
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&s->mu);
    fail_rest(s, batch, k, "http_5xx: the backend process did not answer for this request");
}

/* Run one batch on the worker, streaming its emissions. */
static void run_batch(tb_server *s, tb_sreq **batch, uint32_t k)
{
    char *why = NULL;
    if (!tb_wc_running(&s->wc) && tb_serve_start_worker(s, &why) != 0) {
        char *msg = tb_xasprintf("http_5xx: backend unavailable: %s", why);
        fprintf(stderr, "tokbench serve: %s\n", msg + 11);
        fail_rest(s, batch, k, msg);
        free(msg);
        free(why);
        return;
    }
    tb_str b = {0};
    const tb_sreq *h = batch[0]; /* the batch shares its sampling (same_sampling) */
    tb_wire_gen g = {.case_index = s->case_index, .n_requests = k, .max_new_tokens = h->max_tokens,
                     .set = h->set, .temperature = h->temperature, .top_p = h->top_p};
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
           (!(a->set & TB_GEN_TOP_P) || a->top_p == b->top_p);
}

void tb_serve_dispatch(tb_server *s)
{
    tb_sreq **batch = tb_xcalloc(s->max_batch, sizeof *batch);
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->head && !*s->stop) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 200000000L; /* look at the stop flag this often */
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&s->queue_cv, &s->mu, &ts);
        }
        if (*s->stop) {
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
