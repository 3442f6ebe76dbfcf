/* fp8.h — FP8 (E4M3) weights with one scale per output channel, and
 * E4M3 inputs with one scale per row (`dtype = fp8`,
 * docs/ARCHITECTURE.md): the format, shared by the CPU path and the CUDA
 * kernels (the inline functions compile for both), so both quantize a
 * value to the same byte.
 *
 * Under dtype = fp8 each of a layer's four projections multiplies E4M3
 * codes by E4M3 codes, summing in float32: its weights quantized at load,
 * its input (the bf16 activation row) quantized on the fly, each row with
 * its own scale by the rule below, as FP8 tensor cores take them (W8A8,
 * dynamic per-token scales, as the serving stacks' FP8 does).
 *
 * E4M3 as OCP's FP8 spec and CUDA's __nv_fp8_e4m3 define it: sign, 4
 * exponent bits (bias 7), 3 mantissa bits, no infinities, largest finite
 * 448, 0x7F/0xFF NaN (never produced here), subnormals m/8 x 2^-6.
 *
 * A row (an output channel, row of W[out][in]; or an input row) gets the
 * scale 2^k, the smallest power of two with max|w| / 2^k <= 448, and each
 * value the E4M3 value nearest w / 2^k (ties to even, saturating at +-448): w ~=
 * e4m3(w / 2^k) x 2^k. A power of two because a float format's relative
 * precision does not depend on where the row's maximum lands in its range
 * (a non-power scale would gain nothing but the top half-binade), and it
 * makes dividing and multiplying by the scale exact, so quantizing the
 * dequantized weights again gives the same bytes and scales (the GPU
 * quantizes what the CPU path rounded and gets its codes; tests check). */
#ifndef TB_ENGINE_FP8_H
#define TB_ENGINE_FP8_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define TB_FP8_HD __host__ __device__
#else
#define TB_FP8_HD
#endif

#define TB_E4M3_MAX 448.0f

/* The E4M3 byte nearest v (ties to even; |v| >= 448 saturates to +-448;
 * NaN gives 0). */
TB_FP8_HD static inline uint8_t tb_e4m3_encode(float v)
{
    uint8_t sign = signbit(v) ? 0x80 : 0;
    float a = fabsf(v);
    if (!(a == a))
        return 0;
    if (a >= TB_E4M3_MAX)
        return sign | 0x7E;
    int e;
    (void)frexpf(a, &e); /* a = m 2^e, m in [0.5, 1): a's binade is 2^(e - 1) */
    int E = e - 1 < -6 ? -6 : e - 1;    /* below 2^-6: the subnormal quantum */
    float q = rintf(ldexpf(a, 3 - E)); /* units of the binade's quantum 2^(E - 3): [0, 16] */
    if (q >= 16.0f) { /* rounded up into the next binade */
        E += 1;
        q = 8.0f;
    }
    int code = q < 8.0f ? (int)q /* subnormal (E == -6) or zero */ : ((E + 7) << 3) | ((int)q - 8);
    return (uint8_t)(sign | (code > 0x7E ? 0x7E : code));
}

/* The value of E4M3 byte c. */
TB_FP8_HD static inline float tb_e4m3_decode(uint8_t c)
{
    int e = (c >> 3) & 15, m = c & 7;
    float v = e == 0 ? ldexpf((float)m, -9) : e == 15 && m == 7 ? NAN : ldexpf((float)(8 + m), e - 10);
    return c & 0x80 ? -v : v;
}

/* k of a row's scale 2^k for the row's largest magnitude amax (0 when
 * amax is 0 or not finite: an all-zero row keeps scale 1). */
TB_FP8_HD static inline int tb_fp8_scale_exp(float amax)
{
    if (!(amax > 0.0f) || isinf(amax))
        return 0;
    int k = ilogbf(amax) - 8; /* 448 < 2^9: start near, then step exactly */
    while (amax > ldexpf(TB_E4M3_MAX, k))
        k++;
    while (amax <= ldexpf(TB_E4M3_MAX, k - 1))
        k--;
    return k;
}

/* Quantize W[rows][cols] (row-major, float32): codes q[rows][cols] and
 * scales scale[rows] (2^k each, float32). */
void tb_fp8_quantize_rows(const float *w, size_t rows, size_t cols, uint8_t *q, float *scale);
/* w[r][c] = e4m3(q[r][c]) x scale[r]. */
void tb_fp8_dequantize_rows(const uint8_t *q, const float *scale, size_t rows, size_t cols, float *w);
/* Both in place: W[rows][cols] becomes the float32 values of its FP8
 * form (the CPU path's weights under dtype = fp8: its matrix products
 * then compute exactly what products over the E4M3 codes and scales
 * would, dequantized to float32 as they are read). No allocation. */
void tb_fp8_round_rows(float *w, size_t rows, size_t cols);
/* dtype = fp8: a projection's input, rows of width cols at stride ld,
 * rounded in place to its E4M3 form with one scale per row, so the
 * product that follows is one over E4M3 codes on both sides (the CPU
 * twins: cpu_forward.c, moe.c, dgemma_forward.c). From the bf16 value,
 * as the device holds activations: E4M3 of bf16(x) and of x differ where
 * x lies near the middle of two E4M3 values, and a rounding taken the
 * other way there is a whole E4M3 step (1/16 of the value), which would
 * part the two paths far more than bf16 does. */
void tb_fp8_round_input_rows(float *a, size_t rows, size_t cols, size_t ld);

#endif
