/* store.c — see store.h. */
#define _GNU_SOURCE
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "git_version.h"
#include "tb_config.h"
#include "dims.h"
#include "metrics.h"
#include "plan.h"
#include "util.h"

extern const char *const tb_migrations[];
extern const size_t tb_n_migrations;

struct tb_store {
    sqlite3 *db;
    char *notice; /* what opening did that the user should hear of, or NULL */
    const char *const *secrets; /* tb_store_set_secrets: borrowed */
    size_t n_secrets;
    /* the wait for another process's lock (busy_handler) */
    int64_t lock_wait_ms;
    tb_store_wait_fn on_wait;
    void *wait_ctx;
    int64_t busy_since;
    int wait_said;
};

const char *tb_store_default_path(void)
{
    const char *env = getenv("TOKBENCH_DB");
    return env && *env ? env : "tokbench.db";
}

int tb_store_schema_version(void)
{
    return (int)tb_n_migrations;
}

/* How long a writer waits for another process's transaction. */
#define BUSY_TIMEOUT_MS 10000

static int is_busy(int rc)
{
    return (rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED;
}

/* sqlite3_exec, retried while the database is busy, up to the busy
 * timeout. Not every lock wait goes through the busy handler: while
 * another process creates or converts the same new file, PRAGMA
 * journal_mode = WAL (and reading the schema) fail with SQLITE_BUSY at
 * once. */
static int exec_retry(sqlite3 *db, const char *sql, char **msg)
{
    int64_t deadline = tb_now_ns() + (int64_t)BUSY_TIMEOUT_MS * 1000000;
    for (;;) {
        int rc = sqlite3_exec(db, sql, NULL, NULL, msg);
        if (!is_busy(rc) || tb_now_ns() >= deadline)
            return rc;
        sqlite3_free(*msg);
        *msg = NULL;
        sqlite3_sleep(1);
    }
}

static int user_version_cb(void *out, int n, char **v, char **names)
{
    (void)names;
    *(int *)out = n > 0 && v[0] ? atoi(v[0]) : -1;
    return 0;
}

/* PRAGMA user_version, or -1 (sqlite3_errmsg says why). */
static int user_version(sqlite3 *db)
{
    int v = -1;
    char *msg = NULL;
    int64_t deadline = tb_now_ns() + (int64_t)BUSY_TIMEOUT_MS * 1000000;
    for (;;) {
        int rc = sqlite3_exec(db, "PRAGMA user_version", user_version_cb, &v, &msg);
        sqlite3_free(msg);
        msg = NULL;
        if (rc == SQLITE_OK)
            return v;
        if (!is_busy(rc) || tb_now_ns() >= deadline)
            return -1;
        sqlite3_sleep(1);
    }
}

/* The database's schema version if this tokbench can use it, else -1
 * with *err. Reading it is also what catches "not a database". */
static int usable_version(sqlite3 *db, char **err)
{
    int v = user_version(db);
    if (v < 0) {
        *err = tb_xasprintf("cannot read the schema version: %s", sqlite3_errmsg(db));
        return -1;
    }
    if (v > (int)tb_n_migrations) {
        *err = tb_xasprintf("database schema version %d is newer than this tokbench knows (%d); use a newer tokbench",
                            v, (int)tb_n_migrations);
        return -1;
    }
    return v;
}

/* A file read at schema version 0: another program's database when it
 * holds tables (tokbench's first migration sets version 1 in the
 * transaction that makes its tables), 1 with *err; empty (a new file, one
 * a writer may make tokbench's), 0; tokbench's after all (another
 * process migrated it since the version was read: the count and the
 * version are read in one statement, one snapshot), 2; -1 on an error,
 * with *err. */
static int foreign_tables(sqlite3 *db, char **err)
{
    sqlite3_stmt *q = NULL;
    int n = -1, v = -1;
    if (sqlite3_prepare_v2(db, "SELECT (SELECT count(*) FROM sqlite_master), (SELECT user_version FROM "
                               "pragma_user_version)", -1, &q, NULL) == SQLITE_OK &&
        sqlite3_step(q) == SQLITE_ROW)
        n = sqlite3_column_int(q, 0), v = sqlite3_column_int(q, 1);
    sqlite3_finalize(q);
    if (n < 0) {
        *err = tb_xasprintf("cannot read the schema: %s", sqlite3_errmsg(db));
        return -1;
    }
    if (v > 0)
        return 2;
    if (n > 0)
        *err = tb_xasprintf("not a tokbench database (schema version 0, and %d table%s or index%s of another "
                            "program's): not changed",
                            n, n > 1 ? "s" : "", n > 1 ? "es" : "");
    return n > 0;
}

int tb_store_migrate(sqlite3 *db, int target, char **err)
{
    int v = usable_version(db, err);
    if (v < 0)
        return -1;
    while (v < target && v < (int)tb_n_migrations) {
        /* BEGIN IMMEDIATE: two processes opening a fresh file at once must
         * not both apply the same migration. Re-check inside the lock. */
        char *msg = NULL;
        if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, &msg) != SQLITE_OK) {
            *err = tb_xasprintf("cannot lock the database to migrate: %s", msg ? msg : sqlite3_errmsg(db));
            sqlite3_free(msg);
            return -1;
        }
        int now = usable_version(db, err);
        if (now != v) { /* another process migrated (or broke) it meanwhile */
            sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
            if (now < 0)
                return -1;
            v = now;
            continue;
        }
        char pragma[64];
        snprintf(pragma, sizeof pragma, "PRAGMA user_version = %d", v + 1);
        if (sqlite3_exec(db, tb_migrations[v], NULL, NULL, &msg) != SQLITE_OK ||
            sqlite3_exec(db, pragma, NULL, NULL, &msg) != SQLITE_OK) {
            *err = tb_xasprintf("migration %d failed: %s", v + 1, msg ? msg : sqlite3_errmsg(db));
            sqlite3_free(msg);
            sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
            return -1;
        }
        if (sqlite3_exec(db, "COMMIT", NULL, NULL, &msg) != SQLITE_OK) {
            *err = tb_xasprintf("migration %d: commit failed: %s", v + 1, msg ? msg : sqlite3_errmsg(db));
            sqlite3_free(msg);
            sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
            return -1;
        }
        v++;
    }
    return 0;
}

/* ------------------------------------------------- stored JSON */

/* Every JSON column, what it holds, and how to name its row in a
 * message (`session` = ?1; ?1 < 0: every session). */
static const struct json_column {
    const char *table, *column;
    const char *kind;   /* json_type() it must have; NULL: any JSON value */
    const char *scope;  /* WHERE clause selecting the session's rows */
    const char *name;   /* the row, in words */
    int per_request;
} json_columns[] = {
    {"machine", "info_json", "object",
     "(?1 < 0 OR id IN (SELECT machine_id FROM session WHERE id = ?1))", "'machine row ' || id", 0},
    {"session", "config_json", "object", "(?1 < 0 OR id = ?1)", "'session ' || id", 0},
    {"backend", "options_json", "object", "(?1 < 0 OR session_id = ?1)",
     "'backend row ' || id || ' ([backend ' || label || '] of session ' || session_id || ')'", 0},
    {"backend", "info_json", NULL, "(?1 < 0 OR session_id = ?1)",
     "'backend row ' || id || ' ([backend ' || label || '] of session ' || session_id || ')'", 0},
    {"bench_case", "options_json", "object", "(?1 < 0 OR session_id = ?1)",
     "'case #' || ordinal || ' of session ' || session_id || ' (bench_case row ' || id || ')'", 0},
    {"prompt", "tags_json", "array", "(?1 < 0 OR session_id = ?1)",
     "'prompt item ' || idx || ' of session ' || session_id", 0},
    {"search", "limits_json", "object", "(?1 < 0 OR session_id = ?1)",
     "'search row ' || id || ' (case #' || ordinal || ' of session ' || session_id || ')'", 0},
    {"request", "emissions_json", "array",
     "(?1 < 0 OR sample_id IN (SELECT sa.id FROM sample sa JOIN bench_case c ON c.id = sa.case_id"
     " WHERE c.session_id = ?1))",
     "'request row ' || id || (SELECT ' (case #' || c.ordinal || ' of session ' || c.session_id || ')'"
     " FROM sample sa JOIN bench_case c ON c.id = sa.case_id WHERE sa.id = sample_id)", 1},
    {"request", "spec_at", "array", /* migration 15: [[drafted_at, accepted_at], ...] */
     "(?1 < 0 OR sample_id IN (SELECT sa.id FROM sample sa JOIN bench_case c ON c.id = sa.case_id"
     " WHERE c.session_id = ?1))",
     "'request row ' || id || (SELECT ' (case #' || c.ordinal || ' of session ' || c.session_id || ')'"
     " FROM sample sa JOIN bench_case c ON c.id = sa.case_id WHERE sa.id = sample_id)", 1},
    {"request", "canvases_json", "array", /* migration 16: [[steps, committed, positions, ms], ...] */
     "(?1 < 0 OR sample_id IN (SELECT sa.id FROM sample sa JOIN bench_case c ON c.id = sa.case_id"
     " WHERE c.session_id = ?1))",
     "'request row ' || id || (SELECT ' (case #' || c.ordinal || ' of session ' || c.session_id || ')'"
     " FROM sample sa JOIN bench_case c ON c.id = sa.case_id WHERE sa.id = sample_id)", 1},
};

/* Does `table` have `column` (an older schema may lack it)? -1: cannot
 * tell (*err set). */
static int has_column(sqlite3 *db, const char *table, const char *column, char **err)
{
    char *sql = tb_xasprintf("SELECT 1 FROM pragma_table_info('%s') WHERE name = '%s'", table, column);
    sqlite3_stmt *q = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &q, NULL) == SQLITE_OK ? sqlite3_step(q) : SQLITE_ERROR;
    free(sql);
    int found = rc == SQLITE_ROW;
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        *err = tb_xasprintf("reading the schema of %s: %s", table, sqlite3_errmsg(db));
    sqlite3_finalize(q);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? found : -1;
}

