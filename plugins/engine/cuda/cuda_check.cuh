// cuda_check.cuh — CUDA and cuBLAS failures as statuses (STYLE.md: errors
// are values), for every CUDA file of the engine and of the backends on
// it (flow_gpu.cu). CK(call) / CB(call) return fail(g, message) from the
// calling function when the call fails: the file provides a context `g`
// and fail(g, fmt, ...), which records the message and returns -1.
#ifndef TB_ENGINE_CUDA_CHECK_CUH
#define TB_ENGINE_CUDA_CHECK_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>

#define CK(call)                                                                                    \
    do {                                                                                            \
        cudaError_t e_ = (call);                                                                    \
        if (e_ != cudaSuccess)                                                                      \
            return fail(g, "%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_));     \
    } while (0)
#define CB(call)                                                                                    \
    do {                                                                                            \
        cublasStatus_t s_ = (call);                                                                 \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                            \
            return fail(g, "%s:%d: %s: cuBLAS status %d", __FILE__, __LINE__, #call, (int)s_);     \
    } while (0)
// after a kernel launch: its launch error, if any
#define LAUNCHED() CK(cudaGetLastError())

#endif
