/* energy.c — see energy.h. */
#define _GNU_SOURCE
#include "energy.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The few NVML entry points used, declared here so no nvml.h is needed:
 * nvmlReturn_t is an int (0 = success), a device is an opaque handle. */
typedef int nvml_ret;
typedef struct nvml_dev_st *nvml_dev;

struct tb_energy {
    void *lib;
    nvml_ret (*shutdown)(void);
    nvml_ret (*total_energy)(nvml_dev, unsigned long long *); /* mJ */
    nvml_dev dev;
    double period_ms;
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void sleep_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

static void set_why(char *why, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_why(char *why, size_t n, const char *fmt, ...)
{
    if (!why || !n)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
}

tb_energy *tb_energy_open(const char *pci_bus_id, char *why, size_t why_size)
{
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        set_why(why, why_size, "libnvidia-ml.so.1 not found (no NVML)");
        return NULL;
    }
    nvml_ret (*init)(void) = (nvml_ret(*)(void))dlsym(lib, "nvmlInit_v2");
    nvml_ret (*by_bus)(const char *, nvml_dev *) =
        (nvml_ret(*)(const char *, nvml_dev *))dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
    tb_energy *e = calloc(1, sizeof *e);
    if (!e) {
        dlclose(lib);
        set_why(why, why_size, "out of memory");
        return NULL;
    }
    e->lib = lib;
    e->shutdown = (nvml_ret(*)(void))dlsym(lib, "nvmlShutdown");
    e->total_energy = (nvml_ret(*)(nvml_dev, unsigned long long *))dlsym(lib, "nvmlDeviceGetTotalEnergyConsumption");
    if (!init || !by_bus || !e->shutdown || !e->total_energy) {
        set_why(why, why_size, "NVML lacks the energy counter's entry points");
        dlclose(lib);
        free(e);
        return NULL;
    }
    nvml_ret r = init();
    if (r != 0) {
        set_why(why, why_size, "nvmlInit failed (error %d)", r);
        dlclose(lib);
        free(e);
        return NULL;
    }
    unsigned long long mj = 0;
    if ((r = by_bus(pci_bus_id, &e->dev)) != 0 || (r = e->total_energy(e->dev, &mj)) != 0) {
        set_why(why, why_size, "NVML has no energy counter for device %s (error %d)", pci_bus_id, r);
        tb_energy_close(e);
        return NULL;
    }
    /* The period: time between two successive advances of the counter. A
     * GPU draws power even idle, so the counter always advances. */
    double t_first = 0, t0 = now_ms();
    unsigned long long last = mj;
    int advances = 0;
    while (advances < 2 && now_ms() - t0 < 1000) {
        sleep_us(100);
        unsigned long long v;
        if (e->total_energy(e->dev, &v) != 0)
            break;
        if (v != last) {
            if (++advances == 1)
                t_first = now_ms();
            else
                e->period_ms = now_ms() - t_first;
            last = v;
        }
    }
    if (advances < 2) {
        set_why(why, why_size, "the energy counter of %s did not advance twice in 1 s", pci_bus_id);
        tb_energy_close(e);
        return NULL;
    }
    return e;
}

int64_t tb_energy_read_mj(tb_energy *e)
{
    unsigned long long v;
    if (!e || e->total_energy(e->dev, &v) != 0)
        return -1;
    return (int64_t)v;
}

double tb_energy_period_ms(const tb_energy *e) { return e ? e->period_ms : 0; }

int64_t tb_energy_call_mj(double period_ms, int64_t start_mj, int64_t end_mj, int64_t duration_ns)
{
    /* a GPU always draws power: a counter that did not advance over 10
     * periods is stuck, not a measurement of 0 */
    if (!(period_ms > 0) || start_mj < 0 || end_mj <= start_mj)
        return -1;
    if ((double)duration_ns / 1e6 < TB_ENERGY_MIN_PERIODS * period_ms)
        return -1;
    return end_mj - start_mj;
}

int64_t tb_energy_of_call(const tb_energy *e, int64_t start_mj, int64_t end_mj, int64_t duration_ns)
{
    return e ? tb_energy_call_mj(e->period_ms, start_mj, end_mj, duration_ns) : -1;
}

void tb_energy_close(tb_energy *e)
{
    if (!e)
        return;
    if (e->shutdown)
        e->shutdown();
    dlclose(e->lib);
    free(e);
}
