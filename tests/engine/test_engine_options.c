/* test_engine_options.c — the engine backends' enum options
 * (plugins/engine/backend/engine_options.h): each choice list gives the
 * declaration's "a|b|c" text and the name -> value table from one list, in
 * the same order, and a value is found by its name, never by its place. */
#define _GNU_SOURCE /* strdup, strtok_r */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dllm.h"
#include "engine_options.h"
#include "flow_sampler.h"

/* The choices text names exactly the table's rows, in order; each name
 * gives its value back and each value its name; values are distinct. */
static void check_list(const char *what, const char *text, const tb_choice *table)
{
    char *copy = strdup(text), *save = NULL;
    int i = 0, failures = check_failures_;
    for (char *name = strtok_r(copy, "|", &save); name; name = strtok_r(NULL, "|", &save), i++) {
        CHECK(table[i].name != NULL);
        if (!table[i].name)
            break;
        CHECK_STR(name, table[i].name);
        CHECK(tb_choice_value(table, name) == table[i].value);
        CHECK_STR(tb_choice_name(table, table[i].value), name);
        for (int j = 0; j < i; j++)
            CHECK(table[j].value != table[i].value);
    }
    CHECK(table[i].name == NULL); /* no row the text leaves out */
    if (check_failures_ > failures)
        fprintf(stderr, "in the list of %s\n", what);
    free(copy);
}

int main(void)
{
    check_list("samplers", TB_CHOICES_TEXT(TB_DLLM_SAMPLER_LIST), tb_dllm_sampler_choices);
    check_list("caches", TB_CHOICES_TEXT(TB_DLLM_CACHE_LIST), tb_dllm_cache_choices);
    check_list("devices", TB_CHOICES_TEXT(TB_DEVICE_LIST), tb_device_choices);
    check_list("dtypes", TB_CHOICES_TEXT(TB_DTYPE_LIST), tb_dtype_choices);
    check_list("flow solvers", TB_CHOICES_TEXT(TB_FLOW_SOLVER_LIST), tb_flow_solver_choices);
    check_list("flow prompts", TB_CHOICES_TEXT(TB_FLOW_PROMPT_LIST), tb_flow_prompt_choices);

    /* by name: the enum each name stands for, whatever its place */
    CHECK(tb_choice_value(tb_dllm_sampler_choices, "fast_dllm_v2") == TB_DLLM_FAST_DLLM_V2);
    CHECK(tb_choice_value(tb_dllm_sampler_choices, "entropy") == TB_DLLM_ENTROPY);
    CHECK(tb_choice_value(tb_dllm_cache_choices, "dual") == TB_DLLM_CACHE_DUAL);
    CHECK(tb_choice_value(tb_dtype_choices, "fp8") == TB_DTYPE_FP8);
    CHECK(tb_choice_value(tb_flow_solver_choices, "heun") == TB_FLOW_HEUN);
    CHECK(tb_choice_value(tb_flow_prompt_choices, "noised") == TB_FLOW_PROMPT_NOISED);
    CHECK(tb_choice_value(tb_device_choices, "cpu") == TB_DEVICE_CPU);
    CHECK(tb_choice_value(tb_dllm_cache_choices, "nope") == -1);
    CHECK_STR(tb_choice_name(tb_dllm_cache_choices, 99), "?");

    /* an option's value as the host passes it, looked up in its choices */
    const tb_option_decl decls[] = {
        TB_OPT_DECL_DEVICE("where it runs"),
        {"cache", TB_OPT_ENUM, "none", "the cache", TB_CHOICES_TEXT(TB_DLLM_CACHE_LIST), 1, 0, 0},
        TB_OPT_DECL_DTYPE,
    };
    tb_option_value given[] = {{"cache", "prefix", 0, 0}};
    CHECK(tb_opt_choice(given, 1, decls, 1, tb_dllm_cache_choices) == TB_DLLM_CACHE_PREFIX);
    CHECK(tb_opt_choice(given, 1, decls, 2, tb_dtype_choices) == TB_DTYPE_AUTO); /* absent: its default */
    CHECK_STR(decls[0].default_value, "cpu");
    CHECK(tb_device_wants_gpu("cpu") == 0);
    return check_done();
}
