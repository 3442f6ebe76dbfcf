/* plugin.h — finding, loading and checking backend plugins, and parsing
 * the options they declare.
 *
 * Search order for `plugin = NAME` (a NAME with a '/' or ending in ".so" is
 * a path and is used as is):
 *   1. each folder of $TOKBENCH_PLUGIN_PATH (':'-separated): DIR/NAME.so,
 *      DIR/NAME/NAME.so
 *   2. the build tree, when tokbench runs from it: EXEDIR/plugins/NAME/NAME.so
 *   3. the install folder: TB_PLUGIN_INSTALL_DIR/NAME.so
 *
 * Plugin code never runs in tokbench's own process: a constructor, the
 * entry function or a method may crash, call exit() or hang. A plugin is
 * loaded (dlopen(RTLD_NOW | RTLD_LOCAL), its entry function called, its
 * table checked) only in a child process (proc.h): by tb_plugin_call,
 * which runs a function of the caller's there under a deadline and
 * brings its answers back over a pipe, and by a backend's worker
 * (worker.h). tb_plugin_open uses it to bring back the data of the ops
 * table (name, version, description, capabilities, options): what the
 * runner plans with. */
#ifndef TB_PLUGIN_H
#define TB_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include <tokbench/backend.h>

/* Optional methods a plugin has (tb_plugin.methods). */
enum {
    TB_PLUGIN_HAS_PROBE = 1u << 0,
    TB_PLUGIN_HAS_DESCRIBE = 1u << 1,
    TB_PLUGIN_HAS_VALIDATE = 1u << 2,
    TB_PLUGIN_HAS_LOGLIK = 1u << 3,
};

typedef struct tb_plugin {
    char *path; /* the file */
    /* Its ops table as its loading process reported it, checked: the
     * data members (abi_major, struct_size (at most this tokbench's),
     * name, version, description, capabilities, options) with every
     * method NULL: methods run only in a process that loaded the plugin
     * itself (tb_plugin_load). */
    const tb_backend_ops *ops;
    uint32_t methods;  /* TB_PLUGIN_HAS_*: its optional methods */
    /* with TB_PLUGIN_PROBE: probe()'s verdict (TB_OK without a probe) and
     * its reason, malloc'd ("" when none) */
    int probe_status;
    char *probe_why;
} tb_plugin;

/* tb_plugin_open's flags. */
enum {
    TB_PLUGIN_PROBE = 1u << 0, /* also ask probe() (in the same process) */
};

/* Find the file for `name`; malloc'd path or NULL (then *tried lists the
 * places looked at, malloc'd, if tried != NULL). */
char *tb_plugin_find(const char *name, char **tried);

/* Find a plugin and read its ops table in a child process that loads it
 * (tb_plugin_call): entry symbol present, ABI major equal, ops table at
 * least TB_OPS_MIN_SIZE, required methods present, tokenizer methods
 * present when TB_CAP_TOKENIZER is claimed, option declarations valid.
 * The loading must answer within timeout_s (named `timeout_name` in
 * messages when not NULL: "load_timeout"). Returns 0, or -1 with *err =
 * "plugin NAME (PATH): reason" (malloc'd): not found, a check failed, or
 * loading it crashed, exited or hung (killed). */
int tb_plugin_open(const char *name_or_path, double timeout_s, const char *timeout_name, unsigned flags,
                   tb_plugin *out, char **err);
void tb_plugin_close(tb_plugin *p);
/* *dst = an independent copy of an open plugin. */
void tb_plugin_copy(tb_plugin *dst, const tb_plugin *src);

/* Load and check the plugin at `path` in THIS process (dlopen, the entry
 * function, the checks of tb_plugin_open): for a process that will call
 * its methods, never the runner itself. `name` is what the suite said,
 * for messages. 0 with *ops, or -1 with *err ("plugin NAME (PATH): ..."). */
int tb_plugin_load(const char *path, const char *name, const tb_backend_ops **ops, char **err);

/* The checks of an ops table's data (not its methods): a malloc'd
 * reason, or NULL when it passes. */
char *tb_plugin_check_data(const tb_backend_ops *ops);

/* Whether `name` is a key a suite's [backend] section gives a meaning of
 * its own (plugin, model, include, and every dimension of suite/dims.c:
 * tests/unit/test_plugin.c checks that the two lists agree), which no
 * plugin option may take. */
int tb_plugin_reserved_key(const char *name);

/* Is `ops` (loaded by tb_plugin_load) the table `p` was planned with:
 * same name, version, capabilities and options? 0, or -1 with *err (the
 * file changed since). */
int tb_plugin_same(const tb_plugin *p, const tb_backend_ops *ops, char **err);

/* The function tb_plugin_call runs in the child, with the plugin loaded:
 * it answers with tb_plugin_reply (as many times as it wants). */
typedef void (*tb_plugin_fn)(const tb_backend_ops *ops, void *arg, int fd);
/* One answer (in the child): 0, or -1 when the parent is gone. */
int tb_plugin_reply(int fd, const void *data, size_t len);

typedef struct tb_plugin_answers {
    int loaded;      /* the plugin was loaded and checked */
    char **v;        /* the answers, in order (malloc'd each) */
    size_t *len;
    size_t n;
} tb_plugin_answers;

/* Run fn(ops, arg, fd) in a child process (proc.h) that loaded the plugin
 * at `path` (tb_plugin_load); each answer, and the loading, must come
 * within timeout_s of the one before. 0 with every answer in *ans, or
 * -1 with *why (malloc'd) and what came before in *ans: the plugin could
 * not be loaded (ans->loaded 0, why is tb_plugin_load's message), or the
 * process crashed ("crashed: killed by signal 11 (SIGSEGV, ...)"),
 * exited ("exited with status 0 (...)"), or did not answer in time
 * ("did not answer within load_timeout (3 s); killed"). */
int tb_plugin_call(const char *path, const char *name, double timeout_s, const char *timeout_name, tb_plugin_fn fn,
                   void *arg, tb_plugin_answers *ans, char **why);
void tb_plugin_answers_free(tb_plugin_answers *ans);

/* Every *.so found in the search folders (build tree, $TOKBENCH_PLUGIN_PATH,
 * install folder), deduplicated by plugin file name, first found wins.
 * Returns the count; *paths is a malloc'd array of malloc'd strings. */
size_t tb_plugin_scan(char ***paths);

/* The declaration of option `name`, or NULL. */
const tb_option_decl *tb_plugin_option(const tb_plugin *p, const char *name);

/* Parse `text` as a value of `decl`: checks type, range and choices.
 * On success out->name = decl->name and out->text is malloc'd (normalized);
 * returns 0. On failure returns -1 with a malloc'd reason in *err
 * ("expected an integer in [1, 64], got \"x\""). */
int tb_option_parse(const tb_option_decl *decl, const char *text,
                    tb_option_value *out, char **err);

/* "int in [1, 64]", "one of a|b|c", ... for help and error messages. */
char *tb_option_describe_type(const tb_option_decl *decl);

/* Capability bits as "batch,steps,streaming" (malloc'd; "none" if 0). */
char *tb_caps_string(uint32_t caps);

#endif
