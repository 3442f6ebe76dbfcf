/* gpu_kprof.h — a per-kernel time table of a process's GPU work, from
 * CUPTI's activity records, for profiling the paths the suites run (issue
 * 42 item 4) where ncu cannot follow the runner's forked worker.
 *
 * Off unless TB_GPU_KERNEL_PROFILE=PATH is set. Then the first context to
 * begin (after its load and GEMV calibration: those kernels are not in the
 * table) turns CUPTI's kernel records on, and when the last one ends the
 * table is appended to PATH: per kernel (demangled, arguments cut) its
 * launches, summed, mean, min and max time and share of all kernel time;
 * above it the kernels' summed time against the span from the first
 * kernel's start to the last one's end (host time between calls included,
 * so 1 - busy/span is the device's idle share over the run, where no two
 * kernels overlap: under PDL or on two streams the overlap counts twice
 * in busy). Kernels in
 * CUDA graphs count one by one. libcupti is opened at run time
 * (dlopen), so a build or a run without the variable needs none.
 * docs/PERFORMANCE.md says how to read it. */
#ifndef TB_GPU_KPROF_H
#define TB_GPU_KPROF_H

#ifdef __cplusplus
extern "C" {
#endif

/* One context starts being profiled; what: a label for the table's header
 * (the model and dtype). Returns 1 when profiling is on (the caller then
 * calls tb_gpu_kprof_end once), 0 when off or CUPTI failed (a message on
 * stderr, once). */
int tb_gpu_kprof_begin(const char *what);

/* The ceilings' measurement (gpu_ceilings.cu) launches copies and the
 * forward's own GEMM kernels: between pause(1) and pause(0) no launch is
 * recorded. Nests; a no-op while profiling is off. */
void tb_gpu_kprof_pause(int pause);

/* That context is done: the last one flushes the records and appends the
 * table to TB_GPU_KERNEL_PROFILE's file. */
void tb_gpu_kprof_end(void);

#ifdef __cplusplus
}

// A scope whose launches stay out of the table: a context's load (its
// random weights, the GEMV calibration) while another context profiles,
// the ceilings' measurement.
struct kprof_paused {
    kprof_paused() { tb_gpu_kprof_pause(1); }
    ~kprof_paused() { tb_gpu_kprof_pause(0); }
    kprof_paused(const kprof_paused &) = delete;
    kprof_paused &operator=(const kprof_paused &) = delete;
};
#endif

#endif
