// gpu_kprof.cu — see gpu_kprof.h. Host code only: CUPTI's activity API,
// opened with dlopen, its kernel records summed by kernel name.
#include "gpu_kprof.h"

#include <cuda_runtime.h>
#include <cupti.h>
#include <cxxabi.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

namespace {

// CUPTI's entry points, taken from libcupti at the first begin
struct cupti_api {
    CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);
    CUptiResult (*enable)(CUpti_ActivityKind);
    CUptiResult (*disable)(CUpti_ActivityKind);
    CUptiResult (*flush_all)(uint32_t);
    CUptiResult (*next_record)(uint8_t *, size_t, CUpti_Activity **);
    CUptiResult (*version)(uint32_t *);
    CUptiResult (*dropped)(CUcontext, uint32_t, size_t *);
};

struct kernel_sum {
    char *name;                       // demangled, arguments cut
    uint64_t launches, ns, min_ns, max_ns;
};

// the raw name pointers CUPTI hands out (one a function) to their sums
enum { NAME_SLOTS = 4096 };

// Two locks: ctl over who profiles and every CUPTI call that turns
// recording on or off or flushes; mu over the sums alone, the one lock the
// buffer callback takes (CUPTI calls it on its own threads holding a lock
// of its own, so no CUPTI call is made while mu is held).
struct kprof_state {
    pthread_mutex_t ctl, mu;
    int users;       // contexts between begin and end (ctl)
    int paused;      // tb_gpu_kprof_pause's depth (ctl)
    int failed;      // CUPTI could not be used: said once, off for the process (ctl)
    void *lib;
    cupti_api api;
    char path[4096]; // TB_GPU_KERNEL_PROFILE at the first begin
    kernel_sum *sums;
    size_t n_sums, cap_sums;
    const char *raw[NAME_SLOTS]; // open addressing: raw name -> sums index
    int idx[NAME_SLOTS];
    uint64_t first_start, last_end, records, dropped;
    char what[256];
};

kprof_state S = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, NULL, {}, {0}, NULL, 0, 0, {}, {}, 0, 0, 0, 0, {0}};

enum { BUFFER_BYTES = 8 << 20 };

void CUPTIAPI on_request(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = (uint8_t *)aligned_alloc(8, BUFFER_BYTES);
    *size = *buffer ? BUFFER_BYTES : 0;
    *max_records = 0;
}

// "void (anonymous namespace)::k_attn_span<128, (bool)1>(const bf16 *, ...)"
// -> "k_attn_span<128, (bool)1>": the return type, the anonymous
// namespace's qualifier and the argument list go
char *short_name(const char *raw)
{
    int status = 0;
    char *d = abi::__cxa_demangle(raw, NULL, NULL, &status);
    char *s = strdup(status == 0 && d ? d : raw);
    free(d);
    if (!s)
        return NULL;
    static const char anon[] = "(anonymous namespace)::";
    for (char *at; (at = strstr(s, anon)) != NULL;)
        memmove(at, at + sizeof anon - 1, strlen(at + sizeof anon - 1) + 1);
    const char *from = strncmp(s, "void ", 5) == 0 ? s + 5 : s;
    size_t n = 0;
    for (int depth = 0; from[n]; n++) {
        if (from[n] == '<')
            depth++;
        else if (from[n] == '>')
            depth--;
        else if (from[n] == '(' && depth == 0)
            break;
    }
    char *out = strndup(from, n);
    free(s);
    return out;
}

// the sums entry of a raw name (S.mu held); -1 when out of memory
int sum_of(const char *raw)
{
    size_t h = ((uintptr_t)raw >> 4) % NAME_SLOTS;
    for (size_t probe = 0; probe < NAME_SLOTS; probe++, h = (h + 1) % NAME_SLOTS) {
        if (S.raw[h] == raw)
            return S.idx[h];
        if (S.raw[h])
            continue;
        char *name = short_name(raw);
        if (!name)
            return -1;
        int at = -1;
        for (size_t i = 0; i < S.n_sums && at < 0; i++)
            if (strcmp(S.sums[i].name, name) == 0)
                at = (int)i;
        if (at >= 0) {
            free(name);
        } else {
            if (S.n_sums == S.cap_sums) {
                size_t cap = S.cap_sums ? 2 * S.cap_sums : 64;
                kernel_sum *grown = (kernel_sum *)realloc(S.sums, cap * sizeof *grown);
                if (!grown) {
                    free(name);
                    return -1;
                }
                S.sums = grown, S.cap_sums = cap;
            }
            S.sums[S.n_sums] = kernel_sum{name, 0, 0, UINT64_MAX, 0};
            at = (int)S.n_sums++;
        }
        S.raw[h] = raw, S.idx[h] = at;
        return at;
    }
    return -1; // more distinct names than slots
}

