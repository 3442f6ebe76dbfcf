/* test_rsession.c — reports/rsession.c reads back what the store wrote:
 * the per-case figures docs/METRICS.md defines in SQL there (energy per
 * token, peak device memory, request counts behind the warnings, the
 * output-length check's failures by check and side), with warm-ups
 * excluded. */
#define _POSIX_C_SOURCE 200809L
#include "rsession.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "hwinfo.h"
#include "metrics.h"
#include "plan.h"
#include "store.h"

static tb_suite suite = {.path = "/suites/u.ini", .name = "u", .warmup = 1, .repeat = 2, .seed = 1,
                         .text = "[suite]\n"};
static tb_suite_backend sb = {.label = "nullb", .plugin = "null", .model = "preset:none"};

/* A sample of two requests of 3 tokens (request 1 failed when `fail`). */
static void sample(tb_sample_record *s, tb_request_record rq[2], int warmup, int64_t energy_mj, int64_t dev_bytes,
                   int fail)
{
    const int64_t em[] = {3000, 4000, 6000};
    memset(rq, 0, 2 * sizeof *rq);
    for (int r = 0; r < 2; r++) {
        tb_request_metrics_compute(1000, 0, 3, em, 3, &rq[r].m);
        rq[r].n_out = 3;
        rq[r].recount = -1;
        rq[r].output_ids = -1;
        rq[r].prompt_idx = -1;
        rq[r].emissions_json = "[]";
    }
    if (fail) {
        rq[1].status = 1;
        rq[1].error = "connect: refused";
    }
    *s = (tb_sample_record){.warmup = warmup, .n_requests = 2, .prefill_ns = -1, .decode_ns = -1,
                            .peak_device_bytes = dev_bytes, .energy_mj = energy_mj, .recount_tokens = -1,
                            .requests = rq};
    const uint32_t n_out[] = {3, 3};
    const int ok[] = {1, !fail};
    tb_rep_metrics_compute((tb_request_metrics[]){rq[0].m, rq[1].m}, n_out, ok, 2, -1, 0, &s->m);
}

