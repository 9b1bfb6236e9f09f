/* The metrics file `meshtrain plot` reads (train --metrics: one JSON object
 * per line), as curves over steps; apart from the drawing so that the
 * fuzzer can reach it without PLplot. */
#ifndef MT_CLI_METRICS_READ_H
#define MT_CLI_METRICS_READ_H
#include "core/error.h"

enum { MT_METRIC_LOSS, MT_METRIC_VAL_LOSS, MT_METRIC_LR, MT_METRIC_TPS, MT_METRIC_MFU, MT_METRIC_MOE_AUX,
       MT_METRIC_COUNT };
/* The field of each curve: loss, val_loss, lr, tokens_per_s, mfu, moe_aux. */
extern const char *const mt_metric_key[MT_METRIC_COUNT];

/* Curve k: n[k] points (x[k][i], y[k][i]), x the line's step. */
/* A mixture-of-experts run's "moe_load" (per layer, the rows each expert got
 * in the step) as the load balance: moe_n steps moe_x[i] with each layer's
 * max/mean expert load moe_ratio[i * moe_layers + l] (1: balanced, E: one
 * expert took every row), and the rows per expert over all the steps,
 * moe_tokens[l * moe_experts + e]. moe_layers 0: the file has no moe_load. */
typedef struct {
    double *x[MT_METRIC_COUNT], *y[MT_METRIC_COUNT];
    int n[MT_METRIC_COUNT], cap[MT_METRIC_COUNT];
    int moe_layers, moe_experts, moe_line; /* moe_line: the first line with moe_load */
    int moe_n, moe_cap;
    double *moe_x, *moe_ratio, *moe_tokens;
} mt_metrics_curves;

/* Every line of path with a numeric "step" adds a point to each curve whose
 * field it has as a finite number, and one to the load balance when it has
 * a moe_load whose every layer got rows; blank lines are skipped. One error
 * line naming the file (and line) for a line that is not JSON, a moe_load
 * that is not layers of row counts or whose layers x experts differ from an
 * earlier line's, or a file without step lines. c starts zeroed; free it with mt_metrics_curves_free even
 * after an error. */
int mt_metrics_read(const char *path, mt_metrics_curves *c, mt_error *err);
void mt_metrics_curves_free(mt_metrics_curves *c);

#endif
