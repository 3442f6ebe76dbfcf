/* serve_chat.h — chat templates for `tokbench serve`'s
 * /v1/chat/completions: the model folder's tokenizer_config.json
 * "chat_template" recognised as one of two families and rendered in C
 * (no Jinja engine: a template of another family is refused, not
 * guessed):
 *
 *   Llama-3    <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>
 *              per message (content trimmed), then the assistant's header.
 *              Llama 3.1 and later ("Cutting Knowledge Date" in the
 *              template) always open with a system block: "Cutting
 *              Knowledge Date: December 2023\nToday Date: DATE\n\n" and the
 *              first system message's content; DATE is the template's
 *              date_string default ("26 Jul 2024"), or today's date ("%d %b
 *              %Y") when the template calls strftime_now.
 *   ChatML     <|im_start|>ROLE\nCONTENT<|im_end|>\n per message, then
 *              "<|im_start|>assistant\n"; a default system message (Qwen's
 *              "You are a helpful assistant.") when the template has one
 *              and the first message is not a system message.
 *
 * The template's BOS token (Llama-3's <|begin_of_text|>) is not written:
 * the backend adds its BOS to every prompt, as for /v1/completions.
 * Without a chat_template the prompt is the text of a single user
 * message; anything more (a system message, several turns) is refused. */
#ifndef TB_SERVE_CHAT_H
#define TB_SERVE_CHAT_H

#include <stddef.h>

#include "serve_request.h"

typedef enum tb_chat_kind {
    TB_CHAT_NONE,    /* no chat_template */
    TB_CHAT_LLAMA3,
    TB_CHAT_CHATML,
    TB_CHAT_UNKNOWN, /* a template of another family */
} tb_chat_kind;

typedef struct tb_chat_template {
    tb_chat_kind kind;
    int llama_dated;      /* LLAMA3: 3.1+, the system block with the dates */
    int date_today;       /* ... today's date (strftime_now) */
    char date[32];        /* ... else this one */
    char *default_system; /* CHATML: NULL, or the template's default */
    char *where;          /* the file it came from, for messages; NULL */
} tb_chat_template;

/* Recognise a template's text (NULL: none) into *t. */
void tb_chat_template_detect(const char *text, tb_chat_template *t);

/* Read DIR/tokenizer_config.json: 0 with *t filled (kind NONE when the
 * file or its chat_template is absent, or dir is not a folder), -1 with
 * *why (malloc'd) when the file cannot be read or parsed. */
int tb_chat_template_load(const char *dir, tb_chat_template *t, char **why);
void tb_chat_template_free(tb_chat_template *t);

/* Short name of the family: "none", "Llama-3", "Llama-3.1", "ChatML", "unknown". */
const char *tb_chat_template_name(const tb_chat_template *t);

/* The prompt of messages m[n] (malloc'd), or NULL with what is wrong
 * in why[why_size] (a 400 for the client). */
char *tb_chat_render(const tb_chat_template *t, const tb_chat_msg *m, size_t n, char *why, size_t why_size);

#endif
