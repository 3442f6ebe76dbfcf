/* hwinfo.h — what machine a session ran on.
 *
 * CPU, memory, OS and kernel come from /proc, uname and sysconf; GPUs from
 * NVML, loaded with dlopen("libnvidia-ml.so.1") so tokbench neither links
 * nor needs the NVIDIA driver: without it, gpu_count is 0 and nvml_status
 * says why (absence is a fact to record, not an error). */
#ifndef TB_HWINFO_H
#define TB_HWINFO_H

#include <stddef.h>
#include <stdint.h>

#define TB_MAX_GPUS 16

typedef struct tb_gpu_info {
    char name[128];               /* "NVIDIA H200" */
    char uuid[96];
    char compute_capability[16];  /* "9.0" */
    uint64_t memory_bytes;        /* total device memory */
} tb_gpu_info;

typedef struct tb_machine_info {
    char hostname[256];
    char cpu_model[256];          /* /proc/cpuinfo "model name" */
    int cpu_cores;                /* logical CPUs online */
    uint64_t ram_bytes;           /* MemTotal */
    char os[256];                 /* /etc/os-release PRETTY_NAME */
    char kernel[256];             /* uname -r */
    char arch[32];                /* uname -m */
    int gpu_count;                /* 0 when NVML is absent or finds none */
    tb_gpu_info gpus[TB_MAX_GPUS];
    char gpu_driver[64];          /* NVIDIA driver version, "" if none */
    char cuda_driver_version[32]; /* "13.0" from NVML, "" if none */
    char nvml_status[160];        /* "ok", or why there is no GPU data */
    /* sha256 (hex) over the fields that identify the machine (hostname,
     * cpu, cores, ram, os, kernel, arch, GPU names/uuids, driver). */
    char fingerprint[65];
} tb_machine_info;

/* Fill `out`. Never fails: what cannot be read is left "" / 0. */
void tb_machine_info_collect(tb_machine_info *out);

/* The whole record as a JSON object (malloc'd string, caller frees), or
 * NULL when out of memory. */
char *tb_machine_info_json(const tb_machine_info *info);

/* NVML's CUDA driver version integer (13000) as "13.0" into buf[size];
 * "" for v <= 0. Exposed for tests. */
void tb_hwinfo_format_cuda_version(int v, char *buf, size_t size);

#endif
