/* plugin.h — finding, loading and checking backend plugins, and parsing
 * the options they declare.
 *
 * Search order for `plugin = NAME` (a NAME with a '/' or ending in ".so" is
 * a path and is used as is):
 *   1. each folder of $TOKBENCH_PLUGIN_PATH (':'-separated): DIR/NAME.so,
 *      DIR/NAME/NAME.so
 *   2. the build tree, when tokbench runs from it: EXEDIR/plugins/NAME/NAME.so
 *   3. the install folder: TB_PLUGIN_INSTALL_DIR/NAME.so
 * Plugins are opened with dlopen(RTLD_NOW | RTLD_LOCAL) and never unloaded
 * while a run is in progress. */
#ifndef TB_PLUGIN_H
#define TB_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include <tokbench/backend.h>

typedef struct tb_plugin {
    char *path;                /* the file loaded */
    void *handle;              /* dlopen handle */
    const tb_backend_ops *ops; /* checked: see tb_plugin_open */
} tb_plugin;

/* Find the file for `name`; malloc'd path or NULL (then *tried lists the
 * places looked at, malloc'd, if tried != NULL). */
char *tb_plugin_find(const char *name, char **tried);

/* Open and check a plugin: entry symbol present, ABI major equal, ops table
 * at least TB_OPS_MIN_SIZE, required methods present, tokenizer methods
 * present when TB_CAP_TOKENIZER is claimed, option declarations valid.
 * Returns 0, or -1 with *err = "plugin NAME (PATH): reason" (malloc'd). */
int tb_plugin_open(const char *name_or_path, tb_plugin *out, char **err);
void tb_plugin_close(tb_plugin *p);

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
