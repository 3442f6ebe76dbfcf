/* serve_chat.c — see serve_chat.h. The formats are written from what the
 * two families' templates produce with add_generation_prompt and no
 * tools; nothing here evaluates Jinja. */
#define _GNU_SOURCE
#include "serve_chat.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "util.h"

/* A Jinja string literal's text from s (just after its opening quote) up
 * to `stop` (exclusive) with \n, \t, \\ and \' \" unescaped; NULL if the
 * literal ends (an unescaped quote) first. */
static char *literal_until(const char *s, const char *stop)
{
    const char *e = strstr(s, stop);
    if (!e)
        return NULL;
    tb_str b = {0};
    for (const char *p = s; p < e; p++) {
        if (*p == '\'' || *p == '"') {
            tb_str_free(&b);
            return NULL;
        }
        if (*p == '\\' && p + 1 < e) {
            p++;
            tb_str_appendn(&b, *p == 'n' ? "\n" : *p == 't' ? "\t" : p, 1);
            continue;
        }
        tb_str_appendn(&b, p, 1);
    }
    return b.s ? tb_str_take(&b) : tb_xstrdup("");
}

void tb_chat_template_detect(const char *text, tb_chat_template *t)
{
    free(t->default_system);
    t->default_system = NULL;
    t->llama_dated = t->date_today = 0;
    t->date[0] = '\0';
    if (!text || !*text) {
        t->kind = TB_CHAT_NONE;
        return;
    }
    if (strstr(text, "<|start_header_id|>") && strstr(text, "<|end_header_id|>") && strstr(text, "<|eot_id|>")) {
        t->kind = TB_CHAT_LLAMA3;
        if (!strstr(text, "Cutting Knowledge Date"))
            return;
        t->llama_dated = 1;
        t->date_today = strstr(text, "strftime_now") != NULL;
        const char *d = strstr(text, "date_string = \"");
        if (!d)
            d = strstr(text, "date_string = '");
        if (d) {
            d += strlen("date_string = \"");
            size_t k = strcspn(d, "\"'");
            if (k < sizeof t->date && d[k])
                snprintf(t->date, sizeof t->date, "%.*s", (int)k, d);
        }
        if (!t->date_today && !t->date[0])
            t->kind = TB_CHAT_UNKNOWN; /* dated, but no date we can find */
        return;
    }
    if (strstr(text, "<|im_start|>") && strstr(text, "<|im_end|>")) {
        t->kind = TB_CHAT_CHATML;
        /* a literal '<|im_start|>system\n' followed by text up to
         * <|im_end|>: the default system message */
        static const char *const opens[] = {"<|im_start|>system\\n", "<|im_start|>system\n"};
        for (int o = 0; o < 2 && !t->default_system; o++) {
            size_t ol = strlen(opens[o]);
            for (const char *p = strstr(text, opens[o]); p && !t->default_system; p = strstr(p + 1, opens[o]))
                if (p[ol] != '\'' && p[ol] != '"')
                    t->default_system = literal_until(p + ol, "<|im_end|>");
        }
        return;
    }
    t->kind = TB_CHAT_UNKNOWN;
}

int tb_chat_template_load(const char *dir, tb_chat_template *t, char **why)
{
    memset(t, 0, sizeof *t);
    struct stat st;
    if (!dir || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return 0; /* a preset or a remote name: no template */
    char *path = tb_xasprintf("%s/tokenizer_config.json", dir);
    size_t len = 0;
    char *text = tb_read_file_max(path, TB_READ_MAX_CONFIG, &len);
    if (!text) {
        if (errno != ENOENT) {
            char reason[160];
            *why = tb_xasprintf("%s: %s", path,
                                tb_read_file_why(errno, TB_READ_MAX_CONFIG, "a tokenizer_config.json", reason,
                                                 sizeof reason));
            free(path);
            return -1;
        }
        t->where = path;
        return 0;
    }
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(j)) {
        *why = tb_xasprintf("%s: %s", path, "not a JSON object");
        cJSON_Delete(j);
        free(path);
        return -1;
    }
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(j, "chat_template");
    if (cJSON_IsArray(ct)) { /* named templates: the "default" one */
        const cJSON *it, *found = NULL;
        cJSON_ArrayForEach(it, ct)
        {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
            if (cJSON_IsString(name) && strcmp(name->valuestring, "default") == 0)
                found = cJSON_GetObjectItemCaseSensitive(it, "template");
        }
        ct = found;
    }
    tb_chat_template_detect(cJSON_IsString(ct) ? ct->valuestring : NULL, t);
    if (!ct || cJSON_IsNull(ct) || cJSON_IsString(ct))
        t->where = path;
    else {
        t->kind = TB_CHAT_UNKNOWN;
        t->where = path;
    }
    cJSON_Delete(j);
    return 0;
}

