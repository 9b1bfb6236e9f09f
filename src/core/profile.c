#include "core/profile.h"
#include <errno.h>
#include <string.h>
#include <time.h>

static const char *const cat_names[MT_PROF_NCAT] = {
    "gemm", "attention", "layernorm", "gelu", "softmax_xent", "elementwise", "optimizer",
    "allreduce", "reduce_scatter", "allgather", "broadcast", "sendrecv", "alltoall", "wait",
    "other"};

const char *mt_prof_cat_name(mt_prof_cat c) { return (unsigned)c < MT_PROF_NCAT ? cat_names[c] : "?"; }

void mt_profile_init(mt_profile *p) { memset(p, 0, sizeof *p); }

static void ring_add(mt_prof_ring *a, const mt_prof_ring *b) {
    a->comm += b->comm, a->hidden += b->hidden, a->exposed += b->exposed, a->wait += b->wait;
    a->compute += b->compute, a->in_flight += b->in_flight, a->probe += b->probe, a->steps += b->steps;
}

void mt_profile_end_step(mt_profile *p, long step_id, double step_s) {
    if (!p) return;
    double claimed = 0.0;
    for (int c = 0; c < MT_PROF_NCAT; c++)
        if (c != MT_PROF_OTHER) claimed += p->sec[c];
    p->sec[MT_PROF_OTHER] += step_s > claimed ? step_s - claimed : 0.0;
    for (int c = 0; c < MT_PROF_NCAT; c++) {
        p->last[c] = p->sec[c];
        p->total[c] += p->sec[c];
        p->sec[c] = 0.0;
    }
    p->last_gemm_flops = p->gemm_flops;
    p->total_gemm_flops += p->gemm_flops;
    p->gemm_flops = 0.0;
    p->last_ring = p->ring;
    ring_add(&p->total_ring, &p->ring);
    memset(&p->ring, 0, sizeof p->ring);
    p->step_s = step_s;
    p->total_step_s += step_s;
    p->steps++;
    p->step_id = step_id;
}

static double gflops(double flops, double s) { return s > 0.0 ? flops / s * 1e-9 : 0.0; }

void mt_prof_ring_step(mt_profile *p, double wait_s, double in_flight_s, double comm_s) {
    if (!p) return;
    double compute = in_flight_s > wait_s ? in_flight_s - wait_s : 0.0;
    double hidden = comm_s - wait_s; /* what the compute absorbed: never below 0, never more than the compute */
    hidden = hidden < 0.0 ? 0.0 : hidden > compute ? compute : hidden;
    mt_prof_ring *r = &p->ring;
    r->comm += comm_s;
    r->hidden += hidden;
    r->exposed += comm_s - hidden;
    r->wait += wait_s;
    r->compute += compute;
    r->in_flight += in_flight_s;
    r->steps += 1.0;
}

double mt_prof_ring_hidden_pct(const mt_prof_ring *r) { return r->comm > 0.0 ? 100.0 * r->hidden / r->comm : 0.0; }

static void print_ring(const mt_prof_ring *r, double n, FILE *f) {
    if (r->steps <= 0.0) return;
    fprintf(f,
            "  ring: communication %.2f ms, hidden behind compute %.2f ms (%.1f%%), exposed %.2f ms; waited %.2f ms in "
            "its calls, overlapped compute %.2f ms, %.0f ring steps; probe %.2f ms (in other)\n",
            r->comm / n * 1e3, r->hidden / n * 1e3, mt_prof_ring_hidden_pct(r), r->exposed / n * 1e3, r->wait / n * 1e3,
            r->compute / n * 1e3, r->steps / n, r->probe / n * 1e3);
}

static void print_table(const double *sec, double step_s, double flops, FILE *f) {
    fprintf(f, "  %-15s %10s %6s\n", "category", "ms", "%");
    for (int c = 0; c < MT_PROF_NCAT; c++) {
        if (sec[c] <= 0.0) continue;
        fprintf(f, "  %-15s %10.2f %6.1f", cat_names[c], sec[c] * 1e3, step_s > 0.0 ? 100.0 * sec[c] / step_s : 0.0);
        if (c == MT_PROF_GEMM) fprintf(f, "   %.1f GFLOP/s", gflops(flops, sec[c]));
        fputc('\n', f);
    }
}

void mt_profile_print_step(const mt_profile *p, FILE *f) {
    if (!p || p->steps == 0) return;
    fprintf(f, "profile of step %ld: %.2f ms\n", p->step_id, p->step_s * 1e3);
    print_table(p->last, p->step_s, p->last_gemm_flops, f);
    print_ring(&p->last_ring, 1.0, f);
}

void mt_profile_print_summary(const mt_profile *p, FILE *f) {
    if (!p || p->steps == 0) return;
    double mean[MT_PROF_NCAT], n = (double)p->steps;
    for (int c = 0; c < MT_PROF_NCAT; c++) mean[c] = p->total[c] / n;
    fprintf(f, "profile, mean of %ld steps: %.2f ms per step\n", p->steps, p->total_step_s / n * 1e3);
    print_table(mean, p->total_step_s / n, p->total_gemm_flops / n, f);
    print_ring(&p->total_ring, n, f);
}

int mt_profile_write_json(const mt_profile *p, FILE *f, int summary, mt_error *err) {
    if (!p) return 0;
    const double *sec = summary ? p->total : p->last;
    double n = summary && p->steps > 0 ? (double)p->steps : 1.0;
    double step_s = summary ? p->total_step_s : p->step_s;
    double flops = summary ? p->total_gemm_flops : p->last_gemm_flops;
    int bad = 0;
    if (summary)
        bad |= fprintf(f, "{\"steps\":%ld,\"ms_per_step\":%.4f", p->steps, step_s / n * 1e3) < 0;
    else
        bad |= fprintf(f, "{\"step\":%ld,\"ms\":%.4f", p->step_id, step_s * 1e3) < 0;
    bad |= fprintf(f, ",\"gemm_gflops\":%.3f,\"ms_by_category\":{", gflops(flops, sec[MT_PROF_GEMM])) < 0;
    for (int c = 0; c < MT_PROF_NCAT; c++)
        bad |= fprintf(f, "%s\"%s\":%.4f", c ? "," : "", cat_names[c], sec[c] / n * 1e3) < 0;
    bad |= fputc('}', f) == EOF;
    const mt_prof_ring *r = summary ? &p->total_ring : &p->last_ring;
    if (r->steps > 0.0)
        bad |= fprintf(f,
                       ",\"ring\":{\"steps\":%.3f,\"comm_ms\":%.4f,\"hidden_ms\":%.4f,\"exposed_ms\":%.4f,"
                       "\"hidden_pct\":%.3f,\"wait_ms\":%.4f,\"compute_ms\":%.4f,\"in_flight_ms\":%.4f,\"probe_ms\":%.4f}",
                       r->steps / n, r->comm / n * 1e3, r->hidden / n * 1e3, r->exposed / n * 1e3,
                       mt_prof_ring_hidden_pct(r), r->wait / n * 1e3, r->compute / n * 1e3, r->in_flight / n * 1e3,
                       r->probe / n * 1e3) < 0;
    bad |= fputs("}\n", f) < 0;
    if (bad || ferror(f))
        return mt_errorf(err, "cannot write the profile JSON (%s); check the disk and the output path",
                         strerror(errno));
    return 0;
}
