/* dims.h — the case dimensions, one row of one table each.
 *
 * A dimension (prompt_tokens, steps, ...) is a row of tb_dim_defs: its
 * suite key, its bench_case column, where it lives in tb_case (fio's
 * option tables carry an offset into the engine's struct the same way),
 * and how people read it. suite.c parses by it, plan.c expands, filters
 * and labels by it, the store writes and reads its column by it, and the
 * reports draw their dimension columns and captions from it. Adding a
 * dimension adds a tb_dim member, a row here, its tb_case field, and its
 * bench_case column (a migration, which also re-creates the summary view
 * with it: `show` and the CSV export read the view); nothing else names
 * it but the code that uses its value.
 *
 * "Not applicable" has one meaning in each layer: 0 in tb_case (a
 * dimension with `zero` = "-"), NULL in SQL, "-" in text. prompt_tokens
 * 0 is a value ("set": the prompt set's own prompts), stored as 0. */
#ifndef TB_DIMS_H
#define TB_DIMS_H

#include <stddef.h>
#include <stdint.h>

#include "plan.h"
#include "strmem.h"

typedef struct tb_dim_def {
    const char *name;   /* the suite's key, --filter's and the label's:
                           "block_length" */
    const char *column; /* its bench_case (and summary view) column; NULL:
                           not stored (requests per call) */
    size_t offset;      /* of its field in tb_case */
    int is_rate;        /* the field is a double (requests/s); else a
                           uint32_t count */
    const char *word;   /* captions and report headings: "block" */
    const char *abbrev; /* the terminal table's heading: "conc" */
    const char *unit;   /* after the value and the heading: "/s" */
    const char *zero;   /* the text of value 0: "-" (not applicable: NULL
                           in SQL), "set" (prompt_tokens); NULL: 0 is
                           not a value it takes */
    long long min;      /* smallest value a suite may write (counts) */
    int required;       /* every case has it (the plan's default when not
                           swept); a backend cannot say "= none" */
    uint32_t cap;       /* a backend gets it only with one of these
                           capabilities (TB_CAP_*); 0: every backend */
    const char *cap_name; /* the capability, for the plan's notes */
} tb_dim_def;

/* Indexed by tb_dim, in tb_dim order (the order cases are expanded,
 * labelled and shown). */
extern const tb_dim_def tb_dim_defs[TB_N_DIMS];

/* Case c's value of d (0: not applicable, for a dimension whose zero is
 * "-"), and setting it. */
double tb_case_dim(const tb_case *c, tb_dim d);
void tb_case_dim_set(tb_case *c, tb_dim d, double v);

/* Whether d is not applicable to c (stored as NULL). */
int tb_case_dim_absent(const tb_case *c, tb_dim d);

/* The value as text: "8", "0.5", or the dimension's zero text ("-",
 * "set"). Returns buf. */
const char *tb_case_dim_text(const tb_case *c, tb_dim d, char *buf, size_t size);

/* How tb_case_label_dims writes a case. */
typedef enum tb_label_style {
    TB_LABEL_KEYS,  /* "prompt_tokens=32 max_new_tokens=64 steps=8":
                       progress lines, --dry-run, suite keys */
    TB_LABEL_WORDS, /* "prompt 32, new 64, steps 8, rate 5/s": report
                       captions, chart curves, group keys */
} tb_label_style;

/* The one labeller of a case's dimensions: appends to out, separated
 * from what out already holds, each applicable dimension not in `skip`
 * (bits 1u << tb_dim) and with a column (unless TB_LABEL_KEYS: requests
 * per call are labelled there when not skipped). A load search's case
 * (c->search) says request_rate=sweep | slo. */
void tb_case_label_dims(tb_str *out, const tb_case *c, uint32_t skip, tb_label_style style);

/* Does case a equal b in every stored dimension where a applies (a
 * backend without steps is the reference for every step count)? */
int tb_case_dims_generalize(const tb_case *a, const tb_case *b);

#endif