void tb_chat_template_free(tb_chat_template *t)
{
    free(t->default_system);
    free(t->where);
    memset(t, 0, sizeof *t);
}

const char *tb_chat_template_name(const tb_chat_template *t)
{
    switch (t->kind) {
    case TB_CHAT_NONE: return "none";
    case TB_CHAT_LLAMA3: return t->llama_dated ? "Llama-3.1" : "Llama-3";
    case TB_CHAT_CHATML: return "ChatML";
    case TB_CHAT_UNKNOWN: break;
    }
    return "unknown";
}

/* Jinja's trim: whitespace off both ends. */
static void append_trimmed(tb_str *b, const char *s)
{
    static const char ws[] = " \t\n\r\f\v";
    s += strspn(s, ws);
    size_t n = strlen(s);
    while (n && strchr(ws, s[n - 1]))
        n--;
    tb_str_appendn(b, s, n);
}

char *tb_chat_render(const tb_chat_template *t, const tb_chat_msg *m, size_t n, char *why, size_t why_size)
{
    tb_str b = {0};
    switch (t->kind) {
    case TB_CHAT_NONE:
        if (n != 1 || strcmp(m[0].role, "user") != 0) {
            snprintf(why, why_size,
                     "this model has no chat template (%s%s): send one user message (its text is the prompt), "
                     "or format the conversation yourself on /v1/completions",
                     t->where ? "no chat_template in " : "no model folder", t->where ? t->where : "");
            return NULL;
        }
        return tb_xstrdup(m[0].content);
    case TB_CHAT_UNKNOWN:
        snprintf(why, why_size,
                 "the chat template in %s is not one tokbench serve knows (Llama-3 or ChatML); it does not guess "
                 "another: format the prompt yourself on /v1/completions",
                 t->where ? t->where : "tokenizer_config.json");
        return NULL;
    case TB_CHAT_LLAMA3: {
        size_t first = 0;
        if (t->llama_dated) {
            char today[32];
            const char *date = t->date;
            if (t->date_today) {
                time_t now = time(NULL);
                struct tm tm;
                localtime_r(&now, &tm);
                strftime(today, sizeof today, "%d %b %Y", &tm);
                date = today;
            }
            tb_str_appendf(&b, "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December "
                               "2023\nToday Date: %s\n\n", date);
            if (strcmp(m[0].role, "system") == 0) {
                append_trimmed(&b, m[0].content);
                first = 1;
            }
            tb_str_append(&b, "<|eot_id|>");
        }
        for (size_t i = first; i < n; i++) {
            tb_str_appendf(&b, "<|start_header_id|>%s<|end_header_id|>\n\n", m[i].role);
            append_trimmed(&b, m[i].content);
            tb_str_append(&b, "<|eot_id|>");
        }
        tb_str_append(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        return tb_str_take(&b);
    }
    case TB_CHAT_CHATML:
        if (t->default_system && strcmp(m[0].role, "system") != 0)
            tb_str_appendf(&b, "<|im_start|>system\n%s<|im_end|>\n", t->default_system);
        for (size_t i = 0; i < n; i++)
            tb_str_appendf(&b, "<|im_start|>%s\n%s<|im_end|>\n", m[i].role, m[i].content);
        tb_str_append(&b, "<|im_start|>assistant\n");
        return tb_str_take(&b);
    }
    snprintf(why, why_size, "no chat template");
    return NULL;
}
