/* meshtrain schedule: builds a pipeline schedule, checks it by simulation
 * (parallel/pipeline_schedule.h), prints each rank's timeline as text and the
 * bubble and activation peaks, and optionally writes the simulated timeline
 * as a Chrome trace (1 simulated time unit = 1 ms). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "cli/args.h"
#include "cli/cli.h"
#include "core/trace.h"
#include "parallel/pipeline_schedule.h"

/* Cell size of the text timeline: the largest q = (min cost per chunk)/k,
 * k <= 16, that divides every duration; else k = 1 and cells are rounded. */
static double cell_quantum(double f, double b, double lat, int *exact) {
    double unit = fmin(f, b);
    for (int k = 1; k <= 16; k++) {
        double q = unit / k;
        double xs[3] = {f / q, b / q, lat / q};
        int ok = 1;
        for (int i = 0; i < 3; i++) ok &= fabs(xs[i] - nearbyint(xs[i])) < 1e-9 * fmax(1, xs[i]);
        if (ok) {
            *exact = 1;
            return q;
        }
    }
    *exact = 0;
    return unit;
}

static void print_timeline(const mt_pp_schedule *s, const mt_pp_sim *sim, double q, int max_cells) {
    long ncells = lround(sim->makespan / q);
    if (max_cells > 0 && ncells > max_cells) {
        printf("(timeline of %ld cells omitted: over --max-cells %d; use --trace FILE or --max-cells 0)\n\n", ncells,
               max_cells);
        return;
    }
    int width = 1;
    char label[64];
    for (int r = 0; r < s->stages; r++)
        for (int i = 0; i < s->count[r]; i++) {
            int n = mt_pp_action_format(s, &s->actions[r][i], label, sizeof label);
            if (s->actions[r][i].op <= MT_PP_BACKWARD && n > width) width = n;
        }
    size_t line_len = (size_t)ncells * (size_t)(width + 1) + 1;
    char *line = mt_xmalloc(line_len + 1, "schedule timeline row");
    /* Time axis: the time at every 5th cell. */
    memset(line, ' ', line_len);
    line[line_len] = '\0';
    for (long c = 0; c < ncells; c += 5) {
        int n = snprintf(label, sizeof label, "%g", c * q);
        size_t at = (size_t)c * (size_t)(width + 1);
        if (at + (size_t)n < line_len) memcpy(line + at, label, (size_t)n);
    }
    size_t axis = line_len;
    while (axis > 0 && line[axis - 1] == ' ') axis--;
    printf("time    %.*s\n", (int)axis, line);
    for (int r = 0; r < s->stages; r++) {
        for (long c = 0; c < ncells; c++) {
            char *cell = line + (size_t)c * (size_t)(width + 1);
            memset(cell, ' ', (size_t)width + 1);
            cell[0] = '.';
        }
        for (int i = 0; i < s->count[r]; i++) {
            const mt_pp_action *a = &s->actions[r][i];
            if (a->op > MT_PP_BACKWARD) continue;
            long c0 = lround(sim->start[r][i] / q), c1 = lround(sim->end[r][i] / q);
            int n = mt_pp_action_format(s, a, label, sizeof label);
            for (long c = c0; c < c1 && c < ncells; c++) {
                char *cell = line + (size_t)c * (size_t)(width + 1);
                memset(cell, c == c0 ? ' ' : '-', (size_t)width);
                if (c == c0) memcpy(cell, label, (size_t)n);
            }
        }
        size_t end = line_len;
        while (end > 0 && (line[end - 1] == ' ' || line[end - 1] == '\0')) end--;
        printf("rank %-3d%.*s\n", r, (int)end, line);
    }
    free(line);
    printf("\n");
}

/* The simulated timeline as one trace per rank: forward/backward on thread
 * "compute", receive waits on "comm", one "step" span over [0, makespan]. */