int tb_store_check_json(sqlite3 *db, int64_t session, int with_requests, char **err)
{
    for (size_t i = 0; i < TB_ARRAY_LEN(json_columns); i++) {
        const struct json_column *jc = &json_columns[i];
        if (jc->per_request && !with_requests)
            continue;
        int has = has_column(db, jc->table, jc->column, err);
        if (has < 0)
            return -1;
        if (!has)
            continue;
        /* CASE, not OR: json_type() of text that is not JSON is an error */
        tb_str b = {0};
        tb_str_appendf(&b, "SELECT %s, json_valid(%s), CASE WHEN json_valid(%s) THEN json_type(%s) END FROM %s"
                           " WHERE %s AND %s IS NOT NULL AND CASE WHEN json_valid(%s) THEN ",
                       jc->name, jc->column, jc->column, jc->column, jc->table, jc->scope, jc->column, jc->column);
        if (jc->kind)
            tb_str_appendf(&b, "json_type(%s) <> '%s'", jc->column, jc->kind);
        else
            tb_str_append(&b, "0");
        tb_str_append(&b, " ELSE 1 END LIMIT 1");
        sqlite3_stmt *q = NULL;
        int rc = sqlite3_prepare_v2(db, b.s, -1, &q, NULL);
        tb_str_free(&b);
        if (rc == SQLITE_OK) {
            sqlite3_bind_int64(q, 1, session);
            rc = sqlite3_step(q);
        }
        if (rc == SQLITE_ROW) {
            const char *what = (const char *)sqlite3_column_text(q, 0);
            if (sqlite3_column_int(q, 1))
                *err = tb_xasprintf("%s: %s is JSON of type %s, not %s", what ? what : jc->table, jc->column,
                                    sqlite3_column_text(q, 2), strcmp(jc->kind, "array") ? "an object" : "an array");
            else
                *err = tb_xasprintf("%s: %s is not valid JSON", what ? what : jc->table, jc->column);
            sqlite3_finalize(q);
            return -1;
        }
        if (rc != SQLITE_DONE) {
            *err = tb_xasprintf("reading %s.%s: %s", jc->table, jc->column, sqlite3_errmsg(db));
            sqlite3_finalize(q);
            return -1;
        }
        sqlite3_finalize(q);
    }
    return 0;
}

/* ------------------------------------------------- session owners */

/* The process that writes a session (migration 5): kernel boot, PID
 * namespace, pid and the pid's start time. Empty strings and -1: unknown. */
typedef struct tb_owner {
    char boot_id[64];
    char pid_ns[64];
    int64_t pid;
    int64_t start_ticks;
} tb_owner;

/* State (field 3) and start time (field 22, clock ticks after boot) of
 * /proc/PID/stat; 0, or -1 when it cannot be read. */
static int proc_stat(int64_t pid, char *state, int64_t *start_ticks)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name may hold anything */
    long long t;
    if (!p || sscanf(p + 1, " %c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %lld",
                     state, &t) != 2)
        return -1;
    *start_ticks = t;
    return 0;
}

static void owner_self(tb_owner *o)
{
    memset(o, 0, sizeof *o);
    o->pid = getpid();
    o->start_ticks = -1;
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(o->boot_id, sizeof o->boot_id, f))
            o->boot_id[0] = '\0';
        o->boot_id[strcspn(o->boot_id, "\n")] = '\0';
        fclose(f);
    }
    ssize_t n = readlink("/proc/self/ns/pid", o->pid_ns, sizeof o->pid_ns - 1);
    o->pid_ns[n > 0 ? n : 0] = '\0';
    char state;
    if (proc_stat(o->pid, &state, &o->start_ticks) != 0)
        o->start_ticks = -1;
}

static tb_owner_state owner_state(const tb_owner *me, const char *boot, const char *ns, int64_t pid,
                                  int64_t ticks)
{
    if (!boot || !me->boot_id[0])
        return TB_OWNER_UNKNOWN;
    /* Another boot: the machine restarted, or the file was copied from
     * another one. WAL works only between processes of one kernel, so no
     * process of another boot is writing to this file now. */
    if (strcmp(boot, me->boot_id) != 0)
        return TB_OWNER_GONE;
    if (!ns || !me->pid_ns[0] || strcmp(ns, me->pid_ns) != 0 || pid <= 0)
        return TB_OWNER_UNKNOWN; /* another container's pid: not ours to look up */
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
        return TB_OWNER_GONE;
    char state;
    int64_t t;
    if (proc_stat(pid, &state, &t) != 0)
        return TB_OWNER_UNKNOWN; /* hidden (hidepid) or just exited: the next open sees it */
    if (state == 'Z' || state == 'X')
        return TB_OWNER_GONE; /* dead, not yet reaped by its parent */
    if (ticks >= 0 && t != ticks)
        return TB_OWNER_GONE; /* the pid was reused */
    return TB_OWNER_ALIVE;
}

tb_owner_state tb_store_owner_state(const char *boot_id, const char *pid_ns, int64_t pid, int64_t start_ticks)
{
    tb_owner me;
    owner_self(&me);
    return owner_state(&me, boot_id, pid_ns, pid, start_ticks);
}

/* 1 when the process that wrote a 'running' session is certainly gone;
 * 0 when it is alive or cannot be told (so it is never marked). */
static int owner_gone(const tb_owner *me, const char *boot, const char *ns, int64_t pid, int64_t ticks)
{
    return owner_state(me, boot, ns, pid, ticks) == TB_OWNER_GONE;
}

/* Mark 'interrupted' the 'running' sessions whose process is gone (a run
 * killed by SIGKILL, the OOM killer or a power cut never ends its
 * session). Returns how many, and their ids in *ids (malloc'd, or NULL). */
static int mark_stale_sessions(sqlite3 *db, char **ids)
{
    *ids = NULL;
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(db, "SELECT id, owner_boot_id, owner_pid_ns, owner_pid, owner_start_ticks FROM session"
                               " WHERE status = 'running' AND owner_boot_id IS NOT NULL",
                           -1, &q, NULL) != SQLITE_OK)
        return 0;
    tb_owner me;
    owner_self(&me);
    int64_t *stale = NULL;
    size_t n = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
        if (!owner_gone(&me, (const char *)sqlite3_column_text(q, 1), (const char *)sqlite3_column_text(q, 2),
                        sqlite3_column_type(q, 3) == SQLITE_NULL ? 0 : sqlite3_column_int64(q, 3),
                        sqlite3_column_type(q, 4) == SQLITE_NULL ? -1 : sqlite3_column_int64(q, 4)))
            continue;
        stale = tb_xrealloc(stale, (n + 1) * sizeof *stale);
        stale[n++] = sqlite3_column_int64(q, 0);
    }
    sqlite3_finalize(q);
    if (!n)
        return 0;
    /* finished_at: the last sign of life, its last stored case. Only a
     * session still 'running' changes: another process may have marked it
     * meanwhile. A read-only file stays as it is. */
    int marked = 0;
    tb_str list = {0};
    q = NULL;
    if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db, "UPDATE session SET status = 'interrupted', finished_at = coalesce("
                               "(SELECT max(finished_at) FROM bench_case WHERE session_id = ?1), started_at)"
                               " WHERE id = ?1 AND status = 'running'",
                           -1, &q, NULL) == SQLITE_OK) {
        for (size_t i = 0; i < n; i++) {
            sqlite3_reset(q);
            sqlite3_bind_int64(q, 1, stale[i]);
            if (sqlite3_step(q) == SQLITE_DONE && sqlite3_changes(db) == 1) {
                tb_str_appendf(&list, "%s%lld", marked ? ", " : "", (long long)stale[i]);
                marked++;
            }
        }
        sqlite3_finalize(q);
        if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
            marked = 0;
    }
    if (sqlite3_get_autocommit(db) == 0)
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    free(stale);
    if (marked)
        *ids = tb_str_take(&list);
    else
        tb_str_free(&list);
    return marked;
}

static int open_db(const char *path, int flags, tb_store **out, char **err);

/* After this long waiting for a lock, on_wait hears of it. */
#define WAIT_NOTE_MS 1000

/* SQLite's busy handler: sleep and try again until lock_wait_ms have
 * passed since the statement first found the database busy. */
static int busy_handler(void *arg, int count)
{
    tb_store *st = arg;
    int64_t now = tb_now_ns();
    if (count == 0)
        st->busy_since = now;
    int64_t waited_ms = (now - st->busy_since) / 1000000;
    if (waited_ms >= st->lock_wait_ms)
        return 0;
    if (st->on_wait && !st->wait_said && waited_ms >= WAIT_NOTE_MS) {
        st->wait_said = 1;
        st->on_wait(st->wait_ctx, st->lock_wait_ms);
    }
    sqlite3_sleep(count < 20 ? 1 : 20);
    return 1;
}

void tb_store_set_lock_wait(tb_store *st, int64_t wait_ms, tb_store_wait_fn on_wait, void *ctx)
{
    st->lock_wait_ms = wait_ms > 0 ? wait_ms : BUSY_TIMEOUT_MS;
    st->on_wait = on_wait;
    st->wait_ctx = ctx;
    st->wait_said = 0;
}

static tb_store *new_store(sqlite3 *db)
{
    tb_store *st = tb_xcalloc(1, sizeof *st);
    st->db = db;
    st->lock_wait_ms = BUSY_TIMEOUT_MS;
    sqlite3_busy_handler(db, busy_handler, st);
    return st;
}

/* Copy file `from` to `to`: 0, or -1 with *why. */
static int copy_file(const char *from, const char *to, char **why)
{
    int in = open(from, O_RDONLY | O_CLOEXEC), out = -1, rc = -1;
    if (in < 0 || (out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0) {
        *why = tb_xasprintf("%s: %s", in < 0 ? from : to, strerror(errno));
        goto out;
    }
    char buf[65536];
    for (;;) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            *why = tb_xasprintf("%s: %s", from, strerror(errno));
            goto out;
        }
        if (n == 0)
            break;
        for (ssize_t done = 0; done < n;) {
            ssize_t w = write(out, buf + done, (size_t)(n - done));
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0) {
                *why = tb_xasprintf("%s: %s", to, strerror(errno));
                goto out;
            }
            done += w;
        }
    }
    rc = 0;
