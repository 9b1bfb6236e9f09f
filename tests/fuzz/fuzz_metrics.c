/* The metrics file `meshtrain plot` reads (cli/metrics_read.h): the input
 * as a train --metrics file. What plot then draws must be drawable: a
 * point per curve and line at most, every coordinate finite (PLplot gets
 * the ranges of them). */
#include <math.h>
#include "cli/metrics_read.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file("metrics.jsonl", data, size);
    mt_metrics_curves c;
    memset(&c, 0, sizeof c);
    mt_error err = {{0}};
    int rc = mt_metrics_read(path, &c, &err);
    size_t lines = 1;
    for (size_t i = 0; i < size; i++) lines += data[i] == '\n';
    for (int k = 0; k < MT_METRIC_COUNT; k++) {
        if (rc == 0 && ((size_t)c.n[k] > lines || c.n[k] > c.cap[k])) abort();
        for (int i = 0; rc == 0 && i < c.n[k]; i++)
            if (!isfinite(c.x[k][i]) || !isfinite(c.y[k][i])) abort();
    }
    /* the load balance: a point per line at most, every ratio a finite number >= 1 (max over mean) */
    if (rc == 0 && ((size_t)c.moe_n > lines || c.moe_n > c.moe_cap || (c.moe_n && !c.moe_layers))) abort();
    for (int i = 0; rc == 0 && i < c.moe_n; i++) {
        if (!isfinite(c.moe_x[i])) abort();
        for (int l = 0; l < c.moe_layers; l++) {
            double r = c.moe_ratio[(size_t)i * c.moe_layers + l];
            if (!isfinite(r) || r < 1 - 1e-9 || r > c.moe_experts + 1e-9) abort();
        }
    }
    if (rc && !err.msg[0]) abort(); /* an error says why */
    mt_metrics_curves_free(&c);
    return 0;
}
