/* hwinfo.c — see hwinfo.h.
 *
 * Everything here is best effort: a field that cannot be read stays "" / 0
 * and collection carries on, because a benchmark result is still worth
 * keeping when, say, /etc/os-release is missing in a container. */
#define _GNU_SOURCE
#include "hwinfo.h"

#include "util.h"

#include <cjson/cJSON.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

/* NVML encodes the CUDA driver version as 1000*major + 10*minor. */
void tb_hwinfo_format_cuda_version(int v, char *buf, size_t size)
{
    if (size == 0)
        return;
    if (v <= 0) {
        buf[0] = '\0';
        return;
    }
    snprintf(buf, size, "%d.%d", v / 1000, (v % 1000) / 10);
}

/* ---- CPU, memory, OS ---------------------------------------------------- */

/* Value of the first "key<ws>: value" line of /proc/cpuinfo whose key is
 * exactly `key` and whose value is non-empty, copied into dst; 1 if found. */
static int cpuinfo_value(const char *text, const char *key, char *dst,
                         size_t size)
{
    size_t klen = strlen(key);
    for (const char *line = text; line && *line;) {
        const char *nl = strchr(line, '\n');
        const char *end = nl ? nl : line + strlen(line);
        const char *colon = memchr(line, ':', (size_t)(end - line));
        if (colon) {
            const char *ke = colon; /* key ends before tabs/spaces */
            while (ke > line && (ke[-1] == ' ' || ke[-1] == '\t'))
                ke--;
            if ((size_t)(ke - line) == klen && memcmp(line, key, klen) == 0) {
                char *v = tb_xstrndup(colon + 1, (size_t)(end - colon - 1));
                tb_strlcpy(dst, tb_trim(v), size);
                free(v);
                if (dst[0])
                    return 1;
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    return 0;
}

static void read_cpu_model(tb_machine_info *out, const struct utsname *un)
{
    char *text = tb_read_file("/proc/cpuinfo", NULL);
    if (text) {
        /* x86 has "model name"; many ARM kernels only "Hardware"; MIPS
         * has "cpu model". */
        static const char *const keys[] = {"model name", "Hardware", "cpu model"};
        for (size_t i = 0; i < TB_ARRAY_LEN(keys); i++)
            if (cpuinfo_value(text, keys[i], out->cpu_model, sizeof out->cpu_model))
                break;
        free(text);
    }
    if (!out->cpu_model[0] && un)
        tb_strlcpy(out->cpu_model, un->machine, sizeof out->cpu_model);
}

/* MemTotal from /proc/meminfo, which reports kB (KiB in fact). */
static uint64_t read_ram_bytes(void)
{
    char *text = tb_read_file("/proc/meminfo", NULL);
    if (!text)
        return 0;
    uint64_t bytes = 0;
    char *p = strstr(text, "MemTotal:");
    if (p && (p == text || p[-1] == '\n')) {
        char *end;
        unsigned long long kb = strtoull(p + strlen("MemTotal:"), &end, 10);
        if (end != p + strlen("MemTotal:"))
            bytes = (uint64_t)kb * 1024u;
    }
    free(text);
    return bytes;
}

/* Undo os-release's shell-style quoting: '...' is literal; "..." honours
 * backslash escapes of \ " $ `; unquoted values are taken as they are. */
static void os_release_unquote(const char *v, char *dst, size_t size)
{
    tb_str b = {0};
    size_t n = strlen(v);
    if (n >= 2 && v[0] == '\'' && v[n - 1] == '\'') {
        tb_str_appendn(&b, v + 1, n - 2);
    } else if (n >= 2 && v[0] == '"' && v[n - 1] == '"') {
        for (size_t i = 1; i < n - 1; i++) {
            if (v[i] == '\\' && i + 1 < n - 1 && strchr("\\\"$`", v[i + 1]))
                i++;
            tb_str_appendn(&b, v + i, 1);
        }
    } else {
        tb_str_append(&b, v);
    }
    char *s = tb_str_take(&b);
    tb_strlcpy(dst, s, size);
    free(s);
}

static void read_os(tb_machine_info *out)
{
    /* The os-release spec: /etc first, /usr/lib as the fallback. */
    char *text = tb_read_file("/etc/os-release", NULL);
    if (!text)
        text = tb_read_file("/usr/lib/os-release", NULL);
    if (!text)
        return;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        line = tb_trim(line);
        if (strncmp(line, "PRETTY_NAME=", 12) == 0) {
            os_release_unquote(line + 12, out->os, sizeof out->os);
            break;
        }
    }
    free(text);
}

/* ---- NVML --------------------------------------------------------------- */

/* The few NVML types used, declared here so no nvml.h is needed. The ABI is
 * what the driver exports: nvmlReturn_t is an enum (int), 0 = success. */
typedef int nvml_return;
typedef struct nvml_device_st *nvml_device; /* opaque handle */
typedef struct {
    unsigned long long total, free, used; /* bytes */
} nvml_memory;

#define NVML_OK 0

typedef struct nvml_api {
    nvml_return (*init)(void);
    nvml_return (*shutdown)(void);
    nvml_return (*device_count)(unsigned int *);
    nvml_return (*device_by_index)(unsigned int, nvml_device *);
    nvml_return (*device_name)(nvml_device, char *, unsigned int);
    nvml_return (*device_uuid)(nvml_device, char *, unsigned int);
    nvml_return (*device_memory)(nvml_device, nvml_memory *);
    nvml_return (*device_cc)(nvml_device, int *, int *);
    nvml_return (*driver_version)(char *, unsigned int);
    nvml_return (*cuda_driver_version)(int *);
    const char *(*error_string)(nvml_return); /* optional */
} nvml_api;

/* Record the first problem only: it is the one that explains the rest. */
static void nvml_note(tb_machine_info *out, const char *msg)
{
    if (!out->nvml_status[0] || strcmp(out->nvml_status, "ok") == 0)
        tb_strlcpy(out->nvml_status, msg, sizeof out->nvml_status);
}

static void nvml_fail(tb_machine_info *out, const nvml_api *api,
                      const char *what, nvml_return rc)
{
    const char *text = api->error_string ? api->error_string(rc) : NULL;
    char *msg = text ? tb_xasprintf("%s failed: %d (%s)", what, rc, text)
                     : tb_xasprintf("%s failed: %d", what, rc);
    nvml_note(out, msg);
    free(msg);
}

/* dlsym into a function pointer via memcpy: a plain cast from void * is
 * not ISO C, and memcpy keeps -Wpedantic quiet too. */
static int nvml_sym(void *lib, const char *name, void *fnptr, size_t fnsize,
                    tb_machine_info *out)
{
    dlerror();
    void *p = dlsym(lib, name);
    if (!p) {
        const char *err = dlerror();
        char *msg = tb_xasprintf("libnvidia-ml.so.1 lacks %s: %s", name,
                                 err ? err : "NULL symbol");
        nvml_note(out, msg);
        free(msg);
        return 0;
    }
    memcpy(fnptr, &p, fnsize < sizeof p ? fnsize : sizeof p);
    return 1;
}

#define NVML_SYM(lib, name, field, out)                                       \
    nvml_sym((lib), (name), &(field), sizeof(field), (out))

static void read_gpu(tb_machine_info *out, const nvml_api *api, unsigned idx,
                     nvml_device dev)
{
    tb_gpu_info *g = &out->gpus[out->gpu_count];
    char buf[256], what[96];
    nvml_return rc;

    if ((rc = api->device_name(dev, buf, sizeof buf)) == NVML_OK) {
        buf[sizeof buf - 1] = '\0';
        tb_strlcpy(g->name, buf, sizeof g->name);
    } else {
        snprintf(what, sizeof what, "nvmlDeviceGetName(%u)", idx);
        nvml_fail(out, api, what, rc);
    }
    if ((rc = api->device_uuid(dev, buf, sizeof buf)) == NVML_OK) {
        buf[sizeof buf - 1] = '\0';
        tb_strlcpy(g->uuid, buf, sizeof g->uuid);
    } else {
        snprintf(what, sizeof what, "nvmlDeviceGetUUID(%u)", idx);
        nvml_fail(out, api, what, rc);
    }
    nvml_memory mem = {0, 0, 0};
    if ((rc = api->device_memory(dev, &mem)) == NVML_OK) {
        g->memory_bytes = mem.total;
    } else {
        snprintf(what, sizeof what, "nvmlDeviceGetMemoryInfo(%u)", idx);
        nvml_fail(out, api, what, rc);
    }
    int major = 0, minor = 0;
    if ((rc = api->device_cc(dev, &major, &minor)) == NVML_OK) {
        snprintf(g->compute_capability, sizeof g->compute_capability, "%d.%d",
                 major, minor);
    } else {
        snprintf(what, sizeof what, "nvmlDeviceGetCudaComputeCapability(%u)", idx);
        nvml_fail(out, api, what, rc);
    }
    out->gpu_count++;
}

/* Reads while NVML is initialized; the caller shuts it down. */
static void read_nvml_devices(tb_machine_info *out, const nvml_api *api)
{
    char buf[256];
    nvml_return rc;

    if ((rc = api->driver_version(buf, sizeof buf)) == NVML_OK) {
        buf[sizeof buf - 1] = '\0';
        tb_strlcpy(out->gpu_driver, buf, sizeof out->gpu_driver);
    } else {
        nvml_fail(out, api, "nvmlSystemGetDriverVersion", rc);
    }
    int cuda = 0;
    if ((rc = api->cuda_driver_version(&cuda)) == NVML_OK)
        tb_hwinfo_format_cuda_version(cuda, out->cuda_driver_version,
                                      sizeof out->cuda_driver_version);
    else
        nvml_fail(out, api, "nvmlSystemGetCudaDriverVersion_v2", rc);

    unsigned int count = 0;
    if ((rc = api->device_count(&count)) != NVML_OK) {
        nvml_fail(out, api, "nvmlDeviceGetCount_v2", rc);
        return;
    }
    if (count == 0) {
        nvml_note(out, "NVML reports 0 devices");
        return;
    }
    unsigned int n = count > TB_MAX_GPUS ? TB_MAX_GPUS : count;
    for (unsigned int i = 0; i < n; i++) {
        nvml_device dev = NULL;
        if ((rc = api->device_by_index(i, &dev)) != NVML_OK) {
            /* Keep the devices read so far; later indices are unreliable. */
            char what[64];
            snprintf(what, sizeof what, "nvmlDeviceGetHandleByIndex_v2(%u)", i);
            nvml_fail(out, api, what, rc);
            return;
        }
        read_gpu(out, api, i, dev);
    }
    if (count > TB_MAX_GPUS) {
        char *msg = tb_xasprintf("NVML reports %u devices; first %d recorded",
                                 count, TB_MAX_GPUS);
        nvml_note(out, msg);
        free(msg);
    }
}

static void read_nvml(tb_machine_info *out)
{
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *err = dlerror();
        char *msg = tb_xasprintf("libnvidia-ml.so.1 not found: %s",
                                 err ? err : "dlopen failed");
        tb_strlcpy(out->nvml_status, msg, sizeof out->nvml_status);
        free(msg);
        return;
    }

    nvml_api api;
    memset(&api, 0, sizeof api);
    /* Optional: only used to word error messages. */
    void *es = dlsym(lib, "nvmlErrorString");
    if (es)
        memcpy(&api.error_string, &es, sizeof api.error_string);

    int ok = NVML_SYM(lib, "nvmlInit_v2", api.init, out) &&
             NVML_SYM(lib, "nvmlShutdown", api.shutdown, out) &&
             NVML_SYM(lib, "nvmlDeviceGetCount_v2", api.device_count, out) &&
             NVML_SYM(lib, "nvmlDeviceGetHandleByIndex_v2", api.device_by_index, out) &&
             NVML_SYM(lib, "nvmlDeviceGetName", api.device_name, out) &&
             NVML_SYM(lib, "nvmlDeviceGetUUID", api.device_uuid, out) &&
             NVML_SYM(lib, "nvmlDeviceGetMemoryInfo", api.device_memory, out) &&
             NVML_SYM(lib, "nvmlDeviceGetCudaComputeCapability", api.device_cc, out) &&
             NVML_SYM(lib, "nvmlSystemGetDriverVersion", api.driver_version, out) &&
             NVML_SYM(lib, "nvmlSystemGetCudaDriverVersion_v2", api.cuda_driver_version, out);
    if (ok) {
        nvml_return rc = api.init();
        if (rc != NVML_OK) {
            nvml_fail(out, &api, "nvmlInit_v2", rc);
        } else {
            tb_strlcpy(out->nvml_status, "ok", sizeof out->nvml_status);
            read_nvml_devices(out, &api);
            api.shutdown();
        }
    }
    dlclose(lib);
}

/* ---- fingerprint & collect ---------------------------------------------- */

/* Canonical text: a version line, then one "key=value\n" per identifying
 * field in a fixed order. Nothing that varies between runs of the same
 * machine (free memory, NVML status) goes in. */
static void compute_fingerprint(tb_machine_info *out)
{
    tb_str b = {0};
    tb_str_append(&b, "tokbench-machine-fingerprint-v1\n");
    tb_str_appendf(&b, "hostname=%s\n", out->hostname);
    tb_str_appendf(&b, "cpu_model=%s\n", out->cpu_model);
    tb_str_appendf(&b, "cpu_cores=%d\n", out->cpu_cores);
    tb_str_appendf(&b, "ram_bytes=%llu\n", (unsigned long long)out->ram_bytes);
    tb_str_appendf(&b, "os=%s\n", out->os);
    tb_str_appendf(&b, "kernel=%s\n", out->kernel);
    tb_str_appendf(&b, "arch=%s\n", out->arch);
    tb_str_appendf(&b, "gpu_driver=%s\n", out->gpu_driver);
    tb_str_appendf(&b, "gpu_count=%d\n", out->gpu_count);
    for (int i = 0; i < out->gpu_count; i++)
        tb_str_appendf(&b, "gpu[%d]=%s|%s\n", i, out->gpus[i].name,
                       out->gpus[i].uuid);
    tb_sha256_hex(b.s, b.len, out->fingerprint);
    tb_str_free(&b);
}

void tb_machine_info_collect(tb_machine_info *out)
{
    memset(out, 0, sizeof *out);

    /* gethostname need not NUL-terminate on truncation. */
    if (gethostname(out->hostname, sizeof out->hostname) != 0)
        out->hostname[0] = '\0';
    out->hostname[sizeof out->hostname - 1] = '\0';

    struct utsname un;
    int have_un = uname(&un) == 0;
    if (have_un) {
        tb_strlcpy(out->kernel, un.release, sizeof out->kernel);
        tb_strlcpy(out->arch, un.machine, sizeof out->arch);
    }
    read_cpu_model(out, have_un ? &un : NULL);

    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    out->cpu_cores = cores > 0 ? (int)cores : 0;
    out->ram_bytes = read_ram_bytes();
    read_os(out);
    read_nvml(out);
    compute_fingerprint(out);
}

/* ---- JSON --------------------------------------------------------------- */

/* Each cJSON_Add* returns NULL on allocation failure; `ok` accumulates that. */
static int add_str(cJSON *o, const char *k, const char *v)
{
    return cJSON_AddStringToObject(o, k, v) != NULL;
}

static int add_num(cJSON *o, const char *k, double v)
{
    return cJSON_AddNumberToObject(o, k, v) != NULL;
}

char *tb_machine_info_json(const tb_machine_info *info)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    int ok = add_str(o, "hostname", info->hostname) &&
             add_str(o, "cpu_model", info->cpu_model) &&
             add_num(o, "cpu_cores", info->cpu_cores) &&
             /* double: exact up to 2^53 bytes (8 PiB) */
             add_num(o, "ram_bytes", (double)info->ram_bytes) &&
             add_str(o, "os", info->os) &&
             add_str(o, "kernel", info->kernel) &&
             add_str(o, "arch", info->arch) &&
             add_num(o, "gpu_count", info->gpu_count);

    cJSON *gpus = ok ? cJSON_AddArrayToObject(o, "gpus") : NULL;
    ok = ok && gpus;
    int n = info->gpu_count < 0 ? 0
          : info->gpu_count > TB_MAX_GPUS ? TB_MAX_GPUS : info->gpu_count;
    for (int i = 0; ok && i < n; i++) {
        const tb_gpu_info *g = &info->gpus[i];
        cJSON *go = cJSON_CreateObject();
        if (!go || !cJSON_AddItemToArray(gpus, go)) {
            cJSON_Delete(go);
            ok = 0;
            break;
        }
        ok = add_str(go, "name", g->name) && add_str(go, "uuid", g->uuid) &&
             add_str(go, "compute_capability", g->compute_capability) &&
             add_num(go, "memory_bytes", (double)g->memory_bytes);
    }

    ok = ok && add_str(o, "gpu_driver", info->gpu_driver) &&
         add_str(o, "cuda_driver_version", info->cuda_driver_version) &&
         add_str(o, "nvml_status", info->nvml_status) &&
         add_str(o, "fingerprint", info->fingerprint);

    char *s = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}
