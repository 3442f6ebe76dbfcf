/* engine_options.c — see engine_options.h. */
#include "engine_options.h"

#include <stdlib.h>
#include <string.h>

#ifdef TB_HAVE_CUDA
#include "gpu.h"
#endif

const tb_choice tb_device_choices[] = TB_CHOICES_TABLE(TB_DEVICE_LIST);
const tb_choice tb_dtype_choices[] = TB_CHOICES_TABLE(TB_DTYPE_LIST);

int tb_choice_value(const tb_choice *choices, const char *name)
{
    for (; choices->name; choices++)
        if (strcmp(choices->name, name) == 0)
            return choices->value;
    return -1;
}

const char *tb_choice_name(const tb_choice *choices, int value)
{
    for (; choices->name; choices++)
        if (choices->value == value)
            return choices->name;
    return "?";
}

const tb_option_value *tb_opt_get(const tb_option_value *values, uint32_t n, const tb_option_decl *decls, int which)
{
    for (uint32_t i = 0; values && i < n; i++)
        if (strcmp(values[i].name, decls[which].name) == 0)
            return &values[i];
    return NULL;
}

int64_t tb_opt_int(const tb_option_value *values, uint32_t n, const tb_option_decl *decls, int which)
{
    const tb_option_value *v = tb_opt_get(values, n, decls, which);
    return v ? v->i : strtoll(decls[which].default_value, NULL, 10);
}

double tb_opt_float(const tb_option_value *values, uint32_t n, const tb_option_decl *decls, int which)
{
    const tb_option_value *v = tb_opt_get(values, n, decls, which);
    return v ? v->f : strtod(decls[which].default_value, NULL);
}

const char *tb_opt_text(const tb_option_value *values, uint32_t n, const tb_option_decl *decls, int which)
{
    const tb_option_value *v = tb_opt_get(values, n, decls, which);
    return v ? v->text : decls[which].default_value;
}

int tb_opt_choice(const tb_option_value *values, uint32_t n, const tb_option_decl *decls, int which,
                  const tb_choice *choices)
{
    return tb_choice_value(choices, tb_opt_text(values, n, decls, which));
}

int tb_device_wants_gpu(const char *device)
{
    int d = tb_choice_value(tb_device_choices, device);
    if (d == TB_DEVICE_CUDA)
        return 1;
#ifdef TB_HAVE_CUDA
    char why[256];
    if (d == TB_DEVICE_AUTO)
        return tb_gpu_probe(why, sizeof why) == 0;
#endif
    return 0;
}
