/* flow_sampler.h — sampling a continuous (embedding-space) diffusion LM,
 * written once over a denoiser callback (the CPU engine; the GPU path,
 * flow_gpu.cu, runs the same steps on the device and is tested against it).
 *
 * Noise level gamma (a log-SNR with the sign of noise): alpha(g) =
 * sqrt(sigmoid(-g)), sigma(g) = sqrt(sigmoid(g)), z = alpha x + sigma eps.
 * Schedule of N steps (LangFlow's Gumbel proposal): q_i = linspace(1 -
 * t_eps, t_eps, N)[i], gamma_i = loc - scale ln(-ln q_i), clamped to
 * [loc - scale ln(-ln cutoff), loc - scale ln(cutoff)]; decreasing.
 * Start: z ~ N(0, I) over the generated positions, x_sc = 0. Step i < N-1
 * (t = gamma_i, s = gamma_{i+1}): x0 = softmax(f(z, t, x_sc)) E, x_sc = x0;
 *   euler (= DDIM, as published): z = alpha(s) x0 + sigma(s)/sigma(t) (z - alpha(t) x0)
 *   heun: the probability-flow ODE in y = z / alpha, rho = sigma / alpha:
 *         e1 = (y - x0) / rho(t), y' = y + (rho(s) - rho(t)) e1;
 *         x0' = softmax(f(alpha(s) y', s, x0)) E, e2 = (y' - x0') / rho(s);
 *         z = alpha(s) (y + (rho(s) - rho(t)) (e1 + e2) / 2), x_sc = x0'
 * End: tokens = argmax f(z, gamma_{N-1}, x_sc). Forwards: N (euler),
 * 2N - 1 (heun). Prompt positions: `clean` keeps them at their embedding
 * (z = x_sc = E[token]) at every step, as models trained with clean
 * conditions expect; `noised` sets z = alpha e + sigma xi (xi: the
 * starting noise of those positions, the same at every step)
 * before every forward, for models trained unconditionally. Their tokens
 * are the prompt's whatever the argmax says. */
#ifndef TB_FLOW_SAMPLER_H
#define TB_FLOW_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "engine_options.h"
#include "flow_model.h"

/* The solvers and prompt modes by name (engine_options.h's choice lists:
 * the enums, the options' choices and the name lookup come from them). */
#define TB_FLOW_SOLVER_LIST(X, SEP) X(TB_FLOW_EULER, "euler") SEP X(TB_FLOW_HEUN, "heun")
typedef enum tb_flow_solver { TB_CHOICES_ENUM(TB_FLOW_SOLVER_LIST) } tb_flow_solver;
#define TB_FLOW_PROMPT_LIST(X, SEP) X(TB_FLOW_PROMPT_CLEAN, "clean") SEP X(TB_FLOW_PROMPT_NOISED, "noised")
typedef enum tb_flow_prompt { TB_CHOICES_ENUM(TB_FLOW_PROMPT_LIST) } tb_flow_prompt;
extern const tb_choice tb_flow_solver_choices[];
extern const tb_choice tb_flow_prompt_choices[];

/* The noise levels of an N-step schedule into gamma[N]. */
void tb_flow_schedule(const tb_flow_config *c, int N, double *gamma);
/* The schedule's lowest level, loc - scale ln(-ln cutoff): the clamp
 * every schedule ends at or above, and the level of prompt positions in a
 * "prompt_gamma": "min" model (flow_model.h). */
double tb_flow_gamma_min(const tb_flow_config *c);
double tb_flow_alpha(double gamma);
double tb_flow_sigma(double gamma);

/* What the sampler needs of an engine: logits[B][L][V] of f(z, gamma,
 * x_sc, pad, gen0) (flow_cpu.h), and the readout x0 = softmax(logits) E
 * (the logits may be overwritten). 0 or -1. The plugin's binding is
 * flow_net_cpu.c's (flow_net.h: the network behind one interface); tests
 * bind their own to record the logits. */
typedef struct tb_flow_engine {
    void *ctx;
    int (*forward)(void *ctx, const float *z, const float *x_sc, const double *gamma, const int *pad, int B, int L,
                   int gen0, float *logits);
    void (*x0)(void *ctx, float *logits, size_t rows, float *x0);
} tb_flow_engine;

typedef struct tb_flow_params {
    int steps;               /* N >= 1 */
    tb_flow_solver solver;
    tb_flow_prompt prompt;
} tb_flow_params;

/* After each forward: the step that ran (0-based over forwards), for
 * emissions and cancellation; a nonzero return stops the sampler (-1). */
typedef int (*tb_flow_progress)(void *ctx, int forward);

/* Sample B canvases of L positions. tokens[B][L] holds the prompts, each
 * right-aligned after pad[b] filler positions and followed by the
 * positions to generate from gen0 = L - n_gen on (the same for all);
 * noise[B][L][D] is the starting noise (N(0, I): the caller's generator,
 * or a reference's for golden tests), also the noised prompt's source
 * (its prompt rows reused step after step). On return tokens[b][gen0..L)
 * hold the argmax tokens. *forwards: the forwards run. Returns 0, or -1
 * (out of memory, an engine failure, or progress asked to stop). */
int tb_flow_sample(const tb_flow_model *m, const tb_flow_engine *e, const tb_flow_params *p, int32_t *tokens,
                   const int *pad, int B, int L, int gen0, const float *noise, int *forwards, tb_flow_progress progress,
                   void *progress_ctx);

/* Standard normal samples into x[n] from a splitmix64 stream (Box-Muller):
 * pair i (x[2i], x[2i + 1]) from the stream's outputs 2i + 1 and 2i + 2,
 * output k mixing *state + k 0x9E3779B97F4A7C15 (so the GPU makes the same
 * numbers in parallel: flow_gpu.h); *state advances past them. */
void tb_flow_gaussian(uint64_t *state, float *x, size_t n);
/* The stream state of canvas r's starting noise for a request of seed
 * `seed` (the plugin's; one definition for the CPU and GPU paths). */
uint64_t tb_flow_noise_state(uint64_t seed, uint32_t r);

#endif
