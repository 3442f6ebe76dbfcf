/* worker_state.c — see worker_state.h: a plugin's output ids decoded into
 * the text a reader sees, for a case's graded answers (worker.c) and a
 * served request's stream and answer (worker_serve.c) alike. */
#include "worker_state.h"

int64_t tb_worker_decode_ids(tb_worker *w, const int32_t *ids, size_t n)
{
    if (TB_STRUCT_HAS(w->ops, tb_backend_ops, is_special) && w->ops->is_special) {
        if (n > w->kept_cap) {
            w->kept_cap = n + 256;
            w->kept = tb_xrealloc(w->kept, w->kept_cap * sizeof *w->kept);
        }
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (!w->ops->is_special(w->ctx, ids[i]))
                w->kept[k++] = ids[i];
        ids = w->kept;
        n = k;
    }
    int64_t need = w->ops->detokenize(w->ctx, ids, n, NULL, 0);
    if (need < 0)
        return -1;
    if ((size_t)need + 1 > w->scratch_cap) {
        w->scratch_cap = (size_t)need + 1 + 4096;
        w->scratch = tb_xrealloc(w->scratch, w->scratch_cap);
    }
    if (w->ops->detokenize(w->ctx, ids, n, w->scratch, w->scratch_cap) != need)
        return -1;
    return need;
}

void tb_worker_answer_text(tb_worker *w, const tb_request_result *r, tb_str *out)
{
    if (r->status != TB_OK)
        return;
    if (r->output_text) {
        tb_str_append(out, r->output_text);
        return;
    }
    if (!r->output_ids || !(w->ops->capabilities & TB_CAP_TOKENIZER))
        return;
    size_t n = r->n_output_ids;
    if (r->n_answer_tokens != TB_UNKNOWN_COUNT && r->n_answer_tokens < n)
        n = r->n_answer_tokens;
    int64_t k = n ? tb_worker_decode_ids(w, r->output_ids, n) : 0;
    if (k > 0)
        tb_str_appendn(out, w->scratch, (size_t)k);
}
