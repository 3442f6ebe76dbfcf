/* record.c — see record.h. */
#include "record.h"

#include <stdlib.h>

#include "util.h"

const char *const tb_score_names[TB_N_SCORES] = {"correct", "repetition", "distinct"};

tb_metric_record *tb_case_record_add_metric(tb_case_record *rec, const char *name, const char *unit)
{
    rec->metrics = tb_xrealloc(rec->metrics, (rec->n_metrics + 1) * sizeof *rec->metrics);
    tb_metric_record *m = &rec->metrics[rec->n_metrics++];
    *m = (tb_metric_record){.name = name, .unit = unit};
    return m;
}

void tb_case_record_free(tb_case_record *rec)
{
    for (size_t i = 0; i < rec->n_samples; i++) {
        tb_sample_record *s = &rec->samples[i];
        for (uint32_t r = 0; s->requests && r < s->n_requests; r++) {
            free(s->requests[r].error);
            free(s->requests[r].emissions_json);
            free(s->requests[r].canvases_json);
            free(s->requests[r].output_text);
        }
        free(s->requests);
    }
    free(rec->samples);
    for (size_t i = 0; i < rec->n_metrics; i++)
        free(rec->metrics[i].name_buf);
    free(rec->metrics);
    for (size_t i = 0; i < rec->n_tseries; i++) {
        free(rec->tseries[i].source);
        free(rec->tseries[i].name);
    }
    free(rec->tseries);
    free(rec->tpoints);
    rec->tseries = NULL;
    rec->tpoints = NULL;
    rec->n_tseries = rec->n_tpoints = 0;
    free(rec->scrape_error);
    rec->scrape_error = NULL;
    rec->scrapes = rec->scrapes_failed = 0;
    rec->samples = NULL;
    rec->n_samples = 0;
    rec->metrics = NULL;
    rec->n_metrics = 0;
}
