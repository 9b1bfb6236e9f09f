/* meshtrain plot RUN.jsonl [RUN2.jsonl ...] --out curves.png: the curves of
 * one or more --metrics files, drawn with PLplot (its pngcairo device) in
 * four panels -- training loss, validation loss, learning rate and tokens/s
 * over steps, and MFU when the metrics have it (train --peak-gflops) -- every
 * run in its own colour, with a legend (the file names, or --labels). A
 * mixture-of-experts run (moe_aux, moe_load) adds three: the aux loss, each
 * layer's max/mean expert load over steps, and each layer's rows per expert
 * over the run (over the mean: 1 is balanced), layers told apart by line
 * style. The lines are read by cli/metrics_read.c; a line that is not JSON
 * is an error naming the file and line. File tool: no MPI. */
#include <errno.h>
#include <math.h>
#include <plplot.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/args.h"
#include "cli/cli.h"
#include "cli/metrics_read.h"
#include "core/error.h"

#define MAX_RUNS 8
enum { P_LOSS = MT_METRIC_LOSS, P_MFU = MT_METRIC_MFU, P_AUX = MT_METRIC_MOE_AUX, N_PANELS = MT_METRIC_COUNT };
static const char *const panel_title[N_PANELS] = {"training loss", "validation loss", "learning rate", "tokens/s",
                                                  "MFU (train --peak-gflops)", "MoE aux loss (moe_aux)"};
#define MAX_STYLES 8 /* PLplot's line styles: a layer's in the load panels */
/* the curves are doubles handed to PLplot as they are */
_Static_assert(sizeof(PLFLT) == sizeof(double), "PLplot built with single-precision PLFLT");

typedef mt_metrics_curves run_curves;

static int has_device(const char *name) {
    const char *menu[128], *devs[128];
    const char **pm = menu, **pd = devs;
    int n = 128; /* capacity in, count out */
    plgDevs(&pm, &pd, &n);
    for (int i = 0; i < n; i++)
        if (!strcmp(devs[i], name)) return 1;
    return 0;
}

static void range(const run_curves *runs, int nr, int p, double *x0, double *x1, double *y0, double *y1) {
    *x0 = *y0 = INFINITY;
    *x1 = *y1 = -INFINITY;
    for (int r = 0; r < nr; r++)
        for (int i = 0; i < runs[r].n[p]; i++) {
            *x0 = fmin(*x0, runs[r].x[p][i]), *x1 = fmax(*x1, runs[r].x[p][i]);
            *y0 = fmin(*y0, runs[r].y[p][i]), *y1 = fmax(*y1, runs[r].y[p][i]);
        }
    if (*x1 <= *x0) *x1 = *x0 + 1;
    double pad = (*y1 - *y0) * 0.05;
    if (pad <= 0) pad = fabs(*y0) * 0.05 + 1e-12;
    *y0 -= pad;
    *y1 += pad;
}

/* colours 1..: PLplot's map0 with black (15) for the axes */
static const int colour[MAX_RUNS] = {1, 9, 3, 4, 8, 10, 12, 13};

/* a panel's frame: axes over [x0, x1] x [y0, y1] with the labels */
static void frame(double x0, double x1, double y0, double y1, const char *xlab, const char *title) {
    pladv(0);
    plvsta();
    plcol0(15);
    plwind(x0, x1, y0, y1);
    plbox("bcnst", 0, 0, "bcnstv", 0, 0);
    pllab(xlab, "", title);
    plschr(0, 0.6);
}

static void legend(int n, const int *colors, const int *styles, const char *const *text) {
    PLINT opts[MAX_RUNS], col[MAX_RUNS], sty[MAX_RUNS], tcol[MAX_RUNS];
    PLFLT widths[MAX_RUNS], lw, lh;
    for (int i = 0; i < n; i++) opts[i] = PL_LEGEND_LINE, col[i] = colors[i], sty[i] = styles[i], widths[i] = 2, tcol[i] = 15;
    pllegend(&lw, &lh, PL_LEGEND_BACKGROUND | PL_LEGEND_BOUNDING_BOX, PL_POSITION_TOP | PL_POSITION_RIGHT, 0.02, 0.02,
             0.1, 0, 15, 1, 0, 0, n, opts, 1.0, 0.8, 2.0, 0.0, tcol, text, NULL, NULL, NULL, NULL, col, sty, widths,
             NULL, NULL, NULL, NULL);
}