out:
    if (in >= 0)
        close(in);
    if (out >= 0 && close(out) != 0 && rc == 0) {
        *why = tb_xasprintf("%s: %s", to, strerror(errno));
        rc = -1;
    }
    return rc;
}

/* The database at `path` with its -wal file `wal`, copied into a private
 * folder ($TMPDIR or /tmp) and read into memory there (SQLite replays
 * the -wal on opening the copy); the folder is removed. 0 with *out, or
 * -1 with *why. */
static int open_private_copy(const char *path, const char *wal, sqlite3 **out, char **why)
{
    *out = NULL;
    const char *tmp = getenv("TMPDIR");
    char *dir = tb_xasprintf("%s/tokbench-ro.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        *why = tb_xasprintf("%s: %s", dir, strerror(errno));
        free(dir);
        return -1;
    }
    char *db_copy = tb_xasprintf("%s/db", dir), *wal_copy = tb_xasprintf("%s/db-wal", dir);
    char *shm_copy = tb_xasprintf("%s/db-shm", dir);
    sqlite3 *db = NULL, *mem = NULL;
    int rc = -1;
    if (copy_file(path, db_copy, why) != 0 || copy_file(wal, wal_copy, why) != 0)
        goto out;
    if (sqlite3_open_v2(db_copy, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
        *why = tb_xasprintf("cannot open database: %s", sqlite3_errmsg(db));
        goto out;
    }
    sqlite3_open(":memory:", &mem);
    sqlite3_backup *b = sqlite3_backup_init(mem, "main", db, "main");
    int brc = b ? sqlite3_backup_step(b, -1) : SQLITE_ERROR;
    sqlite3_backup_finish(b);
    if (brc != SQLITE_DONE) {
        *why = tb_xasprintf("cannot read database: %s", sqlite3_errmsg(db));
        goto out;
    }
    *out = mem;
    mem = NULL;
    rc = 0;
out:
    sqlite3_close(db);
    sqlite3_close(mem);
    unlink(db_copy);
    unlink(wal_copy);
    unlink(shm_copy);
    rmdir(dir);
    free(db_copy);
    free(wal_copy);
    free(shm_copy);
    free(dir);
    return rc;
}

/* A file a reader cannot write: opened read-only, never changed; an
 * older schema is read through a migrated copy in memory (as db merge
 * reads OTHER). 0, or -1 with *why. */
static int open_read_only(const char *path, sqlite3 **out, char **why)
{
    sqlite3 *db = NULL;
    *out = NULL;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        *why = tb_xasprintf("cannot open database: %s", sqlite3_errmsg(db));
        sqlite3_close(db);
        return -1;
    }
    sqlite3_busy_timeout(db, BUSY_TIMEOUT_MS);
    int v = usable_version(db, why);
    char *wal = tb_xasprintf("%s-wal", path);
    if (v < 0 && access(wal, F_OK) != 0) {
        /* A WAL database needs its -shm file, which a folder we cannot
         * write cannot get. Without a -wal file no process is writing
         * it (a writer keeps one), so it can be read as immutable. */
        free(*why);
        *why = NULL;
        sqlite3_close(db);
        db = NULL;
        tb_str uri = {0};
        tb_str_append(&uri, "file:");
        for (const char *c = path; *c; c++)
            if (*c == '%' || *c == '?' || *c == '#')
                tb_str_appendf(&uri, "%%%02X", (unsigned char)*c);
            else
                tb_str_appendn(&uri, c, 1);
        tb_str_append(&uri, "?immutable=1");
        if (sqlite3_open_v2(uri.s, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL) == SQLITE_OK)
            v = usable_version(db, why);
        else
            *why = tb_xasprintf("cannot open database: %s", sqlite3_errmsg(db));
        tb_str_free(&uri);
    }
    if (v < 0 && access(wal, F_OK) == 0) {
        /* A -wal file without the -shm it needs, in a folder we cannot
         * write: SQLite cannot open it read-only (wal.html, "Read-Only
         * Databases"), and `immutable` would ignore the committed
         * transactions in the -wal. No writer holds it (a writer keeps a
         * -shm file), so a private copy of both files recovers the -wal
         * as opening it here would; the copy is read into memory below
         * and removed. */
        sqlite3_close(db);
        db = NULL;
        char *why2 = NULL;
        if (open_private_copy(path, wal, &db, &why2) == 0) {
            free(*why);
            *why = NULL;
            v = usable_version(db, why); /* db is in memory now */
        } else {
            char *w = tb_xasprintf("%s (it has a -wal file but no -shm file, and a private copy failed: %s)", *why,
                                   why2);
            free(*why);
            free(why2);
            *why = w;
        }
    }
    free(wal);
    if (v == 0) { /* another program's is refused; an empty one is migrated in memory below */
        int f = foreign_tables(db, why);
        v = f == 1 || f < 0 ? -1 : v;
    }
    if (v < 0) {
        sqlite3_close(db);
        return -1;
    }
    if (v == (int)tb_n_migrations) { /* the file itself, or the copy in memory */
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
    if (rc != SQLITE_DONE || tb_store_migrate(mem, (int)tb_n_migrations, &merr) != 0) {
        *why = tb_xasprintf("read-only, and its schema version %d cannot be brought up to %d in memory: %s", v,
                            (int)tb_n_migrations, merr ? merr : sqlite3_errmsg(mem));
        free(merr);
        sqlite3_close(mem);
        return -1;
    }
    *out = mem;
    return 0;
}

/* The folder a database's -wal and -shm files go in (malloc'd): path's
 * folder, "." for a bare name, "/" for "/x.db". */
static char *folder_of(const char *path)
{
    char *dir = tb_xstrdup(path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        strcpy(dir, ".");
    else
        slash[slash == dir] = '\0';
    return dir;
}

int tb_store_open_reader(const char *path, tb_store **out, char **err)
{
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        if (errno == ENOENT)
            *err = tb_xasprintf("%s: no such database (tokbench run SUITE --db %s makes one; --db FILE or "
                                "$TOKBENCH_DB names another)",
                                path, path);
        else
            *err = tb_xasprintf("%s: cannot open database: %s", path, strerror(errno));
        return -1;
    }
    if (S_ISDIR(sb.st_mode)) {
        *err = tb_xasprintf("%s: is a folder, not a database", path);
        return -1;
    }
    /* Writable: the file, and its folder for the -wal and -shm files. */
    char *dir = folder_of(path);
    int writable = access(path, W_OK) == 0 && access(dir, W_OK) == 0;
    free(dir);
    if (writable)
        return open_db(path, SQLITE_OPEN_READWRITE, out, err);
    sqlite3 *db;
    char *why = NULL;
    if (open_read_only(path, &db, &why) != 0) {
        *err = tb_xasprintf("%s: %s", path, why);
        free(why);
        return -1;
    }
    *out = new_store(db);
    return 0;
}

/* Why a writer cannot have the database at path, or NULL: a folder, a
 * folder that does not exist, a file or folder it may not write (the -wal
 * and -shm files go beside the database), in the system's words
 * (SQLite's own is "unable to open database file" for each). */
static char *not_writable(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return tb_xasprintf("%s: is a folder, not a database", path);
    char *dir = folder_of(path);
    char *why = NULL;
    if (stat(dir, &sb) != 0)
        why = tb_xasprintf("%s: its folder %s %s", path, dir, errno == ENOENT ? "does not exist" : strerror(errno));
    else if (!S_ISDIR(sb.st_mode))
        why = tb_xasprintf("%s: %s is not a folder", path, dir);
    else if (access(dir, W_OK) != 0)
        why = tb_xasprintf("%s: cannot write in its folder %s (the database's -wal and -shm files go there): %s",
                           path, dir, strerror(errno));
    else if (access(path, F_OK) == 0 && access(path, W_OK) != 0)
        why = tb_xasprintf("%s: cannot write the database: %s", path, strerror(errno));
    free(dir);
    return why;
}

int tb_store_open(const char *path, tb_store **out, char **err)
{
    *out = NULL;
    if ((*err = not_writable(path)) != NULL)
        return -1;
    return open_db(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, out, err);
}

/* Open with `flags` (read-write, with or without create), migrate, mark
 * the stale sessions. */
static int open_db(const char *path, int flags, tb_store **out, char **err)
{
    *out = NULL;
    sqlite3 *db = NULL;
    int rc = sqlite3_open_v2(path, &db, flags, NULL);
    if (rc != SQLITE_OK) {
        *err = tb_xasprintf("%s: cannot open database: %s", path, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
        sqlite3_close(db);
        return -1;
    }
    sqlite3_busy_timeout(db, BUSY_TIMEOUT_MS);
    /* Check the version before anything writes: a newer database, or a
     * file that is not one, is refused untouched (switching to WAL would
     * already rewrite the header and leave -wal/-shm files). */
    char *why = NULL;
    int v = usable_version(db, &why);
    /* version 0: a writer makes a file tokbench's when it holds nothing
     * (another program's tables are left alone); a reader (no
     * SQLITE_OPEN_CREATE) never makes one (REPORTS.md): it reads an
     * empty file (a new one, or one a run is making now) as an empty
     * database in memory, the file untouched */
    int empty = v == 0 && foreign_tables(db, &why) == 0;
    if (v < 0 || why) {
        *err = tb_xasprintf("%s: %s", path, why);
        free(why);
        sqlite3_close(db);
        return -1;
    }
    if (empty && !(flags & SQLITE_OPEN_CREATE)) {
        sqlite3_close(db);
        db = NULL;
        if (sqlite3_open(":memory:", &db) != SQLITE_OK || tb_store_migrate(db, (int)tb_n_migrations, &why) != 0) {
            *err = tb_xasprintf("%s: an empty file, read as an empty database: %s", path,
                                why ? why : sqlite3_errmsg(db));
            free(why);
            sqlite3_close(db);
            return -1;
        }
        *out = new_store(db);
        return 0;
    }
    char *msg = NULL;
    if (exec_retry(db, "PRAGMA journal_mode = WAL", &msg) != SQLITE_OK ||
        sqlite3_exec(db, "PRAGMA foreign_keys = ON", NULL, NULL, &msg) != SQLITE_OK) {
        *err = tb_xasprintf("%s: %s", path, msg ? msg : sqlite3_errmsg(db));
        sqlite3_free(msg);
        sqlite3_close(db);
        return -1;
    }
    if (tb_store_migrate(db, (int)tb_n_migrations, &why) != 0) {
        *err = tb_xasprintf("%s: %s", path, why);
        free(why);
        sqlite3_close(db);
        return -1;
    }
    tb_store *st = new_store(db);
    char *ids = NULL;
    int stale = mark_stale_sessions(db, &ids);
    if (stale)
        st->notice = tb_xasprintf("%s: session%s %s marked interrupted: left running by a process that is gone"
                                  " (killed, or the machine restarted)", path, stale > 1 ? "s" : "", ids);
    free(ids);
    *out = st;
    return 0;
}

const char *tb_store_notice(const tb_store *st)
{
    return st->notice;
}

void tb_store_close(tb_store *st)
{
    if (!st)
        return;
    sqlite3_close(st->db);
    free(st->notice);
    free(st);
}

sqlite3 *tb_store_db(tb_store *st)
{
    return st->db;
}

/* --------------------------------------------------------- binding */

static void bind_text(sqlite3_stmt *q, int i, const char *s)
{
    if (s)
        sqlite3_bind_text(q, i, s, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(q, i);
}

void tb_store_set_secrets(tb_store *st, const char *const *secrets, size_t n)
{
    st->secrets = secrets;
    st->n_secrets = n;
}

/* A free text (an error, an output, the suite's text): bound redacted
 * (util/redact.h), so no secret enters the database by any path. */
static void bind_free_text(const tb_store *st, sqlite3_stmt *q, int i, const char *s)
{
    char *r = tb_xredact(s, st->secrets, st->n_secrets);
    bind_text(q, i, r);
    free(r);
}

/* NaN and infinities are stored as NULL: "not measured". */
static void bind_real(sqlite3_stmt *q, int i, double v)
{
    if (isfinite(v))
        sqlite3_bind_double(q, i, v);
    else
        sqlite3_bind_null(q, i);
}

/* Negative values mean "unknown" for these columns. */
static void bind_opt_int(sqlite3_stmt *q, int i, int64_t v)
{
    if (v >= 0)
        sqlite3_bind_int64(q, i, v);
    else
        sqlite3_bind_null(q, i);
}

/* SQLite's message for the statement that just failed, copied at once:
 * finalizing any other statement afterwards resets it ("not an error"). */
static char *db_error(tb_store *st)
{
    return tb_xstrdup(sqlite3_errmsg(st->db));
}

/* Step an INSERT and finalize it: the new row's id, or -1 with *err. */
static int64_t exec_insert(tb_store *st, sqlite3_stmt *q, char **err)
{
    int rc = sqlite3_step(q);
    if (rc != SQLITE_DONE)
        *err = db_error(st);
    sqlite3_finalize(q);
    return rc == SQLITE_DONE ? sqlite3_last_insert_rowid(st->db) : -1;
}

/* A statement of this file, or NULL with *err. The schema is this
 * tokbench's own (migrated at open), so a plain SQL error (SQLITE_ERROR:
 * no such table or column, a syntax error) is a bug here, and the message
 * says so with the statement; any other failure (busy, I/O, a corrupt
 * file) is the database's, in SQLite's words. */
static sqlite3_stmt *prepare(tb_store *st, const char *sql, char **err)
{
    sqlite3_stmt *q = NULL;
    int rc = sqlite3_prepare_v2(st->db, sql, -1, &q, NULL);
    if (rc != SQLITE_OK) {
        if ((rc & 0xff) == SQLITE_ERROR)
            *err = tb_xasprintf("internal SQL error: %s (in: %s)", sqlite3_errmsg(st->db), sql);
        else
            *err = db_error(st);
        return NULL;
    }
    return q;
}

/* ----------------------------------------------------------- transactions */

/* Savepoint name of a write nested in the caller's transaction: SQLite
 * releases or rolls back to the innermost of that name, so writers nest
 * to any depth. */
#define TXN_SAVEPOINT "tb_store_write"

int tb_store_txn_begin(tb_store *st, tb_store_txn *t, char **err)
{
    t->nested = !sqlite3_get_autocommit(st->db);
    /* IMMEDIATE: take the write lock now; a deferred transaction that
     * reads first may find it cannot write (SQLITE_BUSY, no retry) */
    if (sqlite3_exec(st->db, t->nested ? "SAVEPOINT " TXN_SAVEPOINT : "BEGIN IMMEDIATE", NULL, NULL, NULL) ==
        SQLITE_OK)
        return 0;
    *err = tb_xasprintf("cannot start a transaction: %s", sqlite3_errmsg(st->db));
    return -1;
}

int tb_store_txn_end(tb_store *st, const tb_store_txn *t, int ok, char **err)
{
    if (ok && sqlite3_exec(st->db, t->nested ? "RELEASE " TXN_SAVEPOINT : "COMMIT", NULL, NULL, NULL) == SQLITE_OK)
        return 0;
    if (ok)
        *err = tb_xasprintf("commit failed: %s", sqlite3_errmsg(st->db));
    /* fails harmlessly where SQLite rolled the transaction back itself */
    sqlite3_exec(st->db, t->nested ? "ROLLBACK TO " TXN_SAVEPOINT "; RELEASE " TXN_SAVEPOINT : "ROLLBACK", NULL, NULL,
                 NULL);
    return -1;
}

/* The machine row of `fingerprint`: 1 with *id, 0 when there is none,
 * -1 with *why. */
static int machine_id(tb_store *st, const char *fingerprint, int64_t *id, char **why)
{
    sqlite3_stmt *q = prepare(st, "SELECT id FROM machine WHERE fingerprint = ?", why);
    if (!q)
        return -1;
    bind_text(q, 1, fingerprint);
    int rc = sqlite3_step(q), found = rc == SQLITE_ROW;
    if (found)
        *id = sqlite3_column_int64(q, 0);
    else if (rc != SQLITE_DONE)
        *why = db_error(st);
    sqlite3_finalize(q);
    return found ? 1 : rc == SQLITE_DONE ? 0 : -1;
}

/* tb_store_machine's work; -1 with *why, which the caller words. */
static int64_t store_machine(tb_store *st, const tb_machine_info *m, char **why)
{
    int64_t id = -1;
    int found = machine_id(st, m->fingerprint, &id, why);
    if (found != 0)
        return found > 0 ? id : -1;
    /* ON CONFLICT DO NOTHING: another process may insert the same machine
     * between our SELECT and INSERT; then its row is ours too. */
    sqlite3_stmt *q = prepare(st, "INSERT INTO machine (fingerprint, hostname, cpu_model, cpu_cores, ram_bytes, os,"
                                  " kernel, arch, gpu_count, gpu_name, gpu_memory_bytes, gpu_driver,"
                                  " cuda_driver_version, compute_capability, nvml_status, info_json)"
                                  " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT (fingerprint) DO NOTHING",
                              why);
    if (!q)
        return -1;
    char *json = tb_machine_info_json(m);
    int g = m->gpu_count > 0;
    bind_text(q, 1, m->fingerprint);
    bind_text(q, 2, m->hostname);
    bind_text(q, 3, m->cpu_model);
    sqlite3_bind_int(q, 4, m->cpu_cores);
    sqlite3_bind_int64(q, 5, (int64_t)m->ram_bytes);
    bind_text(q, 6, m->os);
    bind_text(q, 7, m->kernel);
    bind_text(q, 8, m->arch);
    sqlite3_bind_int(q, 9, m->gpu_count);
    bind_text(q, 10, g ? m->gpus[0].name : NULL);
    if (g)
        sqlite3_bind_int64(q, 11, (int64_t)m->gpus[0].memory_bytes);
    bind_text(q, 12, m->gpu_driver[0] ? m->gpu_driver : NULL);
    bind_text(q, 13, m->cuda_driver_version[0] ? m->cuda_driver_version : NULL);
    bind_text(q, 14, g ? m->gpus[0].compute_capability : NULL);
    bind_text(q, 15, m->nvml_status);
    bind_text(q, 16, json ? json : "{}");
    free(json);
    int rc = sqlite3_step(q);
    if (rc != SQLITE_DONE)
        *why = db_error(st);
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE)
        return -1;
    found = machine_id(st, m->fingerprint, &id, why);
    if (found == 0) /* inserted, or there already: it cannot be missing */
        *why = tb_xstrdup("the row inserted is not there");
    return found > 0 ? id : -1;
}

int64_t tb_store_machine(tb_store *st, const tb_machine_info *m, char **err)
{
    char *why = NULL;
    int64_t id = store_machine(st, m, &why);
    if (id < 0) {
        *err = tb_xasprintf("storing machine %s failed: %s", m->hostname[0] ? m->hostname : "(no host name)", why);
        free(why);
    }
    return id;
}

/* A random (version 4) UUID: sessions keep it when databases are merged. */
static void random_uuid(char out[40])
{
    unsigned char b[16];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
        uint64_t t = (uint64_t)tb_now_ns();
        for (int i = 0; i < 16; i++)
            b[i] = (unsigned char)(t >> ((i % 8) * 8)) ^ (unsigned char)(i * 37);
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    snprintf(out, 40, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
             b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

int64_t tb_store_session_begin(tb_store *st, const tb_session_info *si, char **err)
{
    char *why = NULL;
    sqlite3_stmt *q = prepare(st, "INSERT INTO session (uuid, machine_id, suite_name, suite_path, suite_sha256,"
                                  " suite_text, tokbench_version, git_commit, compiler, cuda_build_version,"
                                  " command_line, started_at, status, warmup, repeat, seed, owner_boot_id,"
                                  " owner_pid_ns, owner_pid, owner_start_ticks, config_sha256, config_json)"
                                  " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,'running',?,?,?,?,?,?,?,?,?)",
                              &why);
    if (!q) {
        *err = tb_xasprintf("storing the session failed: %s", why);
        free(why);
        return -1;
    }
    tb_owner me;
    owner_self(&me);
    bind_text(q, 16, me.boot_id[0] ? me.boot_id : NULL);
    bind_text(q, 17, me.pid_ns[0] ? me.pid_ns : NULL);
    sqlite3_bind_int64(q, 18, me.pid);
    bind_opt_int(q, 19, me.start_ticks);
    char uuid[40], now[32], sha[65];
    random_uuid(uuid);
    tb_utc_timestamp(now);
    const tb_suite *s = si->suite;
    char *text = tb_xredact(s->text, st->secrets, st->n_secrets); /* the sha256 of what is stored */
    tb_sha256_hex(text, strlen(text), sha);
    bind_text(q, 1, uuid);
    sqlite3_bind_int64(q, 2, si->machine_id);
    bind_text(q, 3, s->name);
    bind_text(q, 4, s->path);
    bind_text(q, 5, sha);
    bind_text(q, 6, text);
    free(text);
    bind_text(q, 7, TB_VERSION);
    bind_text(q, 8, TB_GIT_COMMIT);
#ifdef __clang__
    bind_text(q, 9, "clang " __clang_version__);
#else
    bind_text(q, 9, "gcc " __VERSION__);
#endif
    bind_text(q, 10, TB_CUDA_BUILD_VERSION);
    bind_free_text(st, q, 11, si->command_line);
    bind_text(q, 12, now);
    sqlite3_bind_int(q, 13, s->warmup);
    sqlite3_bind_int(q, 14, s->repeat);
    sqlite3_bind_int64(q, 15, (int64_t)s->seed);
    bind_text(q, 20, si->config_sha256);
    bind_text(q, 21, si->config_json);
    int64_t id = exec_insert(st, q, &why);
    if (id < 0) {
        *err = tb_xasprintf("storing the session failed: %s", why);
        free(why);
    }
    return id;
}

int tb_store_session_shard(tb_store *st, int64_t session, const tb_session_shard *sh, char **err)
{
    char *why = NULL;
    sqlite3_stmt *q = prepare(st, "UPDATE session SET shard_index = ?, shard_count = ?, start_at = ?,"
                                  " clock_offset_ns = ?, start_late_ns = ? WHERE id = ?", &why);
    if (q) {
        if (sh->shard_count)
            sqlite3_bind_int64(q, 1, sh->shard_index), sqlite3_bind_int64(q, 2, sh->shard_count);
        bind_text(q, 3, sh->start_at);
        sqlite3_bind_int64(q, 4, sh->clock_offset_ns);
        if (sh->start_at && sh->start_late_ns >= 0)
            sqlite3_bind_int64(q, 5, sh->start_late_ns);
        sqlite3_bind_int64(q, 6, session);
        if (sqlite3_step(q) != SQLITE_DONE)
            why = db_error(st);
        else if (sqlite3_changes(st->db) != 1)
            why = tb_xasprintf("no session %lld", (long long)session);
        sqlite3_finalize(q);
    }
    if (why) {
        *err = tb_xasprintf("storing the session's clock failed: %s", why);
        free(why);
        return -1;
    }
    return 0;
}

int tb_store_session_end(tb_store *st, int64_t session, const char *status, char **err)
{
    char *why = NULL;
    sqlite3_stmt *q = prepare(st, "UPDATE session SET status = ?, finished_at = ? WHERE id = ?", &why);
    if (q) {
        char now[32];
        tb_utc_timestamp(now);
        bind_text(q, 1, status);
        bind_text(q, 2, now);
        sqlite3_bind_int64(q, 3, session);
        if (sqlite3_step(q) != SQLITE_DONE)
            why = db_error(st);
        else if (sqlite3_changes(st->db) != 1) /* which the caller should hear */
            why = tb_xstrdup("no such session");
        sqlite3_finalize(q);
    }
    if (!why)
        return 0;
    *err = tb_xasprintf("ending session %lld as %s failed: %s", (long long)session, status, why);
    free(why);
    return -1;
}

int tb_store_session_fail(tb_store *st, int64_t session, const char *error, char **err)
{
    char *why = NULL;
    sqlite3_stmt *q = prepare(st, "UPDATE session SET status = 'failed', finished_at = ?, error = ? WHERE id = ?", &why);
    if (q) {
        char now[32];
        tb_utc_timestamp(now);
        bind_text(q, 1, now);
        bind_free_text(st, q, 2, error);
        sqlite3_bind_int64(q, 3, session);
        if (sqlite3_step(q) != SQLITE_DONE)
            why = db_error(st);
        else if (sqlite3_changes(st->db) != 1)
            why = tb_xstrdup("no such session");
        sqlite3_finalize(q);
    }
    if (!why)
        return 0;
    *err = tb_xasprintf("ending session %lld as failed: %s", (long long)session, why);
    free(why);
    return -1;
}

int64_t tb_store_backend(tb_store *st, int64_t session, const tb_plan_backend *pb, char **err)
{
    char *why = NULL;
    sqlite3_stmt *q = prepare(st, "INSERT INTO backend (session_id, label, plugin, plugin_path, plugin_version,"
                                  " abi_major, capabilities, model, options_json) VALUES (?,?,?,?,?,?,?,?,?)",
                              &why);
    if (!q) {
        *err = tb_xasprintf("storing backend %s failed: %s", pb->sb->label, why);
        free(why);
        return -1;
    }
    char *caps = tb_caps_string(pb->plugin.ops->capabilities);
    sqlite3_bind_int64(q, 1, session);
    bind_text(q, 2, pb->sb->label);
    bind_text(q, 3, pb->plugin.ops->name);
    bind_text(q, 4, pb->plugin.path);
    bind_text(q, 5, pb->plugin.ops->version);
    sqlite3_bind_int(q, 6, (int)pb->plugin.ops->abi_major);
    bind_text(q, 7, caps);
    bind_text(q, 8, pb->sb->model);
    bind_text(q, 9, pb->options_json ? pb->options_json : "{}");
    free(caps);
    int64_t id = exec_insert(st, q, &why);
    if (id < 0) {
        *err = tb_xasprintf("storing backend %s failed: %s", pb->sb->label, why);
        free(why);
    }
    return id;
}

int tb_store_backend_info(tb_store *st, int64_t backend_id, const char *info_json, char **err)
{
    char *why = NULL;
    /* json() normalizes, and rejects text that is not JSON. */
    sqlite3_stmt *q = prepare(st, "UPDATE backend SET info_json = CASE WHEN json_valid(?1) THEN json(?1)"
                                  " ELSE json_object('invalid_describe', ?1) END WHERE id = ?2",
                              &why);
    if (q) {
        bind_text(q, 1, info_json);
        sqlite3_bind_int64(q, 2, backend_id);
        if (sqlite3_step(q) != SQLITE_DONE)
            why = db_error(st);
        else if (sqlite3_changes(st->db) != 1)
            why = tb_xstrdup("no such backend");
        sqlite3_finalize(q);
    }
    if (!why)
        return 0;
    *err = tb_xasprintf("storing the description (describe()) of backend row %lld failed: %s",
                        (long long)backend_id, why);
    free(why);
    return -1;
}

int64_t tb_store_search_begin(tb_store *st, int64_t session, int64_t backend_id, size_t ordinal, const char *kind,
                              const char *limits_json, char **err)
{
    char *why = NULL;
    int64_t id = -1;
    sqlite3_stmt *q = prepare(st, "INSERT INTO search (session_id, backend_id, ordinal, kind, limits_json, status)"
                                  " VALUES (?,?,?,?,json(?),'running')",
                              &why);
    if (q) {
        sqlite3_bind_int64(q, 1, session);
        sqlite3_bind_int64(q, 2, backend_id);
        sqlite3_bind_int64(q, 3, (int64_t)ordinal);
        bind_text(q, 4, kind);
        bind_text(q, 5, limits_json);
        if (sqlite3_step(q) == SQLITE_DONE)
            id = sqlite3_last_insert_rowid(st->db);
        else
            why = db_error(st);
        sqlite3_finalize(q);
    }
    if (id < 0) {
        *err = tb_xasprintf("storing the %s search of case #%zu failed: %s", kind, ordinal, why ? why : "?");
        free(why);
    }
    return id;
}

int tb_store_search_no_verdict(tb_store *st, int64_t id, size_t ordinal, char **err)
{
    sqlite3_stmt *q = NULL;
    int rc = sqlite3_prepare_v2(st->db,
                                "UPDATE bench_case SET search_pass = NULL WHERE search_id = ? AND ordinal = ?"
                                " AND search_role = 'probe'",
                                -1, &q, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(q, 1, id);
        sqlite3_bind_int64(q, 2, (sqlite3_int64)ordinal);
        rc = sqlite3_step(q);
    }
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE) {
        *err = tb_xasprintf("clearing the verdict of search %lld's probe %zu failed: %s", (long long)id, ordinal,
                            sqlite3_errmsg(st->db));
        return -1;
    }
    return 0;
}

int tb_store_search_end(tb_store *st, int64_t id, const tb_search_result *r, char **err)
{
    char *why = NULL;
    sqlite3_stmt *q = prepare(st, "UPDATE search SET status = ?, sync_rate = ?, max_rate = ?, slo_rate = ?, error = ?"
                                  " WHERE id = ?",
                              &why);
    if (q) {
        bind_text(q, 1, r->status);
        bind_real(q, 2, r->sync_rate);
        bind_real(q, 3, r->max_rate);
        bind_real(q, 4, r->slo_rate);
        bind_free_text(st, q, 5, r->error);
        sqlite3_bind_int64(q, 6, id);
        if (sqlite3_step(q) != SQLITE_DONE)
            why = db_error(st);
        sqlite3_finalize(q);
    }
    if (!why)
        return 0;
    *err = tb_xasprintf("storing the end of search %lld failed: %s", (long long)id, why);
    free(why);
    return -1;
}

#define SC(col, kind, field) {#col, TB_COL_##kind, offsetof(tb_sample_record, field), #col, 0}
#define SC_LOCAL(col, kind, field) {#col, TB_COL_##kind, offsetof(tb_sample_record, field), NULL, 0}
const tb_store_column tb_sample_columns[] = {
    SC(repetition, U32, repetition),
    SC(warmup, INT, warmup),
    SC(n_requests, U32, n_requests),
    SC(wall_ns, I64, m.wall_ns),
    SC(prefill_ns, I64_OPT, prefill_ns),
    SC(decode_ns, I64_OPT, decode_ns),
    SC(output_tokens, U64, m.output_tokens),
    SC(recount_tokens, I64_OPT, recount_tokens),
    SC(aggregate_tps, REAL, m.aggregate_tps),
    SC(decode_tps, REAL, m.decode_tps),
    SC(forward_passes, I64_POS, forward_passes),
    SC(tokens_per_forward, REAL, m.tokens_per_forward),
    SC(peak_device_bytes, I64_OPT, peak_device_bytes),
    SC(energy_mj, I64_OPT, energy_mj),
    SC(n_emissions, U32, n_emissions),
    SC(runner_ns, I64, runner_ns),
    SC_LOCAL(start_ns, I64, start_ns),
    {"client_busy", TB_COL_SPECIAL, 0, NULL, 0}, /* percent of the call; 0: not reported */
    SC(draft_ns, I64_POS, draft_ns),
};
const size_t tb_n_sample_columns = TB_ARRAY_LEN(tb_sample_columns);

#define RC(col, kind, field) {#col, TB_COL_##kind, offsetof(tb_request_record, field), #col, 0}
#define RC_LOCAL(col, kind, field) {#col, TB_COL_##kind, offsetof(tb_request_record, field), NULL, 0}
const tb_store_column tb_request_columns[] = {
    {"idx", TB_COL_SPECIAL, 0, "idx", 0}, /* its slot in the call */
    {"status", TB_COL_SPECIAL, 0, "status", 0}, /* "ok" | "failed" */
    RC(error, TEXT, error),
    RC(submit_offset_ns, I64, submit_offset_ns),
    RC(ttft_ns, I64, m.ttft_ns),
    RC(e2e_ns, I64, m.e2e_ns),
    RC(tpot_ns, REAL, m.tpot_ns),
    RC(tps, REAL, m.tps),
    {"requested_tokens", TB_COL_SPECIAL, 0, "requested_tokens", 0}, /* max_tokens, else the case's max_new_tokens */
    RC(output_tokens, U32, n_out),
    RC(output_ids, I64_OPT, output_ids),
    RC(recount_tokens, I32_OPT, recount),
    RC(count_mismatch, INT, count_mismatch), /* TB_COUNT_* (tb_count_mismatch) */
    RC(steps_done, U32_OPT, steps_done),
    RC(answer_tokens, U32_KNOWN, answer_tokens),
    RC(output_hash, HASH, output_hash),
    RC(prompt_hash, HASH, prompt_hash),
    RC(prompt_tokens, U32_OPT, prompt_tokens),
    {"emissions_json", TB_COL_SPECIAL, 0, "emissions", 1}, /* NULL: "[]" */
    RC_LOCAL(prompt_idx, I32_OPT, prompt_idx),
    RC_LOCAL(scored, INT, scored),
    RC_LOCAL(output_text, TEXT, output_text),
    RC_LOCAL(blocks_done, U32_OPT, blocks_done),
    /* speculative decoding (tb_spec_counts): NULL when not speculative */
    {"spec_verifications", TB_COL_SPECIAL, 0, "spec_verifications", 0},
    {"spec_drafted", TB_COL_SPECIAL, 0, "spec_drafted", 0},
    {"spec_accepted", TB_COL_SPECIAL, 0, "spec_accepted", 0},
    {"spec_draft_len", TB_COL_SPECIAL, 0, "spec_draft_len", 0},
    {"spec_at", TB_COL_SPECIAL, 0, "spec_at", 1}, /* [[drafted_at, accepted_at], ...] */
    {"acceptance_length", TB_COL_SPECIAL, 0, "acceptance_length", 0},
    {"acceptance_rate", TB_COL_SPECIAL, 0, "acceptance_rate", 0},
    /* canvas models (migration 16): NULL when the request has no canvas
     * records; its stream's chunks (NULL: not streamed) */
    RC(canvases, I64_POS, canvases),
    RC(canvas_steps, I64_POS, canvas_steps),
    RC(canvas_committed, I64_POS, canvas_committed),
    RC(canvas_positions, I64_POS, canvas_positions),
    {"canvases_json", TB_COL_TEXT, offsetof(tb_request_record, canvases_json), "canvas_list", 1},
    RC(tokens_per_chunk, REAL, tokens_per_chunk),
    RC(chunk_gap_ms, REAL, chunk_gap_ms),
    RC(bursty, INT, bursty),
};
const size_t tb_n_request_columns = TB_ARRAY_LEN(tb_request_columns);

/* A request's speculative column (migration 15), NULL when it was not
 * speculative; the request's acceptance figures as metrics.c defines them. */
static void bind_spec(sqlite3_stmt *q, int i, const char *column, const tb_spec_counts *c)
{
    if (!tb_spec_any(c)) {
        sqlite3_bind_null(q, i);
        return;
    }
    if (strcmp(column, "spec_verifications") == 0)
        sqlite3_bind_int64(q, i, c->verifications);
    else if (strcmp(column, "spec_drafted") == 0)
        bind_opt_int(q, i, c->drafted ? (int64_t)c->drafted : -1);
    else if (strcmp(column, "spec_accepted") == 0)
        sqlite3_bind_int64(q, i, c->accepted);
    else if (strcmp(column, "spec_draft_len") == 0)
        bind_opt_int(q, i, c->draft_len ? (int64_t)c->draft_len : -1);
    else if (strcmp(column, "acceptance_length") == 0)
        bind_real(q, i, tb_acceptance_length(c));
    else if (strcmp(column, "acceptance_rate") == 0)
        bind_real(q, i, tb_acceptance_rate(c));
    else { /* spec_at */
        tb_str js = {0};
        tb_str_append(&js, "[");
        for (uint32_t p = 0; p < c->draft_len && p < TB_SPEC_MAX_DRAFT; p++)
            tb_str_appendf(&js, "%s[%u,%u]", p ? "," : "", c->drafted_at[p], c->accepted_at[p]);
        tb_str_append(&js, "]");
        if (c->draft_len)
            sqlite3_bind_text(q, i, js.s, (int)js.len, SQLITE_TRANSIENT);
        else
            sqlite3_bind_null(q, i);
        tb_str_free(&js);
    }
}

/* Bind column `col` at parameter i from the record at `rec` (its field
 * at col->offset); a special one (offset unused) from the record and the
 * context: the case, the request's slot idx. */
static void bind_column(const tb_store *st, sqlite3_stmt *q, int i, const tb_store_column *col, const void *rec,
                        const tb_case_record *cr, uint32_t idx)
{
    const char *p = (const char *)rec + col->offset;
    int64_t i64;
    int32_t i32;
    uint32_t u32;
    uint64_t u64;
    int iv;
    double d;
    const char *t;
    switch (col->kind) {
    case TB_COL_I64:
    case TB_COL_I64_OPT:
    case TB_COL_I64_POS:
        memcpy(&i64, p, sizeof i64);
        if ((col->kind == TB_COL_I64_OPT && i64 < 0) || (col->kind == TB_COL_I64_POS && i64 <= 0))
            sqlite3_bind_null(q, i);
        else
            sqlite3_bind_int64(q, i, i64);
        return;
    case TB_COL_I32_OPT:
        memcpy(&i32, p, sizeof i32);
        bind_opt_int(q, i, i32);
        return;
    case TB_COL_U32:
    case TB_COL_U32_OPT:
    case TB_COL_U32_KNOWN:
        memcpy(&u32, p, sizeof u32);
        if ((col->kind == TB_COL_U32_OPT && u32 == 0) || (col->kind == TB_COL_U32_KNOWN && u32 == TB_UNKNOWN_COUNT))
            sqlite3_bind_null(q, i);
        else
            sqlite3_bind_int64(q, i, u32);
        return;
    case TB_COL_U64:
        memcpy(&u64, p, sizeof u64);
        sqlite3_bind_int64(q, i, (int64_t)u64);
        return;
    case TB_COL_INT:
        memcpy(&iv, p, sizeof iv);
        sqlite3_bind_int(q, i, iv);
        return;
    case TB_COL_REAL:
        memcpy(&d, p, sizeof d);
        bind_real(q, i, d);
        return;
    case TB_COL_TEXT: /* errors, output texts */
        memcpy(&t, p, sizeof t);
        bind_free_text(st, q, i, t);
        return;
    case TB_COL_HASH: {
        memcpy(&u64, p, sizeof u64);
        char hex[17];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)u64);
        bind_text(q, i, u64 ? hex : NULL);
        return;
    }
    case TB_COL_SPECIAL:
        break;
    }
    if (strcmp(col->column, "client_busy") == 0) {
        const tb_sample_record *s = rec;
        bind_real(q, i, s->client_busy > 0 ? 100.0 * s->client_busy : NAN);
        return;
    }
    const tb_request_record *r = rec;
    if (strncmp(col->column, "spec_", 5) == 0 || strncmp(col->column, "acceptance_", 11) == 0) {
        bind_spec(q, i, col->column, &r->spec);
        return;
    }
    if (strcmp(col->column, "idx") == 0)
        sqlite3_bind_int(q, i, (int)idx);
    else if (strcmp(col->column, "status") == 0)
        bind_text(q, i, r->status == 0 ? "ok" : "failed");
    else if (strcmp(col->column, "requested_tokens") == 0) /* 32-bit unsigned: never wrapped */
        sqlite3_bind_int64(q, i, r->max_tokens ? r->max_tokens : cr->c->max_new_tokens);
    else /* emissions_json */
        bind_text(q, i, r->emissions_json ? r->emissions_json : "[]");
}

/* "INSERT INTO table (parent, col, ...) VALUES (?,...)" of a registry. */
static sqlite3_stmt *prepare_columns(tb_store *st, const char *table, const char *parent,
                                     const tb_store_column *cols, size_t n, char **why)
{
    tb_str sql = {0};
    tb_str_appendf(&sql, "INSERT INTO %s (%s", table, parent);
    for (size_t k = 0; k < n; k++)
        tb_str_appendf(&sql, ", %s", cols[k].column);
    tb_str_append(&sql, ") VALUES (?");
    for (size_t k = 0; k < n; k++)
        tb_str_append(&sql, ",?");
    tb_str_append(&sql, ")");
    sqlite3_stmt *q = prepare(st, sql.s, why);
    tb_str_free(&sql);
    return q;
}

static int insert_samples(tb_store *st, int64_t case_id, const tb_case_record *rec, char **why)
{
    /* Each prepared only when the one before it was: *why is set once. */
    sqlite3_stmt *qs = NULL, *qr = NULL, *qsc = NULL;
    qs = prepare_columns(st, "sample", "case_id", tb_sample_columns, tb_n_sample_columns, why);
    if (qs)
        qr = prepare_columns(st, "request", "sample_id", tb_request_columns, tb_n_request_columns, why);
    if (qr)
        qsc = prepare(st, "INSERT INTO score (request_id, name, value) VALUES (?,?,?)", why);
    int ok = qs && qr && qsc;
    for (size_t i = 0; ok && i < rec->n_samples; i++) {
        const tb_sample_record *s = &rec->samples[i];
        sqlite3_reset(qs);
        sqlite3_bind_int64(qs, 1, case_id);
        for (size_t k = 0; k < tb_n_sample_columns; k++)
            bind_column(st, qs, 2 + (int)k, &tb_sample_columns[k], s, rec, 0);
        if (sqlite3_step(qs) != SQLITE_DONE) {
            *why = db_error(st);
            ok = 0;
            break;
        }
        int64_t sample_id = sqlite3_last_insert_rowid(st->db);
        for (uint32_t r = 0; r < s->n_requests; r++) {
            const tb_request_record *q = &s->requests[r];
            sqlite3_reset(qr);
            sqlite3_bind_int64(qr, 1, sample_id);
            for (size_t k = 0; k < tb_n_request_columns; k++)
                bind_column(st, qr, 2 + (int)k, &tb_request_columns[k], q, rec, r);
            if (sqlite3_step(qr) != SQLITE_DONE) {
                *why = db_error(st);
                ok = 0;
                break;
            }
            int64_t request_id = sqlite3_last_insert_rowid(st->db);
            for (int k = 0; ok && q->prompt_idx >= 0 && k < TB_N_SCORES; k++) {
                if (isnan(q->scores[k]))
                    continue;
                sqlite3_reset(qsc);
                sqlite3_bind_int64(qsc, 1, request_id);
                bind_text(qsc, 2, tb_score_names[k]);
                sqlite3_bind_double(qsc, 3, q->scores[k]);
                if (sqlite3_step(qsc) != SQLITE_DONE) {
                    *why = db_error(st);
                    ok = 0;
                }
            }
            if (!ok)
                break;
        }
    }
    sqlite3_finalize(qs);
    sqlite3_finalize(qr);
    sqlite3_finalize(qsc);
    return ok ? 0 : -1;
}

/* Metric rows of one case; rows without samples (n = 0) are not stored.
 * `replace`: a row of the same name replaces the stored one. */
/* The case's telemetry series and their points (migration 10). */
static int insert_telemetry(tb_store *st, int64_t case_id, const tb_case_record *rec, char **why)
{
    if (!rec->n_tseries)
        return 0;
    sqlite3_stmt *qs = prepare(st, "INSERT INTO telemetry_series (case_id, source, name) VALUES (?,?,?)", why);
    sqlite3_stmt *qp = qs ? prepare(st, "INSERT OR IGNORE INTO telemetry_point (series_id, t_ns, value) VALUES (?,?,?)",
                                    why)
                          : NULL;
    int64_t *ids = tb_xcalloc(rec->n_tseries, sizeof *ids);
    int ok = qs && qp;
    for (size_t i = 0; ok && i < rec->n_tseries; i++) {
        sqlite3_reset(qs);
        sqlite3_bind_int64(qs, 1, case_id);
        bind_free_text(st, qs, 2, rec->tseries[i].source);
        bind_free_text(st, qs, 3, rec->tseries[i].name);
        if (sqlite3_step(qs) != SQLITE_DONE) {
            *why = db_error(st);
            ok = 0;
        }
        ids[i] = sqlite3_last_insert_rowid(st->db);
    }
    for (size_t i = 0; ok && i < rec->n_tpoints; i++) {
        const tb_telemetry_point *p = &rec->tpoints[i];
        if (p->series >= rec->n_tseries)
            continue;
        sqlite3_reset(qp);
        sqlite3_bind_int64(qp, 1, ids[p->series]);
        sqlite3_bind_int64(qp, 2, p->t_ns);
        bind_real(qp, 3, isfinite(p->value) ? p->value : NAN);
        if (sqlite3_step(qp) != SQLITE_DONE) {
            *why = db_error(st);
            ok = 0;
        }
    }
    free(ids);
    sqlite3_finalize(qs);
    sqlite3_finalize(qp);
    return ok ? 0 : -1;
}

#define STAT(f) {#f, offsetof(tb_stats, f)}
const tb_stat_column tb_stat_columns[] = {STAT(median), STAT(p5), STAT(p95), STAT(mean), STAT(stdev), STAT(cv),
                                          STAT(min),    STAT(max), STAT(ci_lo), STAT(ci_hi), STAT(p90), STAT(p99)};
#undef STAT
const size_t tb_n_stat_columns = TB_ARRAY_LEN(tb_stat_columns);

static int insert_metrics(tb_store *st, int64_t case_id, const tb_metric_record *rows, size_t n, int replace,
                          char **why)
{
    tb_str sql = {0};
    tb_str_appendf(&sql, "INSERT%s INTO metric (case_id, name, unit, n", replace ? " OR REPLACE" : "");
    for (size_t k = 0; k < tb_n_stat_columns; k++)
        tb_str_appendf(&sql, ", %s", tb_stat_columns[k].column);
    tb_str_append(&sql, ") VALUES (?,?,?,?");
    for (size_t k = 0; k < tb_n_stat_columns; k++)
        tb_str_append(&sql, ",?");
    tb_str_append(&sql, ")");
    sqlite3_stmt *q = prepare(st, sql.s, why);
    tb_str_free(&sql);
    if (!q)
        return -1;
    for (size_t i = 0; i < n; i++) {
        const tb_metric_record *m = &rows[i];
        if (m->st.n == 0)
            continue;
        sqlite3_reset(q);
        sqlite3_bind_int64(q, 1, case_id);
        bind_text(q, 2, m->name);
        bind_text(q, 3, m->unit);
        sqlite3_bind_int64(q, 4, (int64_t)m->st.n);
        for (size_t k = 0; k < tb_n_stat_columns; k++) {
            double v;
            memcpy(&v, (const char *)&m->st + tb_stat_columns[k].offset, sizeof v);
            bind_real(q, 5 + (int)k, v);
        }
        if (sqlite3_step(q) != SQLITE_DONE) {
            *why = db_error(st);
            sqlite3_finalize(q);
            return -1;
        }
    }
    sqlite3_finalize(q);
    return 0;
}

int64_t tb_store_case(tb_store *st, const tb_case_record *rec, char **err)
{
    *err = NULL;
    tb_store_txn t;
    if (tb_store_txn_begin(st, &t, err) != 0)
        return -1;
    const tb_case *c = rec->c;
    char *why = NULL;
    /* The dimensions' columns from their table (dims.h), in its order. */
    tb_str sql = {0}, marks = {0};
    tb_str_append(&sql, "INSERT INTO bench_case (session_id, backend_id, ordinal");
    for (int d = 0; d < TB_N_DIMS; d++)
        if (tb_dim_defs[d].column) {
            tb_str_appendf(&sql, ", %s", tb_dim_defs[d].column);
            tb_str_append(&marks, ",?");
        }
    tb_str_appendf(&sql, ", options_json, status, error, started_at, finished_at, case_wall_ns, host_peak_rss_bytes,"
                         " search_id, search_role, search_pass, scrapes, scrapes_failed, scrape_error)"
                         " VALUES (?,?,?%s,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                   marks.s);
    sqlite3_stmt *q = prepare(st, sql.s, &why);
    tb_str_free(&sql);
    tb_str_free(&marks);
    int64_t case_id = -1;
    if (q) {
        int i = 1;
        sqlite3_bind_int64(q, i++, rec->session_id);
        sqlite3_bind_int64(q, i++, rec->backend_id);
        sqlite3_bind_int64(q, i++, (int64_t)c->ordinal);
        for (int d = 0; d < TB_N_DIMS; d++) {
            if (!tb_dim_defs[d].column)
                continue;
            if (tb_case_dim_absent(c, (tb_dim)d)) /* not applicable: NULL */
                sqlite3_bind_null(q, i++);
            else if (tb_dim_defs[d].is_rate)
                sqlite3_bind_double(q, i++, tb_case_dim(c, (tb_dim)d));
            else
                sqlite3_bind_int64(q, i++, (int64_t)tb_case_dim(c, (tb_dim)d));
        }
        bind_text(q, i++, c->swept_json);
        bind_text(q, i++, rec->status);
        bind_free_text(st, q, i++, rec->error);
        bind_text(q, i++, rec->started_at);
        bind_text(q, i++, rec->finished_at);
        bind_opt_int(q, i++, rec->case_wall_ns);
        bind_opt_int(q, i++, rec->host_peak_rss);
        bind_opt_int(q, i++, rec->search_id > 0 ? rec->search_id : -1);
        bind_text(q, i++, rec->search_id > 0 ? rec->search_role : NULL);
        bind_opt_int(q, i++, rec->search_id > 0 && rec->search_pass >= 0 ? rec->search_pass : -1);
        bind_opt_int(q, i++, rec->scrapes > 0 ? rec->scrapes : -1);
        bind_opt_int(q, i++, rec->scrapes > 0 ? rec->scrapes_failed : -1);
        bind_free_text(st, q, i, rec->scrapes > 0 ? rec->scrape_error : NULL);
        if (sqlite3_step(q) == SQLITE_DONE)
            case_id = sqlite3_last_insert_rowid(st->db);
        else
            why = db_error(st);
        sqlite3_finalize(q);
    }
    if (case_id < 0 || insert_samples(st, case_id, rec, &why) != 0 || insert_metrics(st, case_id, rec->metrics, rec->n_metrics, 0, &why) != 0 ||
        insert_telemetry(st, case_id, rec, &why) != 0) {
        *err = tb_xasprintf("storing case #%zu failed: %s", c->ordinal, why ? why : "?");
        free(why);
        tb_store_txn_end(st, &t, 0, NULL);
        return -1;
    }
    if (tb_store_txn_end(st, &t, 1, &why) != 0) {
        *err = tb_xasprintf("storing case #%zu: %s", c->ordinal, why);
        free(why);
        return -1;
    }
    return case_id;
}

int tb_store_prompts(tb_store *st, int64_t session, const tb_plan *plan, char **err)
{
    if (!plan->n_prompts)
        return 0;
    char *why = NULL;
    int line = 0; /* of the item that failed, if one did */
    sqlite3_stmt *u = prepare(st, "UPDATE session SET prompt_set_path = ?, prompt_set_sha256 = ? WHERE id = ?", &why);
    sqlite3_stmt *q = NULL;
    if (u)
        q = prepare(st, "INSERT INTO prompt (session_id, idx, line, prompt, answer, scorer, tags_json)"
                        " VALUES (?,?,?,?,?,?,?)",
                    &why);
    int ok = u && q;
    tb_store_txn t;
    int began = ok && tb_store_txn_begin(st, &t, &why) == 0;
    ok = began;
    if (ok) {
        bind_text(u, 1, plan->suite->prompts.file);
        bind_text(u, 2, plan->prompts.sha256);
        sqlite3_bind_int64(u, 3, session);
        if (sqlite3_step(u) != SQLITE_DONE) {
            why = db_error(st);
            ok = 0;
        } else if (sqlite3_changes(st->db) != 1) {
            why = tb_xasprintf("no session %lld", (long long)session);
            ok = 0;
        }
    }
    for (size_t i = 0; ok && i < plan->n_prompts; i++) {
        const tb_prompt *it = &plan->prompts.items[i];
        tb_str tags = {0};
        tb_str_append(&tags, "[");
        for (int t = 0; t < it->n_tags; t++)
            tb_str_appendf(&tags, "%s\"%s\"", t ? "," : "", it->tags[t]); /* tags are [a-z0-9_]+ */
        tb_str_append(&tags, "]");
        sqlite3_reset(q);
        sqlite3_bind_int64(q, 1, session);
        sqlite3_bind_int64(q, 2, (int64_t)i);
        sqlite3_bind_int(q, 3, it->line);
        bind_text(q, 4, it->prompt);
        bind_text(q, 5, it->answer);
        bind_text(q, 6, it->answer ? tb_scorer_name(tb_prompt_scorer(it, plan->scorer)) : NULL);
        bind_text(q, 7, tags.s);
        if (sqlite3_step(q) != SQLITE_DONE) {
            why = db_error(st);
            line = it->line;
            ok = 0;
        }
        tb_str_free(&tags);
    }
    if (began && tb_store_txn_end(st, &t, ok, ok ? &why : NULL) != 0)
        ok = 0;
    sqlite3_finalize(u);
    sqlite3_finalize(q);
    if (ok)
        return 0;
    if (line)
        *err = tb_xasprintf("storing the prompt set %s failed at line %d: %s", plan->suite->prompts.file, line, why);
    else
        *err = tb_xasprintf("storing the prompt set %s failed: %s", plan->suite->prompts.file, why);
    free(why);
    return -1;
}

void tb_stored_answers_free(tb_stored_answer *a, size_t n)
{
    for (size_t i = 0; a && i < n; i++)
        free(a[i].text);
    free(a);
}

int tb_store_answers(tb_store *st, int64_t session, tb_stored_answer **out, size_t *n_out, char **err)
{
    *out = NULL;
    *n_out = 0;
    sqlite3_stmt *q = prepare(st, "SELECT r.id, sa.case_id, r.prompt_idx, r.output_text, r.scored FROM request r"
                                  " JOIN sample sa ON r.sample_id = sa.id JOIN bench_case c ON sa.case_id = c.id"
                                  " WHERE c.session_id = ? AND r.status = 'ok' AND r.prompt_idx IS NOT NULL"
                                  " AND r.output_text IS NOT NULL ORDER BY c.ordinal, r.id",
                              err);
    if (!q)
        return -1;
    sqlite3_bind_int64(q, 1, session);
    tb_stored_answer *a = NULL;
    size_t n = 0, cap = 0;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        if (n == cap) {
            cap = cap ? 2 * cap : 256;
            a = tb_xrealloc(a, cap * sizeof *a);
        }
        a[n++] = (tb_stored_answer){
            .request_id = sqlite3_column_int64(q, 0),
            .case_id = sqlite3_column_int64(q, 1),
            .prompt_idx = sqlite3_column_int(q, 2),
            .text = tb_xstrdup((const char *)sqlite3_column_text(q, 3)),
            .scored = sqlite3_column_int(q, 4),
        };
    }
    if (rc != SQLITE_DONE) { /* an error is not the end of the answers */
        *err = db_error(st);
        sqlite3_finalize(q);
        tb_stored_answers_free(a, n);
        return -1;
    }
    sqlite3_finalize(q);
    *out = a;
    *n_out = n;
    return 0;
}

int tb_store_judge(tb_store *st, const tb_judge_score *scores, size_t n, const int64_t *case_ids,
                   const tb_metric_record *case_metrics, size_t n_cases, char **err)
{
    char *why = NULL;
    tb_store_txn t;
    if (tb_store_txn_begin(st, &t, err) != 0)
        return -1;
    sqlite3_stmt *q = prepare(st, "INSERT OR REPLACE INTO score (request_id, name, value) VALUES (?,?,?)", &why);
    int ok = q != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        const char *names[2] = {"judge_nll", "judge_ppl"};
        const double v[2] = {scores[i].nll, scores[i].ppl};
        for (int k = 0; k < 2 && ok; k++) {
            sqlite3_reset(q);
            sqlite3_bind_int64(q, 1, scores[i].request_id);
            bind_text(q, 2, names[k]);
            sqlite3_bind_double(q, 3, v[k]); /* NOT NULL: an infinite perplexity is one */
            ok = sqlite3_step(q) == SQLITE_DONE;
        }
    }
    if (!ok && !why)
        why = db_error(st);
    sqlite3_finalize(q);
    for (size_t i = 0; ok && i < n_cases; i++)
        ok = insert_metrics(st, case_ids[i], &case_metrics[i], 1, 1, &why) == 0;
    if (tb_store_txn_end(st, &t, ok, ok ? &why : NULL) != 0) {
        *err = tb_xasprintf("storing the judge's scores failed: %s", why ? why : "?");
        free(why);
        return -1;
    }
    return 0;
}

