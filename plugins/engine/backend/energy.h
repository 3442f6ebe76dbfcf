/* energy.h — a GPU's energy over one generate() call, from NVML's total
 * energy counter (millijoules since the driver loaded), read before and
 * after the call. NVML is dlopened (libnvidia-ml.so.1 ships with the
 * driver), so nothing links against it and a machine without it just has
 * no energy figures.
 *
 * The counter advances in steps, not continuously (tb_energy_open measures
 * the period: about 100 ms on an H200). Each reading lags the truth by
 * up to one period, so a call's energy is off by up to one period's worth;
 * a call shorter than TB_ENERGY_MIN_PERIODS periods would read 0 or one
 * whole step, so its energy is reported as unknown rather than as a number
 * that is wrong by up to 100%. */
#ifndef TB_ENGINE_ENERGY_H
#define TB_ENGINE_ENERGY_H

#include <stddef.h>
#include <stdint.h>

/* A call must last this many counter periods to be measured: the two
 * readings' lags differ by less than a period, so at steady power the
 * error is under 1/10 of the call's energy. */
#define TB_ENERGY_MIN_PERIODS 10

typedef struct tb_energy tb_energy;

/* The meter of the GPU at PCI bus id `pci_bus_id` ("0000:18:00.0", as
 * cudaDeviceGetPCIBusId gives it). Polls the counter until it has advanced
 * twice to learn its period (at most ~1 s). NULL with the reason in why
 * when NVML, the device or its energy counter is not available. */
tb_energy *tb_energy_open(const char *pci_bus_id, char *why, size_t why_size);

/* The counter now, mJ; -1 on an NVML error. */
int64_t tb_energy_read_mj(tb_energy *e);

/* The counter's update period measured at open, ms. */
double tb_energy_period_ms(const tb_energy *e);

/* The energy of a call that read start_mj and end_mj around duration_ns:
 * end - start, or -1 when a reading failed, the counter did not advance
 * (a GPU always draws power: it is stuck) or went backwards, or the call
 * was shorter than TB_ENERGY_MIN_PERIODS periods. */
int64_t tb_energy_of_call(const tb_energy *e, int64_t start_mj, int64_t end_mj, int64_t duration_ns);

/* The rule itself, for a counter of period period_ms (tests). */
int64_t tb_energy_call_mj(double period_ms, int64_t start_mj, int64_t end_mj, int64_t duration_ns);

void tb_energy_close(tb_energy *e);

#endif
