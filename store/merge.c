/* merge.c — see merge.h. The copy is driven by the schema itself (tables,
 * columns and foreign keys read from the other database), so a column or
 * table added by a later migration is merged without a change here; only
 * machine (by fingerprint) and session (by uuid) are special. */
#define _GNU_SOURCE
#include "merge.h"

#include <limits.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store.h"
#include "util.h"

typedef struct fkey {
    int col;   /* column index in the table */
    size_t to; /* referenced table */
} fkey;

typedef struct table {
    char *name;
    char **cols;
    size_t n_cols;
    int id_col; /* the INTEGER PRIMARY KEY "id", or -1 */
    fkey *fks;
    size_t n_fks;
    int64_t *old_id, *new_id; /* ascending old ids (rows read in id order) */
    size_t n_map, cap_map;
    size_t inserted;
    int done, reaches_session;
} table;

typedef struct merge {
    sqlite3 *src, *dst;
    table *t;
    size_t n_t;
    size_t machine, session; /* table indexes */
    int64_t *needed_machines;
    size_t n_needed;
    int64_t *import; /* the source's session ids to copy, ascending */
    size_t n_import;
    tb_str running;  /* the sessions refused: their run is alive */
    char *err;
} merge;

static int find_table(const merge *m, const char *name, size_t *out)
{
    for (size_t i = 0; i < m->n_t; i++)
        if (strcmp(m->t[i].name, name) == 0) {
            *out = i;
            return 0;
        }
    return -1;
}

/* Read tables, columns and foreign keys of the source. */
static int read_schema(merge *m)
{
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(m->src,
                           "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
                           " ORDER BY name", -1, &q, NULL) != SQLITE_OK) {
        m->err = tb_xasprintf("cannot read its schema: %s", sqlite3_errmsg(m->src));
        return -1;
    }
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        m->t = tb_xrealloc(m->t, (m->n_t + 1) * sizeof *m->t);
        table *t = &m->t[m->n_t++];
        memset(t, 0, sizeof *t);
        t->name = tb_xstrdup((const char *)sqlite3_column_text(q, 0));
        t->id_col = -1;
    }
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE) {
        m->err = tb_xasprintf("cannot read its schema: %s", sqlite3_errmsg(m->src));
        return -1;
    }
    if (find_table(m, "machine", &m->machine) != 0 || find_table(m, "session", &m->session) != 0) {
        m->err = tb_xstrdup("not a tokbench database (no machine or session table)");
        return -1;
    }
    for (size_t i = 0; i < m->n_t; i++) {
        table *t = &m->t[i];
        char *qn = tb_store_quote_ident(t->name);
        char *sql = tb_xasprintf("PRAGMA table_info(%s)", qn);
        rc = sqlite3_prepare_v2(m->src, sql, -1, &q, NULL);
        if (rc == SQLITE_OK) {
            while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
                const char *col = (const char *)sqlite3_column_text(q, 1);
                const char *type = (const char *)sqlite3_column_text(q, 2);
                if (strcmp(col, "id") == 0 && sqlite3_column_int(q, 5) == 1 && type && !strcasecmp(type, "INTEGER"))
                    t->id_col = (int)t->n_cols;
                t->cols = tb_xrealloc(t->cols, (t->n_cols + 1) * sizeof *t->cols);
                t->cols[t->n_cols++] = tb_xstrdup(col);
            }
        }
        sqlite3_finalize(q);
        free(sql);
        free(qn);
        if (rc != SQLITE_DONE) {
            m->err = tb_xasprintf("cannot read the columns of %s: %s", t->name, sqlite3_errmsg(m->src));
            return -1;
        }
    }
    /* Foreign keys once every table's id column is known. */
    for (size_t i = 0; i < m->n_t; i++) {
        table *t = &m->t[i];
        char *qn = tb_store_quote_ident(t->name);
        char *sql = tb_xasprintf("PRAGMA foreign_key_list(%s)", qn);
        rc = sqlite3_prepare_v2(m->src, sql, -1, &q, NULL);
        if (rc == SQLITE_OK) {
            while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
                const char *to = (const char *)sqlite3_column_text(q, 2);
                const char *from = (const char *)sqlite3_column_text(q, 3);
                fkey f = {.col = -1};
                for (size_t c = 0; c < t->n_cols; c++)
                    if (strcmp(t->cols[c], from) == 0)
                        f.col = (int)c;
                if (f.col < 0 || find_table(m, to, &f.to) != 0 || m->t[f.to].id_col < 0) {
                    /* Only references to another table's id are remapped. */
                    m->err = tb_xasprintf("table %s: foreign key %s -> %s is not to an id column; merge cannot "
                                          "remap it", t->name, from, to);
                    sqlite3_finalize(q);
                    free(sql);
                    free(qn);
                    return -1;
                }
                t->fks = tb_xrealloc(t->fks, (t->n_fks + 1) * sizeof *t->fks);
                t->fks[t->n_fks++] = f;
            }
        }
        sqlite3_finalize(q);
        free(sql);
        free(qn);
        if (rc != SQLITE_DONE) {
            m->err = tb_xasprintf("cannot read the foreign keys of %s: %s", t->name, sqlite3_errmsg(m->src));
            return -1;
        }
    }
    /* Every other table must hang off a session, or its rows could not be
     * told apart from rows merged before. */
    m->t[m->session].reaches_session = 1;
    for (int changed = 1; changed;) {
        changed = 0;
        for (size_t i = 0; i < m->n_t; i++)
            for (size_t k = 0; k < m->t[i].n_fks && !m->t[i].reaches_session; k++)
                if (m->t[m->t[i].fks[k].to].reaches_session && m->t[i].fks[k].to != i) {
                    m->t[i].reaches_session = 1;
                    changed = 1;
                }
    }
    for (size_t i = 0; i < m->n_t; i++)
        if (i != m->machine && !m->t[i].reaches_session) {
            m->err = tb_xasprintf("table %s does not belong to a session; merge does not know how to merge it",
                                  m->t[i].name);
            return -1;
        }
    return 0;
}