/* curve p of every run over steps; the loss panel carries the runs' legend */
static void curve_panel(const run_curves *runs, int nr, int p, const char *const *names) {
    double x0, x1, y0, y1;
    range(runs, nr, p, &x0, &x1, &y0, &y1);
    int any = isfinite(y0) && isfinite(y1);
    if (!any) y0 = 0, y1 = 1, x0 = 0, x1 = 1;
    frame(x0, x1, y0, y1, "step", any ? panel_title[p] : "(no such values)");
    for (int r = 0; r < nr; r++) {
        if (runs[r].n[p] < 1) continue;
        plcol0(colour[r]);
        plwidth(2);
        if (runs[r].n[p] == 1) plpoin(1, runs[r].x[p], runs[r].y[p], 17);
        else plline(runs[r].n[p], runs[r].x[p], runs[r].y[p]);
        plwidth(1);
    }
    if (p == P_LOSS) {
        int styles[MAX_RUNS];
        for (int r = 0; r < nr; r++) styles[r] = 1;
        legend(nr, colour, styles, names);
    }
    plschr(0, 1.0);
}

/* a legend of the layers' line styles, in black */
static void layer_legend(const run_curves *runs, int nr) {
    int L = 0;
    for (int r = 0; r < nr; r++) L = runs[r].moe_layers > L ? runs[r].moe_layers : L;
    int n = L < MAX_STYLES ? L : MAX_STYLES, cols[MAX_STYLES], styles[MAX_STYLES];
    char text[MAX_STYLES][32];
    const char *tp[MAX_STYLES];
    for (int i = 0; i < n; i++) {
        cols[i] = 15, styles[i] = i + 1, tp[i] = text[i];
        snprintf(text[i], sizeof text[i], L > MAX_STYLES ? "layer %d (+%d k)" : "layer %d", i, MAX_STYLES);
    }
    legend(n, cols, styles, tp);
}

/* each layer's max/mean expert load over steps: run by colour, layer by line style */
static void balance_panel(const run_curves *runs, int nr, double *scratch) {
    double x0 = INFINITY, x1 = -INFINITY, y1 = 1;
    for (int r = 0; r < nr; r++)
        for (int i = 0; i < runs[r].moe_n; i++) {
            x0 = fmin(x0, runs[r].moe_x[i]), x1 = fmax(x1, runs[r].moe_x[i]);
            for (int l = 0; l < runs[r].moe_layers; l++) y1 = fmax(y1, runs[r].moe_ratio[(size_t)i * runs[r].moe_layers + l]);
        }
    int any = isfinite(x0);
    if (!any) x0 = 0, x1 = 1;
    if (x1 <= x0) x1 = x0 + 1;
    /* from 1 (every expert as loaded as the mean) up */
    frame(x0, x1, 1 - 0.05 * (y1 - 1) - 1e-3, y1 + 0.05 * (y1 - 1) + 1e-3, "step",
          any ? "expert load max/mean per layer (1: balanced)" : "(no expert loads)");
    for (int r = 0; r < nr; r++) {
        const run_curves *c = &runs[r];
        double *y = scratch; /* one layer's column */
        plcol0(colour[r]);
        plwidth(2);
        for (int l = 0; l < c->moe_layers; l++) {
            for (int i = 0; i < c->moe_n; i++) y[i] = c->moe_ratio[(size_t)i * c->moe_layers + l];
            pllsty(l % MAX_STYLES + 1);
            if (c->moe_n == 1) plpoin(1, c->moe_x, y, 17);
            else plline(c->moe_n, c->moe_x, y);
        }
        pllsty(1);
        plwidth(1);
    }
    if (any) layer_legend(runs, nr);
    plschr(0, 1.0);
}

