/* meshtrain plot RUN.jsonl [RUN2.jsonl ...] --out curves.png: the curves of
 * one or more --metrics files, drawn with PLplot (its pngcairo device) in
 * four panels -- training loss, validation loss, learning rate and tokens/s
 * over steps, and MFU when the metrics have it (train --peak-gflops) -- every run in its own colour, with a legend (the file names,
 * or --labels). The lines are read by cli/metrics_read.c; a line that is
 * not JSON is an error naming the file and line. File tool: no MPI. */
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
enum { P_LOSS = MT_METRIC_LOSS, P_MFU = MT_METRIC_MFU, N_PANELS = MT_METRIC_COUNT }; /* a panel per curve */
static const char *const panel_title[N_PANELS] = {"training loss", "validation loss", "learning rate", "tokens/s",
                                                  "MFU (train --peak-gflops)"};
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
        int mfu = 0; /* the MFU panel when some run has it */
        for (int r = 0; r < nfiles; r++) mfu |= runs[r].n[P_MFU] > 0;
        plinit();
        plssub(2, mfu ? 3 : 2);
        /* colours 1..: PLplot's map0 with black for the axes */
        static const int colour[MAX_RUNS] = {1, 9, 3, 4, 8, 10, 12, 13};
        plscol0(15, 0, 0, 0);
        for (int p = 0; p < N_PANELS; p++) {
            if (p == P_MFU && !mfu) continue;
            pladv(0);
            plvsta();
            double x0, x1, y0, y1;
            range(runs, nfiles, p, &x0, &x1, &y0, &y1);
            int any = isfinite(y0) && isfinite(y1);
            if (!any) y0 = 0, y1 = 1, x0 = 0, x1 = 1;
            plcol0(15);
            plwind(x0, x1, y0, y1);
            plbox("bcnst", 0, 0, "bcnstv", 0, 0);
            pllab("step", "", any ? panel_title[p] : "(no such values)");
            plschr(0, 0.6);
            for (int r = 0; r < nfiles; r++) {
                if (runs[r].n[p] < 1) continue;
                plcol0(colour[r]);
                plwidth(2);
                if (runs[r].n[p] == 1) plpoin(1, runs[r].x[p], runs[r].y[p], 17);
                else plline(runs[r].n[p], runs[r].x[p], runs[r].y[p]);
                plwidth(1);
            }
            if (p == P_LOSS) { /* the legend: one entry per run */
                PLINT opts[MAX_RUNS], colors[MAX_RUNS], styles[MAX_RUNS], tcol[MAX_RUNS];
                PLFLT widths[MAX_RUNS];
                for (int r = 0; r < nfiles; r++)
                    opts[r] = PL_LEGEND_LINE, colors[r] = colour[r], styles[r] = 1, widths[r] = 2, tcol[r] = 15;
                PLFLT lw, lh;
                pllegend(&lw, &lh, PL_LEGEND_BACKGROUND | PL_LEGEND_BOUNDING_BOX, PL_POSITION_TOP | PL_POSITION_RIGHT,
                         0.02, 0.02, 0.1, 0, 15, 1, 0, 0, nfiles, opts, 1.0, 0.8, 2.0, 0.0, tcol,
                         (const char *const *)names, NULL, NULL, NULL, NULL, colors, styles, widths, NULL, NULL, NULL,
                         NULL);
            }
            plschr(0, 1.0);
        }
        plend();
        printf("plot: wrote %s (%dx%d; %d run%s)\n", out, width, height, nfiles, nfiles > 1 ? "s" : "");
    }
    for (int r = 0; r < nfiles; r++) mt_metrics_curves_free(&runs[r]);
    free(label_copy);
    return rc ? mt_cli_fail("plot", &err) : 0;
}