/* ----------------------------------------------------------- copying rows */

struct tb_store_rows {
    sqlite3 *db;
    sqlite3_stmt *q;
};

char *tb_store_quote_ident(const char *name)
{
    tb_str b = {0};
    tb_str_append(&b, "\"");
    for (; *name; name++)
        tb_str_appendf(&b, *name == '"' ? "\"\"" : "%c", *name);
    tb_str_append(&b, "\"");
    return tb_str_take(&b);
}

int tb_store_rows_open(sqlite3 *db, const char *table, char *const *cols, size_t n_cols, tb_store_rows **out,
                       char **err)
{
    tb_str ins = {0}, marks = {0};
    for (size_t c = 0; c < n_cols; c++) {
        char *qc = tb_store_quote_ident(cols[c]);
        tb_str_appendf(&ins, "%s%s", c ? ", " : "", qc);
        tb_str_appendf(&marks, "%s?", c ? ", " : "");
        free(qc);
    }
    char *qn = tb_store_quote_ident(table);
    char *sql = tb_xasprintf("INSERT INTO %s (%s) VALUES (%s)", qn, ins.s ? ins.s : "", marks.s ? marks.s : "");
    free(qn);
    tb_str_free(&ins);
    tb_str_free(&marks);
    sqlite3_stmt *q;
    int rc = sqlite3_prepare_v2(db, sql, -1, &q, NULL);
    free(sql);
    if (rc != SQLITE_OK) {
        *err = tb_xstrdup(sqlite3_errmsg(db));
        sqlite3_finalize(q);
        *out = NULL;
        return -1;
    }
    *out = tb_xmalloc(sizeof **out);
    **out = (tb_store_rows){db, q};
    return 0;
}