static int write_trace(const mt_pp_schedule *s, const mt_pp_sim *sim, const char *path, mt_error *err) {
    int p = s->stages, rc = 0;
    mt_trace *tr = mt_xcalloc((size_t)p, sizeof *tr, "schedule traces");
    const mt_trace **list = mt_xmalloc((size_t)p * sizeof *list, "schedule trace list");
    const double ns = 1e6; /* per simulated time unit */
    for (int r = 0; r < p && !rc; r++) {
        if ((rc = mt_trace_init(&tr[r], r, (size_t)s->count[r] + 1, err))) break;
        tr[r].origin_ns = 0;
        mt_trace_name_thread(&tr[r], 0, "compute");
        mt_trace_name_thread(&tr[r], 1, "comm (receive waits)");
        mt_trace_name_thread(&tr[r], 2, "step");
        mt_trace_span(&tr[r], "step", "step", 2, 0, llround(sim->makespan * ns));
        for (int i = 0; i < s->count[r]; i++) {
            const mt_pp_action *a = &s->actions[r][i];
            int64_t t0 = llround(sim->start[r][i] * ns), t1 = llround(sim->end[r][i] * ns);
            if (a->op == MT_PP_FORWARD || a->op == MT_PP_BACKWARD)
                mt_trace_span_args(&tr[r], a->op == MT_PP_FORWARD ? "forward" : "backward", "compute", 0, t0, t1,
                                   "microbatch", a->microbatch, "chunk", a->chunk);
            else if ((a->op == MT_PP_RECV_ACT || a->op == MT_PP_RECV_GRAD) && t1 > t0)
                mt_trace_span_args(&tr[r], a->op == MT_PP_RECV_ACT ? "recv_act" : "recv_grad", "comm", 1, t0, t1,
                                   "microbatch", a->microbatch, "chunk", a->chunk);
        }
        list[r] = &tr[r];
    }
    if (!rc) rc = mt_trace_write_file(list, p, path, err);
    if (!rc) {
        printf("trace: %s (%d ranks; 1 time unit = 1 ms); idle fraction per rank from the trace:", path, p);
        const char *compute[] = {"compute"};
        for (int r = 0; r < p && !rc; r++) {
            mt_trace_usage u;
            if (!(rc = mt_trace_usage_of(&tr[r], compute, 1, &u, err))) printf(" %.4f", u.idle_fraction);
        }
        printf("\n");
    }
    for (int r = 0; r < p; r++) mt_trace_free(&tr[r]);
    free(tr);
    free(list);
    return rc;
}