int main(void)
{
    const char *null_path = getenv("TB_NULL_PLUGIN");
    char path[] = "/tmp/tb_rsession_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0 && null_path);
    if (fd < 0 || !null_path)
        return check_done();
    close(fd);
    unlink(path);
    tb_store *st = NULL;
    char *err = NULL;
    CHECK(tb_store_open(path, &st, &err) == 0);
    tb_machine_info mi;
    tb_machine_info_collect(&mi);
    tb_session_info si = {.machine_id = tb_store_machine(st, &mi, &err), .suite = &suite, .command_line = "t"};
    int64_t session = tb_store_session_begin(st, &si, &err);
    tb_plan_backend pb = {.sb = &sb, .options_json = "{}"};
    CHECK(tb_plugin_open(null_path, 60, NULL, 0, &pb.plugin, &err) == 0);
    int64_t backend = tb_store_backend(st, session, &pb, &err);
    CHECK(session > 0 && backend > 0);

    /* case 1: a warm-up (1000 mJ, 8 GiB) and two measured calls (300 and
     * 500 mJ, 1 and 2 MiB; the second with a failed request, whose 3
     * tokens do not count): (300 + 500) mJ / 9 tokens */
    tb_request_record rq[3][2];
    tb_sample_record s[3];
    sample(&s[0], rq[0], 1, 1000, INT64_C(8) << 30, 0);
    sample(&s[1], rq[1], 0, 300, 1 << 20, 0);
    sample(&s[2], rq[2], 0, 500, 2 << 20, 1);
    for (uint32_t k = 0; k < 3; k++)
        s[k].repetition = k;
    tb_case c1 = {.ordinal = 1, .prompt_tokens = 16, .max_new_tokens = 3, .batch = 2, .swept_json = "{}"};
    tb_metric_record agg = {.name = "agg_tps", .unit = "tokens/s", .st = {.n = 2, .median = 1, .cv = 0}};
    tb_case_record rec = {.session_id = session, .backend_id = backend, .c = &c1, .status = "ok",
                          .case_wall_ns = 1, .host_peak_rss = -1, .samples = s, .n_samples = 3,
                          .metrics = &agg, .n_metrics = 1};
    int64_t id1 = tb_store_case(st, &rec, &err);
    CHECK(id1 > 0);
    if (id1 <= 0)
        fprintf(stderr, "  %s\n", err);
    /* case 2: no energy, no device memory reported (-1: NULL) */
    sample(&s[0], rq[0], 0, -1, -1, 0);
    tb_case c2 = c1;
    c2.ordinal = 2;
    rec.c = &c2;
    rec.n_samples = 1;
    int64_t id2 = tb_store_case(st, &rec, &err);
    CHECK(id2 > 0);
    if (id2 <= 0)
        fprintf(stderr, "  %s\n", err);
    /* case 3: two measured calls; slot 0 is given prompt 0xA both times
     * and answers differently: varying; slot 1 is given a new prompt each
     * time (the http backend's unique prompts) and answers differently:
     * not compared. Case 4: the same outputs without prompt hashes (rows
     * stored before them): compared by slot, both vary. */
    sample(&s[0], rq[0], 0, -1, -1, 0);
    sample(&s[1], rq[1], 0, -1, -1, 0);
    s[1].repetition = 1;
    for (int k = 0; k < 2; k++) {
        rq[k][0].output_hash = 0x10 + (uint64_t)k;
        rq[k][1].output_hash = 0x20 + (uint64_t)k;
        rq[k][0].prompt_hash = 0xA;
        rq[k][1].prompt_hash = 0xB0 + (uint64_t)k;
    }
    tb_case c3 = c1;
    c3.ordinal = 3;
    rec.c = &c3;
    rec.n_samples = 2;
    CHECK(tb_store_case(st, &rec, &err) > 0);
    for (int k = 0; k < 2; k++)
        rq[k][0].prompt_hash = rq[k][1].prompt_hash = 0;
    tb_case c4 = c1;
    c4.ordinal = 4;
    rec.c = &c4;
    CHECK(tb_store_case(st, &rec, &err) > 0);
    /* case 5: counts that failed the output-length check (count_mismatch,
     * as tb_count_mismatch decided), by what they were held to and on
     * which side (3 counted): of 2 ids returned, twice; text alone (no
     * ids) re-counted to 2, twice, and to 5 once; in the warm-up, of 4
     * ids, left out. A count that held while its ids re-count otherwise,
     * or its text's re-count agrees, is no failure. */
    tb_request_record rq5[4][2];
    tb_sample_record s5[4];
    for (uint32_t k = 0; k < 4; k++) {
        sample(&s5[k], rq5[k], k == 0, -1, -1, 0);
        s5[k].repetition = k;
    }
    rq5[0][0].output_ids = 4, rq5[0][0].count_mismatch = TB_COUNT_NOT_IDS;
    rq5[0][1].output_ids = 3, rq5[0][1].recount = 5;
    rq5[1][0].output_ids = 2, rq5[1][0].count_mismatch = TB_COUNT_NOT_IDS;
    rq5[1][1].output_ids = 2, rq5[1][1].count_mismatch = TB_COUNT_NOT_IDS;
    rq5[2][0].recount = 2, rq5[2][0].count_mismatch = TB_COUNT_NOT_TEXT;
    rq5[2][1].recount = 5, rq5[2][1].count_mismatch = TB_COUNT_NOT_TEXT;
    rq5[3][0].recount = 2, rq5[3][0].count_mismatch = TB_COUNT_NOT_TEXT;
    rq5[3][1].recount = 3;
    tb_case c5 = c1;
    c5.ordinal = 5;
    rec.c = &c5;
    rec.samples = s5;
    rec.n_samples = 4;
    CHECK(tb_store_case(st, &rec, &err) > 0);
    CHECK(tb_store_session_end(st, session, "completed", &err) == 0);

    tb_rsession rs;
    CHECK(tb_rsession_load(tb_store_db(st), session, &rs, &err) == 0);
    CHECK(rs.n_cases == 5);
    if (rs.n_cases == 5) {
        static const int want[TB_N_COUNT_MISMATCHES] = {
            [TB_MISMATCH_OVER_IDS] = 2, [TB_MISMATCH_UNDER_IDS] = 0, /* the warm-up's left out */
            [TB_MISMATCH_OVER_TEXT] = 2, [TB_MISMATCH_UNDER_TEXT] = 1};
        for (int k = 0; k < TB_N_COUNT_MISMATCHES; k++)
            CHECK(rs.cases[0].count_mismatches[k] == 0 && rs.cases[4].count_mismatches[k] == want[k]);
        CHECK(rs.cases[0].varying_outputs == 0 && rs.cases[1].varying_outputs == 0);
        CHECK(rs.cases[2].varying_outputs == 1); /* prompt 0xA only */
        CHECK(rs.cases[3].varying_outputs == 2); /* no hashes: by slot */
        if (rs.cases[2].varying_outputs != 1)
            fprintf(stderr, "  case 3: %d varying, want 1\n", rs.cases[2].varying_outputs);

        const tb_rcase *a = &rs.cases[0], *b = &rs.cases[1];
        CHECK_NEAR(a->energy_j_per_token, 0.8 / 9, 1e-12); /* warm-up's 1000 mJ left out */
        CHECK(a->peak_device_mib == 2);                    /* measured calls only */
        CHECK(a->requests == 4 && a->failed_requests == 1);
        CHECK(isnan(b->energy_j_per_token) && isnan(b->peak_device_mib));
        CHECK(b->requests == 2 && b->failed_requests == 0);
    }
    tb_rsession_free(&rs);
    tb_plugin_close(&pb.plugin);
    tb_store_close(st);
    unlink(path);
    return check_done();
}