/* each layer's rows per expert over the whole run, over their mean */
static void experts_panel(const run_curves *runs, int nr, double *scratch) {
    int E = 1;
    double y0 = 1, y1 = 1;
    for (int r = 0; r < nr; r++) {
        const run_curves *c = &runs[r];
        E = c->moe_experts > E ? c->moe_experts : E;
        for (int l = 0; l < c->moe_layers; l++) {
            double sum = 0;
            for (int e = 0; e < c->moe_experts; e++) sum += c->moe_tokens[(size_t)l * c->moe_experts + e];
            if (!(sum > 0) || !isfinite(sum)) continue;
            for (int e = 0; e < c->moe_experts; e++) {
                double v = c->moe_tokens[(size_t)l * c->moe_experts + e] / (sum / c->moe_experts);
                y0 = fmin(y0, v), y1 = fmax(y1, v);
            }
        }
    }
    double pad = 0.05 * (y1 - y0) + 1e-3;
    frame(-0.5, E - 0.5, y0 - pad, y1 + pad, "expert", "rows per expert over the run / mean, per layer");
    plcol0(15);
    pllsty(2);
    pljoin(-0.5, 1, E - 0.5, 1); /* the balanced line */
    for (int r = 0; r < nr; r++) {
        const run_curves *c = &runs[r];
        double *x = scratch, *y = scratch + c->moe_experts;
        plcol0(colour[r]);
        plwidth(2);
        for (int l = 0; l < c->moe_layers; l++) {
            double sum = 0;
            for (int e = 0; e < c->moe_experts; e++) sum += c->moe_tokens[(size_t)l * c->moe_experts + e];
            if (!(sum > 0) || !isfinite(sum)) continue;
            for (int e = 0; e < c->moe_experts; e++)
                x[e] = e, y[e] = c->moe_tokens[(size_t)l * c->moe_experts + e] / (sum / c->moe_experts);
            pllsty(l % MAX_STYLES + 1);
            if (c->moe_experts > 1) plline(c->moe_experts, x, y);
            plpoin(c->moe_experts, x, y, 17);
        }
        pllsty(1);
        plwidth(1);
    }
    plschr(0, 1.0);
}

/* the load balance of a MoE run in words: what the panels show at the last step */
static void balance_summary(const run_curves *c, const char *name) {
    if (!c->moe_layers) return;
    printf("plot: %s: load balance of %d layers x %d experts over %d steps", name, c->moe_layers, c->moe_experts,
           c->moe_n);
    if (c->moe_n) {
        const double *last = c->moe_ratio + (size_t)(c->moe_n - 1) * c->moe_layers;
        int worst = 0;
        for (int l = 1; l < c->moe_layers; l++) worst = last[l] > last[worst] ? l : worst;
        printf("; max/mean at step %.0f: %.3f (layer %d)", c->moe_x[c->moe_n - 1], last[worst], worst);
    }
    if (c->n[P_AUX]) printf("; aux loss %.6g", c->y[P_AUX][c->n[P_AUX] - 1]);
    printf("\n");
}

