/* fuzz_safetensors.c — libFuzzer target for the safetensors reader: any
 * bytes must give either an error naming the file or tensors whose every
 * byte lies inside the input (ASan checks the reads; the bounds are also
 * checked here, since a pointer into the input's slack would pass ASan).
 * Built and run by tests/fuzz/run.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tb_weights *w = NULL;
    char err[512];
    if (tb_weights_open_memory(data, size, "fuzz.safetensors", &w, err, sizeof err) != 0) {
        if (w || strncmp(err, "fuzz.safetensors: ", 18) != 0) {
            fprintf(stderr, "bad error: \"%s\"\n", err);
            abort();
        }
        return 0;
    }
    float buf[256];
    for (size_t i = 0; i < tb_weights_count(w); i++) {
        const tb_tensor *t = tb_weights_at(w, i);
        const uint8_t *p = t->data;
        if (p < data || t->n_bytes > (size_t)(data + size - p) ||
            tb_weights_find(w, t->name) != t ||
            t->n_bytes != (size_t)t->n_elements * tb_dtype_size(t->dtype) ||
            tb_weights_expect(w, t->name, t->ndim, t->shape, err, sizeof err) != 0)
            abort();
        /* read every byte */
        size_t es = tb_dtype_size(t->dtype);
        for (int64_t k = 0; k < t->n_elements; k += 256) {
            size_t n = (size_t)(t->n_elements - k < 256 ? t->n_elements - k : 256);
            tb_to_f32(t->dtype, p + (size_t)k * es, buf, n);
        }
    }
    tb_weights_close(w);
    return 0;
}