static void map_add(table *t, int64_t old_id, int64_t new_id)
{
    if (t->n_map == t->cap_map) {
        t->cap_map = t->cap_map ? t->cap_map * 2 : 64;
        t->old_id = tb_xrealloc(t->old_id, t->cap_map * sizeof *t->old_id);
        t->new_id = tb_xrealloc(t->new_id, t->cap_map * sizeof *t->new_id);
    }
    t->old_id[t->n_map] = old_id;
    t->new_id[t->n_map] = new_id;
    t->n_map++;
}

/* New id of old id `v` in table t, or -1 (a row that was not imported). */
static int64_t map_get(const table *t, int64_t v)
{
    size_t lo = 0, hi = t->n_map;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->old_id[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < t->n_map && t->old_id[lo] == v ? t->new_id[lo] : -1;
}

/* 1 (and *id) when the target has a row for `sql`'s key, 0 when not,
 * -1 with m->err when it cannot be read. */
static int exists_in_dst(merge *m, const char *sql, sqlite3_value *v, int64_t *id)
{
    sqlite3_stmt *q;
    int rc = sqlite3_prepare_v2(m->dst, sql, -1, &q, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_value(q, 1, v);
        rc = sqlite3_step(q);
        if (rc == SQLITE_ROW && id)
            *id = sqlite3_column_int64(q, 0);
    }
    sqlite3_finalize(q);
    if (rc == SQLITE_ROW)
        return 1;
    if (rc == SQLITE_DONE)
        return 0;
    m->err = tb_xasprintf("reading the target database: %s", sqlite3_errmsg(m->dst));
    return -1;
}

static int needed_machine(const merge *m, int64_t id)
{
    for (size_t i = 0; i < m->n_needed; i++)
        if (m->needed_machines[i] == id)
            return 1;
    return 0;
}

static int imported_session(const merge *m, int64_t id)
{
    size_t lo = 0, hi = m->n_import;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->import[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < m->n_import && m->import[lo] == id;
}

static int copy_table(merge *m, size_t ti, tb_merge_result *res)
{
    table *t = &m->t[ti];
    /* The source's rows are read here; the target's are written by the
     * store's row writer (store.h), every column but the id. */
    tb_str cols = {0};
    char **ins = tb_xcalloc(t->n_cols + 1, sizeof *ins);
    size_t n_ins = 0;
    for (size_t c = 0; c < t->n_cols; c++) {
        char *qc = tb_store_quote_ident(t->cols[c]);
        tb_str_appendf(&cols, "%s%s", c ? ", " : "", qc);
        if ((int)c != t->id_col)
            ins[n_ins++] = t->cols[c];
        free(qc);
    }
    char *qn = tb_store_quote_ident(t->name);
    char *sel = tb_xasprintf("SELECT %s FROM %s%s", cols.s, qn, t->id_col >= 0 ? " ORDER BY id" : "");
    tb_str_free(&cols);
    free(qn);
    sqlite3_stmt *qs = NULL;
    tb_store_rows *qi = NULL;
    char *why = NULL;
    int rc = 0;
    if (sqlite3_prepare_v2(m->src, sel, -1, &qs, NULL) != SQLITE_OK) {
        m->err = tb_xasprintf("reading %s: %s", t->name, sqlite3_errmsg(m->src));
        rc = -1;
    } else if (tb_store_rows_open(m->dst, t->name, ins, n_ins, &qi, &why) != 0) {
        m->err = tb_xasprintf("the target cannot take rows of %s: %s", t->name, why);
        free(why);
        rc = -1;
    }
    free(ins);
    int uuid_col = -1, fp_col = -1;
    for (size_t c = 0; c < t->n_cols; c++) {
        if (ti == m->session && strcmp(t->cols[c], "uuid") == 0)
            uuid_col = (int)c;
        if (ti == m->machine && strcmp(t->cols[c], "fingerprint") == 0)
            fp_col = (int)c;
    }
    if (rc == 0 && ((ti == m->session && uuid_col < 0) || (ti == m->machine && fp_col < 0))) {
        m->err = tb_xasprintf("table %s lacks its key column (%s)", t->name, ti == m->session ? "uuid" : "fingerprint");
        rc = -1;
    }
    int step = SQLITE_DONE;
    int64_t last = 0; /* the last row read, for a message */
    while (rc == 0 && (step = sqlite3_step(qs)) == SQLITE_ROW) {
        int64_t old = t->id_col >= 0 ? sqlite3_column_int64(qs, t->id_col) : 0;
        last = old;
        if (ti == m->machine) {
            if (!needed_machine(m, old))
                continue;
            int64_t id = 0;
            int known = exists_in_dst(m, "SELECT id FROM machine WHERE fingerprint = ?",
                                      sqlite3_column_value(qs, fp_col), &id);
            if (known < 0) {
                rc = -1;
                break;
            }
            if (known) {
                map_add(t, old, id);
                res->machines_known++;
                continue;
            }
            res->machines_new++;
        }
        if (ti == m->session && !imported_session(m, old))
            continue; /* already present, or still running */
        int skip = 0;
        size_t bind = 0;
        for (size_t c = 0; c < t->n_cols && !skip; c++) {
            if ((int)c == t->id_col)
                continue;
            const fkey *f = NULL;
            for (size_t k = 0; k < t->n_fks; k++)
                if (t->fks[k].col == (int)c)
                    f = &t->fks[k];
            if (f && sqlite3_column_type(qs, (int)c) != SQLITE_NULL) {
                int64_t to = map_get(&m->t[f->to], sqlite3_column_int64(qs, (int)c));
                if (to < 0)
                    skip = 1; /* its session was already present */
                else
                    tb_store_rows_id(qi, bind, to);
            } else {
                tb_store_rows_value(qi, bind, sqlite3_column_value(qs, (int)c));
            }
            bind++;
        }
        if (skip) /* its bindings are all replaced by the next row's */
            continue;
        int64_t id = tb_store_rows_insert(qi, &why);
        if (id < 0) {
            m->err = tb_xasprintf("inserting into %s (row id %lld of the other database): %s", t->name,
                                  (long long)old, why);
            free(why);
            rc = -1;
            break;
        }
        if (t->id_col >= 0)
            map_add(t, old, id);
        t->inserted++;
        res->rows++;
    }
    /* An error is not the end of the rows: a damaged page read halfway
     * through a table would import part of a session, for good. */
    if (rc == 0 && step != SQLITE_ROW && step != SQLITE_DONE) {
        m->err = t->id_col >= 0 && last
                     ? tb_xasprintf("reading %s after row id %lld: %s", t->name, (long long)last,
                                    sqlite3_errmsg(m->src))
                     : tb_xasprintf("reading %s: %s", t->name, sqlite3_errmsg(m->src));
        rc = -1;
    }
    sqlite3_finalize(qs);
    tb_store_rows_close(qi);
    free(sel);
    return rc;
}

/* A session's standing in one database. */
typedef struct sess_state {
    int64_t id, cases;
    char status[16];
    tb_owner_state owner; /* of a 'running' session; GONE otherwise */
    int64_t pid;
} sess_state;

/* The columns of sess_sql read into *st (q's columns 1..). */
#define SESS_COLS                                                                                   \
    " id, status, owner_boot_id, owner_pid_ns, owner_pid, owner_start_ticks,"                     \
    " (SELECT count(*) FROM bench_case c WHERE c.session_id = session.id)"

static void sess_read(sqlite3_stmt *q, int first, sess_state *st)
{
    st->id = sqlite3_column_int64(q, first);
    const unsigned char *status = sqlite3_column_text(q, first + 1);
    snprintf(st->status, sizeof st->status, "%s", status ? (const char *)status : "");
    st->pid = sqlite3_column_type(q, first + 4) == SQLITE_NULL ? 0 : sqlite3_column_int64(q, first + 4);
    st->owner = strcmp(st->status, "running") != 0
                    ? TB_OWNER_GONE
                    : tb_store_owner_state((const char *)sqlite3_column_text(q, first + 2),
                                           (const char *)sqlite3_column_text(q, first + 3), st->pid,
                                           sqlite3_column_type(q, first + 5) == SQLITE_NULL
                                               ? -1
                                               : sqlite3_column_int64(q, first + 5));
    st->cases = sqlite3_column_int64(q, first + 6);
}

static int unfinished(const sess_state *s)
{
    return strcmp(s->status, "running") == 0 || strcmp(s->status, "interrupted") == 0;
}

/* Further along: more cases, or as many and completed. */
static int further(const sess_state *a, const sess_state *b)
{
    int ca = strcmp(a->status, "completed") == 0, cb = strcmp(b->status, "completed") == 0;
    return a->cases > b->cases || (a->cases == b->cases && ca && !cb);
}

/* Which of the source's sessions to copy: those the target lacks, and
 * those it holds unfinished (merged while their run was going, or
 * interrupted) when the source has them further along, its copy being
 * deleted first (ON DELETE CASCADE takes its rows). Not a session whose
 * run is still writing it (its owner alive on this machine): merged
 * now, it would be frozen half done. Then the machines they need. */
static int choose_sessions(merge *m, tb_merge_result *res)
{
    sqlite3_stmt *q, *qd = NULL;
    if (sqlite3_prepare_v2(m->src, "SELECT uuid," SESS_COLS ", machine_id FROM session ORDER BY id", -1, &q,
                           NULL) != SQLITE_OK) {
        m->err = tb_xasprintf("reading sessions: %s", sqlite3_errmsg(m->src));
        return -1;
    }
    if (sqlite3_prepare_v2(m->dst, "SELECT" SESS_COLS " FROM session WHERE uuid = ?", -1, &qd, NULL) != SQLITE_OK) {
        m->err = tb_xasprintf("reading the target's sessions: %s", sqlite3_errmsg(m->dst));
        sqlite3_finalize(q);
        return -1;
    }
    int rc, fail = 0;
    while (!fail && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        sess_state src;
        sess_read(q, 1, &src);
        int64_t machine = sqlite3_column_int64(q, 8);
        if (src.owner == TB_OWNER_ALIVE) {
            tb_str_appendf(&m->running, "%ssession %lld (%s, pid %lld)", m->running.len ? ", " : "",
                           (long long)src.id, sqlite3_column_text(q, 0), (long long)src.pid);
            res->sessions_running++;
            continue;
        }
        sqlite3_reset(qd);
        sqlite3_bind_value(qd, 1, sqlite3_column_value(q, 0));
        int drc = sqlite3_step(qd);
        if (drc == SQLITE_ROW) {
            sess_state dst;
            sess_read(qd, 0, &dst);
            if (!unfinished(&dst) || dst.owner == TB_OWNER_ALIVE || !further(&src, &dst)) {
                res->sessions_known++;
                continue;
            }
            char *why = NULL;
            if (tb_store_delete_session(m->dst, dst.id, &why) != 0) {
                m->err = tb_xasprintf("replacing the target's unfinished copy of session %s (id %lld): %s",
                                      sqlite3_column_text(q, 0), (long long)dst.id, why);
                free(why);
                fail = 1;
                break;
            }
            res->sessions_completed++;
        } else if (drc != SQLITE_DONE) {
            m->err = tb_xasprintf("reading the target's sessions: %s", sqlite3_errmsg(m->dst));
            fail = 1;
            break;
        } else {
            res->sessions_new++;
        }
        m->import = tb_xrealloc(m->import, (m->n_import + 1) * sizeof *m->import);
        m->import[m->n_import++] = src.id;
        if (!needed_machine(m, machine)) {
            m->needed_machines = tb_xrealloc(m->needed_machines, (m->n_needed + 1) * sizeof *m->needed_machines);
            m->needed_machines[m->n_needed++] = machine;
        }
    }
    if (!fail && rc != SQLITE_DONE) {
        m->err = tb_xasprintf("reading sessions: %s", sqlite3_errmsg(m->src));
        fail = 1;
    }
    sqlite3_finalize(q);
    sqlite3_finalize(qd);
    return fail ? -1 : 0;
}

/* What is imported must read back: the source passes SQLite's own check
 * (every page readable and well formed), its foreign keys hold, and its
 * JSON columns hold JSON of their kind. */
static int check_source(merge *m)
{
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(m->src, "PRAGMA quick_check", -1, &q, NULL) != SQLITE_OK) {
        m->err = tb_xasprintf("cannot check it: %s", sqlite3_errmsg(m->src));
        return -1;
    }
    int rc = sqlite3_step(q);
    if (rc != SQLITE_ROW || strcmp((const char *)sqlite3_column_text(q, 0), "ok") != 0) {
        /* its first finding, on one line ("*** in database main ***\nPage 31: ...") */
        char *what = tb_xstrdup(rc == SQLITE_ROW ? (const char *)sqlite3_column_text(q, 0) : sqlite3_errmsg(m->src));
        for (char *c = what; *c; c++)
            if (*c == '\n')
                *c = ' ';
        m->err = tb_xasprintf("the database is damaged: %s (repair it, e.g. with sqlite3's .recover, then merge "
                              "again)", what);
        free(what);
        sqlite3_finalize(q);
        return -1;
    }
    sqlite3_finalize(q);
    if (sqlite3_prepare_v2(m->src, "PRAGMA foreign_key_check", -1, &q, NULL) != SQLITE_OK) {
        m->err = tb_xasprintf("cannot check its foreign keys: %s", sqlite3_errmsg(m->src));
        return -1;
    }
    rc = sqlite3_step(q);
    if (rc == SQLITE_ROW)
        m->err = tb_xasprintf("row %lld of %s refers to a %s row that does not exist (foreign key check)",
                              (long long)sqlite3_column_int64(q, 1), sqlite3_column_text(q, 0),
                              sqlite3_column_text(q, 2));
    else if (rc != SQLITE_DONE)
        m->err = tb_xasprintf("cannot check its foreign keys: %s", sqlite3_errmsg(m->src));
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE)
        return -1;
    char *why = NULL;
    if (tb_store_check_json(m->src, -1, 1, &why) != 0) {
        m->err = why;
        return -1;
    }
    return 0;
}

