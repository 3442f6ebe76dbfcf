/* test_hwinfo.c — tb_machine_info_collect on whatever machine runs the
 * test, the fingerprint's stability, and the JSON round trip. The GPU
 * checks branch on whether libnvidia-ml.so.1 loads here, so the test holds
 * on machines with and without the NVIDIA driver. */
#define _GNU_SOURCE
#include "check.h"
#include "hwinfo.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int is_hex64(const char *s)
{
    if (strlen(s) != 64)
        return 0;
    for (const char *p = s; *p; p++)
        if (!isdigit((unsigned char)*p) && !(*p >= 'a' && *p <= 'f'))
            return 0;
    return 1;
}

static const char *jstr(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* NaN when absent or not a number, so CHECK_NEAR against it fails. */
static double jnum(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* JSON of `info` parsed back carries the same values, field by field. */
static void check_json_roundtrip(const tb_machine_info *info)
{
    char *s = tb_machine_info_json(info);
    CHECK(s != NULL);
    if (!s)
        return;
    cJSON *o = cJSON_Parse(s);
    CHECK(cJSON_IsObject(o));
    if (!o) {
        free(s);
        return;
    }
    CHECK_STR(jstr(o, "hostname"), info->hostname);
    CHECK_STR(jstr(o, "cpu_model"), info->cpu_model);
    CHECK_NEAR(jnum(o, "cpu_cores"), info->cpu_cores, 0);
    CHECK_NEAR(jnum(o, "ram_bytes"), (double)info->ram_bytes, 0);
    CHECK_STR(jstr(o, "os"), info->os);
    CHECK_STR(jstr(o, "kernel"), info->kernel);
    CHECK_STR(jstr(o, "arch"), info->arch);
    CHECK_NEAR(jnum(o, "gpu_count"), info->gpu_count, 0);
    CHECK_STR(jstr(o, "gpu_driver"), info->gpu_driver);
    CHECK_STR(jstr(o, "cuda_driver_version"), info->cuda_driver_version);
    CHECK_STR(jstr(o, "nvml_status"), info->nvml_status);
    CHECK_STR(jstr(o, "fingerprint"), info->fingerprint);

    const cJSON *gpus = cJSON_GetObjectItemCaseSensitive(o, "gpus");
    CHECK(cJSON_IsArray(gpus));
    CHECK(cJSON_GetArraySize(gpus) == info->gpu_count);
    for (int i = 0; i < info->gpu_count && i < cJSON_GetArraySize(gpus); i++) {
        const cJSON *g = cJSON_GetArrayItem(gpus, i);
        CHECK(cJSON_IsObject(g));
        CHECK_STR(jstr(g, "name"), info->gpus[i].name);
        CHECK_STR(jstr(g, "uuid"), info->gpus[i].uuid);
        CHECK_STR(jstr(g, "compute_capability"), info->gpus[i].compute_capability);
        CHECK_NEAR(jnum(g, "memory_bytes"), (double)info->gpus[i].memory_bytes, 0);
    }
    cJSON_Delete(o);
    free(s);
}

static void test_cuda_version_format(void)
{
    char buf[32];
    tb_hwinfo_format_cuda_version(12040, buf, sizeof buf);
    CHECK_STR(buf, "12.4");
    tb_hwinfo_format_cuda_version(13000, buf, sizeof buf);
    CHECK_STR(buf, "13.0");
    tb_hwinfo_format_cuda_version(11080, buf, sizeof buf);
    CHECK_STR(buf, "11.8");
    tb_hwinfo_format_cuda_version(12090, buf, sizeof buf);
    CHECK_STR(buf, "12.9");
    tb_hwinfo_format_cuda_version(0, buf, sizeof buf);
    CHECK_STR(buf, "");
    tb_hwinfo_format_cuda_version(-5, buf, sizeof buf);
    CHECK_STR(buf, "");
    char small[4]; /* truncates, stays terminated */
    tb_hwinfo_format_cuda_version(12040, small, sizeof small);
    CHECK_STR(small, "12.");
}

static void test_collect_here(void)
{
    tb_machine_info a, b;
    tb_machine_info_collect(&a);
    tb_machine_info_collect(&b);

    /* What Linux guarantees. */
    CHECK(a.kernel[0] != '\0');
    CHECK(a.arch[0] != '\0');
    CHECK(a.hostname[0] != '\0');
    CHECK(a.cpu_model[0] != '\0'); /* falls back to the arch at worst */
    CHECK(a.cpu_cores > 0);
    CHECK(a.ram_bytes > 0);
    CHECK(a.ram_bytes % 1024 == 0); /* MemTotal is in kB */
    /* PRETTY_NAME must come out unquoted when present. */
    if (access("/etc/os-release", R_OK) == 0 || access("/usr/lib/os-release", R_OK) == 0)
        CHECK(a.os[0] != '\0' && a.os[0] != '"' && a.os[0] != '\'');

    /* GPU side: absence of the library is a recorded fact, not an error. */
    CHECK(a.nvml_status[0] != '\0');
    CHECK(a.gpu_count >= 0 && a.gpu_count <= TB_MAX_GPUS);
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        CHECK(a.gpu_count == 0);
        CHECK_CONTAINS(a.nvml_status, "libnvidia-ml.so.1 not found");
        CHECK_STR(a.gpu_driver, "");
        CHECK_STR(a.cuda_driver_version, "");
    } else {
        dlclose(lib);
        fprintf(stderr, "note: libnvidia-ml.so.1 present; nvml_status \"%s\"\n",
                a.nvml_status);
        if (strcmp(a.nvml_status, "ok") == 0) {
            CHECK(a.gpu_count > 0);
            CHECK(a.gpu_driver[0] != '\0');
            CHECK(a.cuda_driver_version[0] != '\0');
            for (int i = 0; i < a.gpu_count; i++) {
                int major = -1, minor = -1;
                CHECK(a.gpus[i].name[0] != '\0');
                CHECK(a.gpus[i].uuid[0] != '\0');
                CHECK(a.gpus[i].memory_bytes > 0);
                CHECK(sscanf(a.gpus[i].compute_capability, "%d.%d", &major,
                             &minor) == 2 && major > 0 && minor >= 0);
            }
        }
    }

    /* The fingerprint: 64 lowercase hex digits, the same on a second call
     * (both collections see the same machine). */
    CHECK(is_hex64(a.fingerprint));
    CHECK_STR(a.fingerprint, b.fingerprint);
    CHECK_STR(a.hostname, b.hostname);
    CHECK_STR(a.cpu_model, b.cpu_model);
    CHECK(a.ram_bytes == b.ram_bytes);
    CHECK(a.gpu_count == b.gpu_count);

    check_json_roundtrip(&a);

    char *s = tb_machine_info_json(&a);
    if (s)
        printf("%s\n", s);
    free(s);
}

/* A hand-filled record exercises the gpus array and escaping without a GPU. */
static void test_json_synthetic(void)
{
    tb_machine_info m;
    memset(&m, 0, sizeof m);
    strcpy(m.hostname, "node\"1\\x");
    strcpy(m.cpu_model, "Test CPU @ 3.0GHz\t(tab)");
    m.cpu_cores = 128;
    m.ram_bytes = (uint64_t)2 << 40; /* 2 TiB, exact in a double */
    strcpy(m.os, "Debian GNU/Linux 12 (bookworm)");
    strcpy(m.kernel, "6.1.0-18-amd64");
    strcpy(m.arch, "x86_64");
    m.gpu_count = 2;
    for (int i = 0; i < 2; i++) {
        strcpy(m.gpus[i].name, "NVIDIA H200");
        snprintf(m.gpus[i].uuid, sizeof m.gpus[i].uuid,
                 "GPU-00000000-0000-0000-0000-00000000000%d", i);
        strcpy(m.gpus[i].compute_capability, "9.0");
        m.gpus[i].memory_bytes = 150754820096ULL;
    }
    strcpy(m.gpu_driver, "580.65.06");
    strcpy(m.cuda_driver_version, "13.0");
    strcpy(m.nvml_status, "ok");
    memset(m.fingerprint, 'a', 64);
    check_json_roundtrip(&m);

    /* Empty record: still a complete object with an empty gpus array. */
    tb_machine_info z;
    memset(&z, 0, sizeof z);
    check_json_roundtrip(&z);
}

int main(void)
{
    test_cuda_version_format();
    test_json_synthetic();
    test_collect_here();
    return check_done();
}