int mt_cli_schedule(int argc, char **argv) {
    int pp = 0, m = 0, v = 1, help = 0, actions = 0, max_cells = 400;
    float fwd = 1.0f, bwd = 2.0f, lat = 0.0f;
    const char *kind_name = "1f1b", *trace_path = NULL;
    mt_arg spec[] = {
        {"pp", MT_ARG_INT, &pp, "pipeline stages P (required)", 0},
        {"microbatches", MT_ARG_INT, &m, "microbatches M per step (required)", 0},
        {"pp-schedule", MT_ARG_STR, &kind_name, "gpipe | 1f1b | interleaved (default 1f1b)", 0},
        {"pp-chunks", MT_ARG_INT, &v, "model chunks per rank V, interleaved only (default 2 for interleaved)", 0},
        {"fwd-cost", MT_ARG_FLOAT, &fwd, "forward time of one stage for one microbatch (default 1; a chunk: /V)", 0},
        {"bwd-cost", MT_ARG_FLOAT, &bwd, "backward time of one stage for one microbatch (default 2; a chunk: /V)", 0},
        {"comm-cost", MT_ARG_FLOAT, &lat, "latency of one message (default 0)", 0},
        {"trace", MT_ARG_STR, &trace_path, "write the simulated timeline as Chrome trace JSON to FILE", 0},
        {"actions", MT_ARG_FLAG, &actions, "also print each rank's action list (what the executor runs)", 0},
        {"max-cells", MT_ARG_INT, &max_cells, "omit the text timeline beyond this many cells (default 400; 0 = never)",
         0},
        {"help", MT_ARG_FLAG, &help, "show this help", 0},
    };
    int nspec = (int)(sizeof spec / sizeof spec[0]);
    mt_error err = {{0}};
    if (mt_args_parse(argc, argv, spec, nspec, NULL, 0, NULL, &err)) return mt_cli_fail("schedule", &err);
    if (help) {
        mt_args_usage("schedule", "--pp P --microbatches M [--pp-schedule gpipe|1f1b|interleaved] [--pp-chunks V] [flags]",
                      spec, nspec);
        return 0;
    }
    mt_pp_kind kind;
    if (!mt_arg_seen(spec, nspec, "pp")) mt_errorf(&err, "--pp P (pipeline stages) is required");
    else if (!mt_arg_seen(spec, nspec, "microbatches")) mt_errorf(&err, "--microbatches M is required");
    else if (mt_pp_kind_parse(kind_name, &kind, &err)) {
        mt_errorf(&err, "unknown --pp-schedule '%s' (choose gpipe, 1f1b or interleaved)", kind_name);
    } else if (!(fwd > 0) || !(bwd > 0))
        mt_errorf(&err, "--fwd-cost and --bwd-cost must be positive, got %g and %g", (double)fwd, (double)bwd);
    else if (!(lat >= 0)) mt_errorf(&err, "--comm-cost must be >= 0, got %g", (double)lat);
    else if (max_cells < 0) mt_errorf(&err, "--max-cells must be >= 0, got %d", max_cells);
    else err.msg[0] = '\0';
    if (err.msg[0]) return mt_cli_fail("schedule", &err);
    if (kind == MT_PP_INTERLEAVED && !mt_arg_seen(spec, nspec, "pp-chunks")) v = 2;

    mt_pp_schedule s;
    if (mt_pp_schedule_build(kind, pp, m, v, &s, &err)) return mt_cli_fail("schedule", &err);
    printf("pipeline schedule %s: %d stage%s, %d microbatch%s, %d chunk%s per stage (%d virtual stage%s)\n",
           mt_pp_kind_name(kind), pp, pp > 1 ? "s" : "", m, m > 1 ? "es" : "", v, v > 1 ? "s" : "", pp * v,
           pp * v > 1 ? "s" : "");
    int exact;
    double q = cell_quantum((double)fwd / v, (double)bwd / v, lat, &exact);
    printf("cost model: forward %g, backward %g per stage and microbatch (a chunk: /%d), message latency %g; "
           "1 cell = %g time unit%s%s\n\n",
           (double)fwd, (double)bwd, v, (double)lat, q, q == 1 ? "" : "s", exact ? "" : " (rounded)");
    if (actions) {
        for (int r = 0; r < pp; r++) mt_pp_schedule_print_rank(&s, r, stdout);
        printf("\n");
    }
    mt_pp_sim sim;
    int rc = mt_pp_check(&s, fwd, bwd, lat, &sim, &err);
    if (rc) {
        char msg[MT_ERROR_LEN];
        mt_cli_render(err.msg, msg, sizeof msg);
        printf("check: FAILED: %s\n", msg);
    } else {
        print_timeline(&s, &sim, q, max_cells);
        printf("check: OK (every message received, no deadlock, each forward and backward once, dependencies "
               "respected)\n");
        double closed = mt_pp_bubble_closed_form(&s);
        printf("makespan %g time units; bubble fraction %.6f (mean over ranks of idle/makespan); closed form "
               "(p-1)/(%sm+p-1) = %.6f%s\n",
               sim.makespan, sim.bubble, kind == MT_PP_INTERLEAVED ? "v*" : "", closed,
               fabs(sim.bubble - closed) <= 1e-12 ? " (equal)" : "");
        printf("rank  busy        idle        idle/makespan  peak in-flight (chunk-microbatches%s)\n",
               v > 1 ? "; in stage-microbatches" : "");
        for (int r = 0; r < pp; r++) {
            printf("%-5d %-11g %-11g %-14.4f %d", r, sim.busy[r], sim.idle[r], sim.idle[r] / sim.makespan,
                   sim.peak_inflight[r]);
            if (v > 1) printf(" (%g)", (double)sim.peak_inflight[r] / v);
            printf("\n");
        }
        if (trace_path && write_trace(&s, &sim, trace_path, &err)) {
            mt_pp_sim_free(&sim);
            mt_pp_schedule_free(&s);
            return mt_cli_fail("schedule", &err);
        }
    }
    mt_pp_sim_free(&sim);
    mt_pp_schedule_free(&s);
    return rc ? 1 : 0;
}