static int run(merge *m, tb_merge_result *res)
{
    if (check_source(m) != 0 || read_schema(m) != 0 || choose_sessions(m, res) != 0)
        return -1;
    /* Parents before children: a table is copied once every table its
     * foreign keys point to is. */
    for (size_t copied = 0; copied < m->n_t;) {
        size_t progress = 0;
        for (size_t i = 0; i < m->n_t; i++) {
            table *t = &m->t[i];
            if (t->done)
                continue;
            int ready = 1;
            for (size_t k = 0; k < t->n_fks; k++)
                ready &= t->fks[k].to == i || m->t[t->fks[k].to].done;
            if (!ready)
                continue;
            if (copy_table(m, i, res) != 0)
                return -1;
            t->done = 1;
            copied++;
            progress++;
        }
        if (!progress) {
            m->err = tb_xstrdup("its foreign keys form a cycle; merge cannot order the tables");
            return -1;
        }
    }
    size_t i;
    if (find_table(m, "bench_case", &i) == 0)
        res->cases = m->t[i].inserted;
    if (find_table(m, "sample", &i) == 0)
        res->samples = m->t[i].inserted;
    if (find_table(m, "request", &i) == 0)
        res->requests = m->t[i].inserted;
    return 0;
}

/* The other database at this tokbench's schema version: itself when it
 * is current, else a migrated copy in memory (the file is not touched). */
