/* test_serve_chat.c — core/serve_chat.c: the chat templates `tokbench
 * serve` recognises (Llama-3, Llama-3.1 with its dated system block,
 * ChatML with and without a default system message), what it refuses
 * (another family; a conversation for a model without a template), and
 * tokenizer_config.json read from a model folder (a string template, the
 * named-list form, none). The template texts are those of the families'
 * tokenizer_config.json files, as JSON decodes them (Jinja's own \n
 * escapes stay backslash-n). */
#define _GNU_SOURCE
#include "serve_chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "util.h"

static const char LLAMA3[] =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 "
    "%}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

/* the parts of Llama 3.1's template that decide its output without tools */
static const char LLAMA31[] =
    "{{- bos_token }}\n{%- if not date_string is defined %}\n    {%- set date_string = \"26 Jul 2024\" %}\n{%- endif "
    "%}\n{#- System message #}\n{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n{{- \"Cutting Knowledge "
    "Date: December 2023\\n\" }}\n{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n{{- system_message }}\n{{- "
    "\"<|eot_id|>\" }}\n{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}{%- endfor %}";

static const char QWEN2[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + "
    "message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt "
    "%}{{ '<|im_start|>assistant\\n' }}{% endif %}";

static const char CHATML[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

static const char MISTRAL[] =
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] "
    "+ ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% endif %}{% endfor "
    "%}";

static tb_chat_msg M(const char *role, const char *content)
{
    return (tb_chat_msg){(char *)role, (char *)content};
}

static char *render(const tb_chat_template *t, const tb_chat_msg *m, size_t n, char *why)
{
    why[0] = '\0';
    return tb_chat_render(t, m, n, why, 512);
}

static void test_llama3(void)
{
    tb_chat_template t = {0};
    char why[512];
    tb_chat_template_detect(LLAMA3, &t);
    CHECK(t.kind == TB_CHAT_LLAMA3 && !t.llama_dated);
    CHECK_STR(tb_chat_template_name(&t), "Llama-3");
    tb_chat_msg conv[] = {M("system", "  Be brief. \n"), M("user", "93+45="), M("assistant", " 138"),
                          M("user", "and 1+1?")};
    char *p = render(&t, conv, 4, why);
    /* no <|begin_of_text|>: the backend adds its BOS; contents trimmed */
    CHECK_STR(p, "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                 "<|start_header_id|>user<|end_header_id|>\n\n93+45=<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\n138<|eot_id|>"
                 "<|start_header_id|>user<|end_header_id|>\n\nand 1+1?<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\n");
    free(p);

    tb_chat_template_detect(LLAMA31, &t);
    CHECK(t.kind == TB_CHAT_LLAMA3 && t.llama_dated && !t.date_today);
    CHECK_STR(t.date, "26 Jul 2024");
    CHECK_STR(tb_chat_template_name(&t), "Llama-3.1");
    p = render(&t, conv, 2, why);
    CHECK_STR(p, "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
                 "Today Date: 26 Jul 2024\n\nBe brief.<|eot_id|>"
                 "<|start_header_id|>user<|end_header_id|>\n\n93+45=<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\n");
    free(p);
    p = render(&t, conv + 1, 1, why); /* no system message: the block all the same, empty */
    CHECK_STR(p, "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
                 "Today Date: 26 Jul 2024\n\n<|eot_id|>"
                 "<|start_header_id|>user<|end_header_id|>\n\n93+45=<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\n");
    free(p);
    /* Llama 3.2: today's date */
    char *today = tb_xasprintf("%s strftime_now(\"%%d %%b %%Y\")", LLAMA31);
    tb_chat_template_detect(today, &t);
    CHECK(t.kind == TB_CHAT_LLAMA3 && t.llama_dated && t.date_today);
    free(today);
    /* dated without a date we can find: not guessed */
    tb_chat_template_detect("<|start_header_id|><|end_header_id|><|eot_id|>Cutting Knowledge Date: {{ d }}", &t);
    CHECK(t.kind == TB_CHAT_UNKNOWN);
    tb_chat_template_free(&t);
}

static void test_chatml(void)
{
    tb_chat_template t = {0};
    char why[512];
    tb_chat_template_detect(QWEN2, &t);
    CHECK(t.kind == TB_CHAT_CHATML);
    CHECK_STR(t.default_system, "You are a helpful assistant.");
    tb_chat_msg user[] = {M("user", " 93+45= ")};
    char *p = render(&t, user, 1, why);
    CHECK_STR(p, "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                 "<|im_start|>user\n 93+45= <|im_end|>\n<|im_start|>assistant\n");
    free(p);
    tb_chat_msg sys[] = {M("system", "S"), M("user", "U")};
    p = render(&t, sys, 2, why); /* a system message of its own: no default */
    CHECK_STR(p, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
    free(p);

    tb_chat_template_detect(CHATML, &t);
    CHECK(t.kind == TB_CHAT_CHATML && !t.default_system);
    p = render(&t, user, 1, why);
    CHECK_STR(p, "<|im_start|>user\n 93+45= <|im_end|>\n<|im_start|>assistant\n");
    free(p);
    tb_chat_template_free(&t);
}

static void test_refused(void)
{
    tb_chat_template t = {0};
    char why[512];
    tb_chat_template_detect(MISTRAL, &t);
    CHECK(t.kind == TB_CHAT_UNKNOWN);
    tb_chat_msg user[] = {M("user", "hi")};
    CHECK(render(&t, user, 1, why) == NULL);
    CHECK_CONTAINS(why, "not one tokbench serve knows (Llama-3 or ChatML)");

    tb_chat_template_detect(NULL, &t);
    CHECK(t.kind == TB_CHAT_NONE);
    char *p = render(&t, user, 1, why);
    CHECK_STR(p, "hi"); /* one user message: its text */
    free(p);
    tb_chat_msg sys[] = {M("system", "S"), M("user", "U")};
    CHECK(render(&t, sys, 2, why) == NULL);
    CHECK_CONTAINS(why, "this model has no chat template");
    tb_chat_msg asst[] = {M("assistant", "A")};
    CHECK(render(&t, asst, 1, why) == NULL);
    tb_chat_template_free(&t);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void test_load(void)
{
    char dir[] = "/tmp/tb-serve-chat-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char *cfg = tb_xasprintf("%s/tokenizer_config.json", dir);
    tb_chat_template t;
    char *why = NULL;
    CHECK(tb_chat_template_load(dir, &t, &why) == 0 && t.kind == TB_CHAT_NONE); /* no file */
    tb_chat_template_free(&t);
    CHECK(tb_chat_template_load("/no/such/model", &t, &why) == 0 && t.kind == TB_CHAT_NONE);
    tb_chat_template_free(&t);

    write_file(cfg, "{\"bos_token\": \"<s>\"}");
    CHECK(tb_chat_template_load(dir, &t, &why) == 0 && t.kind == TB_CHAT_NONE);
    tb_chat_template_free(&t);

    write_file(cfg, "{\"chat_template\": \"{% for message in messages %}{{'<|im_start|>' + message['role'] + "
                    "'\\\\n' + message['content'] + '<|im_end|>' + '\\\\n'}}{% endfor %}\"}");
    CHECK(tb_chat_template_load(dir, &t, &why) == 0 && t.kind == TB_CHAT_CHATML);
    CHECK_CONTAINS(t.where, "tokenizer_config.json");
    tb_chat_template_free(&t);

    write_file(cfg, "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"x\"}, {\"name\": \"default\", "
                    "\"template\": \"<|start_header_id|><|end_header_id|><|eot_id|>\"}]}");
    CHECK(tb_chat_template_load(dir, &t, &why) == 0 && t.kind == TB_CHAT_LLAMA3);
    tb_chat_template_free(&t);

    write_file(cfg, "{\"chat_template\": 7}");
    CHECK(tb_chat_template_load(dir, &t, &why) == 0 && t.kind == TB_CHAT_UNKNOWN);
    tb_chat_template_free(&t);

    write_file(cfg, "{not json");
    CHECK(tb_chat_template_load(dir, &t, &why) == -1);
    CHECK_CONTAINS(why, "tokenizer_config.json: not a JSON object");
    free(why);
    unlink(cfg);
    rmdir(dir);
    free(cfg);
}

int main(void)
{
    test_llama3();
    test_chatml();
    test_refused();
    test_load();
    return check_done();
}