void CUPTIAPI on_complete(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
    (void)size;
    size_t lost = 0;
    if (S.api.dropped && S.api.dropped(ctx, stream, &lost) != CUPTI_SUCCESS)
        lost = 0;
    pthread_mutex_lock(&S.mu);
    S.dropped += lost, S.records += lost;
    CUpti_Activity *rec = NULL;
    while (S.api.next_record && S.api.next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
            continue;
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
        S.records++;
        if (!k->start || !k->end || k->end < k->start || !k->name) { // unfinished at a forced flush
            S.dropped++;
            continue;
        }
        int at = sum_of(k->name);
        if (at < 0) {
            S.dropped++;
            continue;
        }
        kernel_sum *e = &S.sums[at];
        uint64_t ns = k->end - k->start;
        e->launches++, e->ns += ns;
        e->min_ns = ns < e->min_ns ? ns : e->min_ns;
        e->max_ns = ns > e->max_ns ? ns : e->max_ns;
        if (!S.first_start || k->start < S.first_start)
            S.first_start = k->start;
        S.last_end = k->end > S.last_end ? k->end : S.last_end;
    }
    pthread_mutex_unlock(&S.mu);
    free(buffer);
}

int said_off(const char *why)
{
    fprintf(stderr, "TB_GPU_KERNEL_PROFILE: no kernel table: %s\n", why);
    S.failed = 1;
    return 0;
}

// open libcupti, check its version, register the buffers (S.ctl held)
int open_cupti(void)
{
    // the version is checked below, whichever name opened
    const char *names[] = {"libcupti.so", "libcupti.so.13", "libcupti.so.12"};
    for (size_t i = 0; i < sizeof names / sizeof *names && !S.lib; i++)
        S.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!S.lib)
        return said_off("cannot open libcupti (put the CUDA toolkit's lib64 on LD_LIBRARY_PATH)");
#define SYM(field, name) *(void **)&S.api.field = dlsym(S.lib, name)
    SYM(register_callbacks, "cuptiActivityRegisterCallbacks");
    SYM(enable, "cuptiActivityEnable");
    SYM(disable, "cuptiActivityDisable");
    SYM(flush_all, "cuptiActivityFlushAll");
    SYM(next_record, "cuptiActivityGetNextRecord");
    SYM(version, "cuptiGetVersion");
    SYM(dropped, "cuptiActivityGetNumDroppedRecords");
#undef SYM
    if (!S.api.register_callbacks || !S.api.enable || !S.api.disable || !S.api.flush_all || !S.api.next_record ||
        !S.api.version)
        return said_off("libcupti lacks the activity API");
    // the records are read as this header's CUpti_ActivityKernel10: the
    // library must be of the same major version
    uint32_t v = 0;
    if (S.api.version(&v) != CUPTI_SUCCESS || v / 10000 != CUPTI_API_VERSION / 10000) {
        char why[128];
        snprintf(why, sizeof why, "libcupti API version %u, built against %u", v, (unsigned)CUPTI_API_VERSION);
        return said_off(why);
    }
    if (S.api.register_callbacks(on_request, on_complete) != CUPTI_SUCCESS)
        return said_off("cuptiActivityRegisterCallbacks failed");
    return 1;
}

int by_time(const void *a, const void *b)
{
    const kernel_sum *x = (const kernel_sum *)a, *y = (const kernel_sum *)b;
    return x->ns < y->ns ? 1 : x->ns > y->ns ? -1 : strcmp(x->name, y->name);
}