static int open_source(const char *path, sqlite3 **out, char **why)
{
    *out = NULL;
    sqlite3 *db = NULL;
    if (access(path, R_OK) != 0) {
        *why = tb_xasprintf("cannot read: %m");
        return -1;
    }
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        *why = tb_xstrdup("is a folder, not a database");
        return -1;
    }
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        *why = tb_xasprintf("cannot open: %s", sqlite3_errmsg(db));
        sqlite3_close(db);
        return -1;
    }
    sqlite3_busy_timeout(db, 10000);
    sqlite3_stmt *q;
    int v = -1;
    if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &q, NULL) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW)
        v = sqlite3_column_int(q, 0);
    sqlite3_finalize(q);
    if (v < 0) {
        *why = tb_xasprintf("not a database, or unreadable: %s", sqlite3_errmsg(db));
        sqlite3_close(db);
        return -1;
    }
    int current = tb_store_schema_version();
    if (v > current) {
        *why = tb_xasprintf("its schema version %d is newer than this tokbench knows (%d); merge it with a newer "
                            "tokbench", v, current);
        sqlite3_close(db);
        return -1;
    }
    if (v == 0) {
        *why = tb_xstrdup("not a tokbench database (schema version 0)");
        sqlite3_close(db);
        return -1;
    }
    if (v == current) {
        *out = db;
        return 0;
    }
    sqlite3 *mem = NULL;
    sqlite3_open(":memory:", &mem);
    sqlite3_backup *b = sqlite3_backup_init(mem, "main", db, "main");
    int rc = b ? sqlite3_backup_step(b, -1) : SQLITE_ERROR;
    sqlite3_backup_finish(b);
    sqlite3_close(db);
    char *merr = NULL;
    if (rc != SQLITE_DONE || tb_store_migrate(mem, current, &merr) != 0) {
        *why = tb_xasprintf("cannot bring schema version %d up to %d: %s", v, current,
                            merr ? merr : sqlite3_errmsg(mem));
        free(merr);
        sqlite3_close(mem);
        return -1;
    }
    *out = mem;
    return 0;
}

