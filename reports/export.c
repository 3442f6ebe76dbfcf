/* export.c — see export.h. The rows come from the reader (reader.h);
 * its JSON is assembled by SQLite's JSON functions, so the export is
 * exactly what the tables hold. */
#define _GNU_SOURCE
#include "export.h"

#include <stdlib.h>
#include <string.h>

#include "reader.h"
#include "store.h"
#include "util.h"

/* RFC 4180: quote when the field holds a comma, quote or line break. */
static void csv_field(tb_str *out, const char *s)
{
    if (!s)
        return;
    if (!strpbrk(s, ",\"\r\n")) {
        tb_str_append(out, s);
        return;
    }
    tb_str_append(out, "\"");
    for (; *s; s++)
        tb_str_appendf(out, *s == '"' ? "\"\"" : "%c", *s);
    tb_str_append(out, "\"");
}

/* What the export parses must parse (tb_store_check_json): a session's
 * row of invalid JSON is an error naming it. */
static int check_session(sqlite3 *db, int64_t session, int with_requests, char **err)
{
    char *bad = NULL;
    if (tb_store_check_json(db, session, with_requests, &bad) == 0)
        return 0;
    *err = tb_xasprintf("export of session %lld: %s", (long long)session, bad);
    free(bad);
    return -1;
}

int tb_export_csv(sqlite3 *db, int64_t session, FILE *out, char **err)
{
    if (check_session(db, session, 0, err) != 0)
        return -1;
    /* Whole before a byte is written: a read error halfway must not
     * leave a CSV that looks complete. */
    tb_row_table t;
    if (tb_read_summary_table(db, session, &t, err) != 0)
        return -1;
    tb_str b = {0};
    for (size_t i = 0; i < t.n_cols; i++) {
        csv_field(&b, t.names[i]);
        tb_str_append(&b, i + 1 < t.n_cols ? "," : "\r\n");
    }
    for (size_t r = 0; r < t.n_rows; r++)
        for (size_t i = 0; i < t.n_cols; i++) {
            csv_field(&b, t.cells[r * t.n_cols + i]);
            tb_str_append(&b, i + 1 < t.n_cols ? "," : "\r\n");
        }
    fwrite(b.s, 1, b.len, out);
    tb_str_free(&b);
    tb_row_table_free(&t);
    return 0;
}

int tb_export_json(sqlite3 *db, int64_t session, FILE *out, char **err)
{
    char *json;
    if (tb_read_session_json(db, session, &json, err) != 0)
        return -1;
    fputs(json, out);
    fputc('\n', out);
    free(json);
    return 0;
}
