/* test_energy.c — plugins/engine/backend/energy.c: the rule that turns two counter
 * readings into a call's energy, and opening a meter (on a machine without
 * NVML: NULL with a reason; with it: a period and a reading). The energy
 * itself is checked against the GPU's power on the GPU machine
 * (tests/gpu/test_gpu.c). */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "energy.h"

int main(void)
{
    /* period 20 ms: a call must last 10 periods = 200 ms */
    CHECK(tb_energy_call_mj(20, 1000, 61000, 250000000) == 60000);
    CHECK(tb_energy_call_mj(20, 1000, 61000, 200000000) == 60000); /* exactly 10 periods */
    CHECK(tb_energy_call_mj(20, 1000, 1000, 300000000) == -1);     /* no advance in 15 periods: stuck */
    CHECK(tb_energy_call_mj(20, 1000, 5000, 199999999) == -1);     /* too short to measure */
    CHECK(tb_energy_call_mj(20, 1000, 900, 500000000) == -1);      /* counter went backwards */
    CHECK(tb_energy_call_mj(20, -1, 900, 500000000) == -1);        /* failed first reading */
    CHECK(tb_energy_call_mj(0, 1000, 2000, 500000000) == -1);      /* no period: no meter */
    CHECK(tb_energy_of_call(NULL, 1000, 2000, 500000000) == -1);
    CHECK(tb_energy_read_mj(NULL) == -1);
    tb_energy_close(NULL);

    char why[200] = "";
    tb_energy *e = tb_energy_open("0000:00:00.0", why, sizeof why);
    if (e) { /* a GPU at that address: the counter works */
        CHECK(tb_energy_period_ms(e) > 0);
        CHECK(tb_energy_read_mj(e) >= 0);
        tb_energy_close(e);
    } else {
        fprintf(stderr, "no meter here: %s\n", why);
        CHECK(why[0] != '\0');
    }
    return check_done();
}