int tb_merge(sqlite3 *target, const char *other_path, tb_merge_result *res, char **err)
{
    memset(res, 0, sizeof *res);
    *err = NULL;
    const char *dst_path = sqlite3_db_filename(target, "main");
    char *a = realpath(other_path, NULL), *b = dst_path && *dst_path ? realpath(dst_path, NULL) : NULL;
    int same = a && b && strcmp(a, b) == 0;
    free(a);
    free(b);
    if (same) {
        *err = tb_xasprintf("%s: is the target database itself", other_path);
        return -1;
    }
    merge m = {.dst = target};
    char *why = NULL;
    if (open_source(other_path, &m.src, &why) != 0) {
        *err = tb_xasprintf("%s: %s", other_path, why);
        free(why);
        return -1;
    }
    int rc = -1;
    /* One snapshot of the source: a run writing it meanwhile commits
     * between our statements, and a session read as 'running' must not
     * gain cases on the way. */
    if (sqlite3_exec(m.src, "BEGIN", NULL, NULL, NULL) != SQLITE_OK) {
        *err = tb_xasprintf("%s: cannot read: %s", other_path, sqlite3_errmsg(m.src));
    } else if (sqlite3_exec(target, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
        *err = tb_xasprintf("cannot lock the target database: %s", sqlite3_errmsg(target));
    } else if (run(&m, res) != 0) {
        sqlite3_exec(target, "ROLLBACK", NULL, NULL, NULL);
        *err = tb_xasprintf("%s: %s (nothing was merged)", other_path, m.err ? m.err : "failed");
    } else if (sqlite3_exec(target, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
        *err = tb_xasprintf("commit failed: %s (nothing was merged)", sqlite3_errmsg(target));
        sqlite3_exec(target, "ROLLBACK", NULL, NULL, NULL);
    } else {
        rc = 0;
    }
    if (rc != 0)
        memset(res, 0, sizeof *res);
    else if (m.running.len)
        res->running = tb_str_take(&m.running);
    tb_str_free(&m.running);
    free(m.import);
    for (size_t i = 0; i < m.n_t; i++) {
        table *t = &m.t[i];
        free(t->name);
        for (size_t c = 0; c < t->n_cols; c++)
            free(t->cols[c]);
        free(t->cols);
        free(t->fks);
        free(t->old_id);
        free(t->new_id);
    }
    free(m.t);
    free(m.needed_machines);
    free(m.err);
    if (!sqlite3_get_autocommit(m.src))
        sqlite3_exec(m.src, "COMMIT", NULL, NULL, NULL);
    sqlite3_close(m.src);
    return rc;
}

void tb_merge_result_free(tb_merge_result *res)
{
    free(res->running);
    res->running = NULL;
}