// append the table to the file (S.mu held), then clear the sums
void write_table(const char *path)
{
    qsort(S.sums, S.n_sums, sizeof *S.sums, by_time);
    uint64_t busy = 0, launches = 0;
    for (size_t i = 0; i < S.n_sums; i++)
        busy += S.sums[i].ns, launches += S.sums[i].launches;
    uint64_t span = S.last_end > S.first_start ? S.last_end - S.first_start : 0;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return;
    fprintf(f, "# tokbench kernel profile (TB_GPU_KERNEL_PROFILE): pid %d, %s\n", (int)getpid(), S.what);
    fprintf(f, "# %llu launches, %.3f ms of kernel time over a span of %.3f ms (first start to last end, host time "
               "between calls included): busy %.1f%%%s\n",
            (unsigned long long)launches, busy / 1e6, span / 1e6, span ? 100.0 * busy / span : 0.0,
            S.dropped ? " (some records dropped: see below)" : "");
    if (S.dropped)
        fprintf(f, "# records dropped: %llu of %llu\n", (unsigned long long)S.dropped, (unsigned long long)S.records);
    fprintf(f, "share_%%\ttotal_ms\tlaunches\tmean_us\tmin_us\tmax_us\tkernel\n");
    for (size_t i = 0; i < S.n_sums; i++) {
        const kernel_sum *e = &S.sums[i];
        fprintf(f, "%.2f\t%.3f\t%llu\t%.2f\t%.2f\t%.2f\t%s\n", busy ? 100.0 * e->ns / busy : 0.0, e->ns / 1e6,
                (unsigned long long)e->launches, e->launches ? e->ns / 1e3 / e->launches : 0.0, e->min_ns / 1e3,
                e->max_ns / 1e3, e->name);
    }
    fputc('\n', f);
    fclose(f);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, text, len) != (ssize_t)len)
        fprintf(stderr, "TB_GPU_KERNEL_PROFILE: cannot write %s\n", path);
    if (fd >= 0)
        close(fd);
    free(text);
}

void clear_sums(void)
{
    for (size_t i = 0; i < S.n_sums; i++)
        free(S.sums[i].name);
    S.n_sums = 0;
    memset(S.raw, 0, sizeof S.raw);
    S.first_start = S.last_end = S.records = S.dropped = 0;
    S.what[0] = 0;
}

} // namespace

extern "C" int tb_gpu_kprof_begin(const char *what)
{
    const char *path = getenv("TB_GPU_KERNEL_PROFILE");
    if (!path || !*path)
        return 0;
    pthread_mutex_lock(&S.ctl);
    int on = 0;
    if (!S.failed && (S.lib || open_cupti())) {
        if (S.users > 0 || S.api.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == CUPTI_SUCCESS) {
            on = 1;
            if (S.users++ == 0) {
                S.paused = 0;
                snprintf(S.path, sizeof S.path, "%s", path);
            }
            pthread_mutex_lock(&S.mu);
            size_t n = strlen(S.what);
            if (n + 3 < sizeof S.what)
                snprintf(S.what + n, sizeof S.what - n, "%s%s", n ? "; " : "", what);
            pthread_mutex_unlock(&S.mu);
        } else {
            said_off("cuptiActivityEnable failed");
        }
    }
    pthread_mutex_unlock(&S.ctl);
    return on;
}

extern "C" void tb_gpu_kprof_pause(int pause)
{
    pthread_mutex_lock(&S.ctl);
    if (S.users > 0) {
        // launches before the disable are recorded as they end; none after it
        if (pause && S.paused++ == 0)
            S.api.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
        else if (!pause && S.paused > 0 && --S.paused == 0)
            S.api.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    }
    pthread_mutex_unlock(&S.ctl);
}

extern "C" void tb_gpu_kprof_end(void)
{
    pthread_mutex_lock(&S.ctl);
    if (S.users > 0 && --S.users == 0) {
        (void)cudaDeviceSynchronize(); // every launch has ended: its record is complete
        S.api.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
        S.api.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED); // calls on_complete, which takes S.mu
        pthread_mutex_lock(&S.mu);
        write_table(S.path);
        clear_sums();
        pthread_mutex_unlock(&S.mu);
    }
    pthread_mutex_unlock(&S.ctl);
}
