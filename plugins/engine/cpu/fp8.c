/* fp8.c — see fp8.h. */
#include "fp8.h"

#include "safetensors.h" /* bf16 */

static int row_exp(const float *w, size_t cols)
{
    float amax = 0.0f;
    for (size_t c = 0; c < cols; c++)
        amax = fabsf(w[c]) > amax ? fabsf(w[c]) : amax;
    return tb_fp8_scale_exp(amax);
}

void tb_fp8_quantize_rows(const float *w, size_t rows, size_t cols, uint8_t *q, float *scale)
{
    for (size_t r = 0; r < rows; r++) {
        const float *wr = w + r * cols;
        int k = row_exp(wr, cols);
        scale[r] = ldexpf(1.0f, k);
        for (size_t c = 0; c < cols; c++)
            q[r * cols + c] = tb_e4m3_encode(ldexpf(wr[c], -k));
    }
}

void tb_fp8_dequantize_rows(const uint8_t *q, const float *scale, size_t rows, size_t cols, float *w)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++)
            w[r * cols + c] = tb_e4m3_decode(q[r * cols + c]) * scale[r];
}

void tb_fp8_round_rows(float *w, size_t rows, size_t cols)
{
    for (size_t r = 0; r < rows; r++) {
        float *wr = w + r * cols;
        int k = row_exp(wr, cols);
        for (size_t c = 0; c < cols; c++)
            wr[c] = ldexpf(tb_e4m3_decode(tb_e4m3_encode(ldexpf(wr[c], -k))), k);
    }
}

void tb_fp8_round_input_rows(float *a, size_t rows, size_t cols, size_t ld)
{
    for (size_t r = 0; r < rows; r++) {
        float *ar = a + r * ld;
        for (size_t i = 0; i < cols; i++)
            ar[i] = tb_bf16_to_f32(tb_f32_to_bf16(ar[i]));
        tb_fp8_round_rows(ar, 1, cols);
    }
}