int mt_cli_plot(int argc, char **argv) {
    const char *out = NULL, *labels = NULL;
    int width = 1200, height = 900, help = 0;
    mt_arg spec[] = {
        {"out", MT_ARG_STR, &out, "the PNG to write (required)", 0},
        {"labels", MT_ARG_STR, &labels, "comma-separated legend names, one per run (default: the file names)", 0},
        {"width", MT_ARG_INT, &width, "image width in pixels (default 1200)", 0},
        {"height", MT_ARG_INT, &height, "image height in pixels (default 900)", 0},
        {"help", MT_ARG_FLAG, &help, "show this help", 0},
    };
    int nspec = (int)(sizeof spec / sizeof spec[0]);
    char *files[MAX_RUNS + 1];
    int nfiles = 0;
    mt_error err = {{0}};
    if (mt_args_parse(argc, argv, spec, nspec, files, MAX_RUNS + 1, &nfiles, &err)) return mt_cli_fail("plot", &err);
    if (help) {
        mt_args_usage("plot", "RUN.jsonl [RUN2.jsonl ...] --out curves.png", spec, nspec);
        return 0;
    }
    if (!out) mt_errorf(&err, "--out FILE.png is required");
    else if (nfiles < 1) mt_errorf(&err, "no metrics files; usage: meshtrain plot RUN.jsonl [RUN2.jsonl ...] --out curves.png");
    else if (nfiles > MAX_RUNS) mt_errorf(&err, "at most %d runs in one plot, got %d files", MAX_RUNS, nfiles);
    else if (width < 200 || width > 8000 || height < 200 || height > 8000)
        mt_errorf(&err, "--width and --height must be in 200..8000 pixels, got %d x %d", width, height);
    if (err.msg[0]) return mt_cli_fail("plot", &err);
    const char *names[MAX_RUNS];
    char *label_copy = labels ? strdup(labels) : NULL;
    int nl = 0;
    for (char *s = label_copy, *tok; s && (tok = strsep(&s, ",")) && nl < MAX_RUNS;) names[nl++] = tok;
    if (labels && nl != nfiles) {
        free(label_copy);
        mt_errorf(&err, "--labels names %d runs but %d files were given", nl, nfiles);
        return mt_cli_fail("plot", &err);
    }
    for (int r = 0; r < nfiles && !labels; r++) {
        const char *b = strrchr(files[r], '/');
        names[r] = b ? b + 1 : files[r];
    }
    run_curves runs[MAX_RUNS];
    memset(runs, 0, sizeof runs);
    int rc = 0;
    for (int r = 0; r < nfiles && !rc; r++) rc = mt_metrics_read(files[r], &runs[r], &err);
    size_t scratch_n = 1; /* the load panels' lines: a layer over the steps, a layer's experts */
    for (int r = 0; r < nfiles; r++) {
        size_t need = (size_t)runs[r].moe_n > 2 * (size_t)runs[r].moe_experts ? (size_t)runs[r].moe_n
                                                                              : 2 * (size_t)runs[r].moe_experts;
        scratch_n = need > scratch_n ? need : scratch_n;
    }
    double *scratch = rc ? NULL : malloc(scratch_n * sizeof *scratch);
    if (!rc && !scratch) rc = mt_errorf(&err, "out of memory for the plot's %zu-point lines", scratch_n);
    if (!rc && !has_device("pngcairo"))
        rc = mt_errorf(&err, "PLplot has no pngcairo device: install Debian's plplot-driver-cairo (scripts/setup.sh)");
    FILE *probe = rc ? NULL : fopen(out, "wb"); /* a clear error before PLplot opens it */
    if (!rc && !probe) rc = mt_errorf(&err, "cannot write %s: %s", out, strerror(errno));
    if (probe) fclose(probe);
    if (!rc) {
        char geometry[32];
        snprintf(geometry, sizeof geometry, "%dx%d", width, height);
        plsdev("pngcairo");
        plsfnam(out);
        plsetopt("geometry", geometry);
        plscolbg(255, 255, 255);
        int mfu = 0, aux = 0, moe = 0; /* the MFU and MoE panels when some run has them */
        for (int r = 0; r < nfiles; r++)
            mfu |= runs[r].n[P_MFU] > 0, aux |= runs[r].n[P_AUX] > 0, moe |= runs[r].moe_layers > 0;
        int panels = 4 + mfu + aux + 2 * moe;
        plinit();
        plssub(2, (panels + 1) / 2);
        plscol0(15, 0, 0, 0);
        for (int p = 0; p < N_PANELS; p++) {
            if ((p == P_MFU && !mfu) || (p == P_AUX && !aux)) continue;
            curve_panel(runs, nfiles, p, names);
        }
        if (moe) {
            balance_panel(runs, nfiles, scratch);
            experts_panel(runs, nfiles, scratch);
        }
        plend();
        printf("plot: wrote %s (%dx%d; %d run%s)\n", out, width, height, nfiles, nfiles > 1 ? "s" : "");
        for (int r = 0; r < nfiles; r++) balance_summary(&runs[r], names[r]);
    }
    for (int r = 0; r < nfiles; r++) mt_metrics_curves_free(&runs[r]);
    free(scratch);
    free(label_copy);
    return rc ? mt_cli_fail("plot", &err) : 0;
}