void tb_store_rows_value(tb_store_rows *w, size_t i, sqlite3_value *v)
{
    sqlite3_bind_value(w->q, (int)i + 1, v);
}

void tb_store_rows_id(tb_store_rows *w, size_t i, int64_t id)
{
    sqlite3_bind_int64(w->q, (int)i + 1, id);
}

int64_t tb_store_rows_insert(tb_store_rows *w, char **err)
{
    int rc = sqlite3_step(w->q);
    int64_t id = rc == SQLITE_DONE ? sqlite3_last_insert_rowid(w->db) : -1;
    if (rc != SQLITE_DONE)
        *err = tb_xstrdup(sqlite3_errmsg(w->db));
    sqlite3_reset(w->q);
    sqlite3_clear_bindings(w->q);
    return id;
}

void tb_store_rows_close(tb_store_rows *w)
{
    if (!w)
        return;
    sqlite3_finalize(w->q);
    free(w);
}

int tb_store_delete_session(sqlite3 *db, int64_t id, char **err)
{
    sqlite3_stmt *q = NULL;
    int rc = sqlite3_prepare_v2(db, "DELETE FROM session WHERE id = ?", -1, &q, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(q, 1, id);
        rc = sqlite3_step(q);
    }
    if (rc != SQLITE_DONE)
        *err = tb_xstrdup(sqlite3_errmsg(db));
    sqlite3_finalize(q);
    return rc == SQLITE_DONE ? 0 : -1;
}
