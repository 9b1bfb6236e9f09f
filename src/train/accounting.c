/* Per-rank accounting: bytes held per memory category (at start, at end and
 * peak) and bytes sent per step per collective on each mesh group. Every
 * rank packs its numbers into a fixed record of doubles; one all-gather over
 * the world brings all records to every rank; rank 0 prints a table and
 * writes {report-json}. Not on the per-step path. */
#include "train/accounting.h"
#include "core/fileio.h"
#include <stdlib.h>
#include <string.h>

/* The mesh groups the trainer's collectives run on. */
static const mt_mesh_axis acct_axes[] = {MT_AXIS_DP, MT_AXIS_SHARD, MT_AXIS_REPLICA, MT_AXIS_TP, MT_AXIS_PP, MT_AXIS_CP};
#define ACCT_NMESH 6
#define ACCT_NAXES (ACCT_NMESH + 4) /* and ZeRO++'s groups: hpZ's, qgZ's two hops; {ep}'s all-to-all group */
static const mt_comm *acct_comm(const mt_trainer *tr, int a) {
    const mt_comm *zpp[] = {tr->zero.hpz, tr->zero.qgz_intra, tr->zero.qgz_inter, tr->ep_comm};
    return a < ACCT_NMESH ? mt_mesh_comm(&tr->mesh, acct_axes[a]) : zpp[a - ACCT_NMESH];
}
static const char *acct_name(int a) {
    static const char *const zpp[] = {"hpz", "qgz_intra", "qgz_inter", "ep"};
    return a < ACCT_NMESH ? mt_mesh_axis_name(acct_axes[a]) : zpp[a - ACCT_NMESH];
}

/* Record layout (doubles). */
enum {
    R_CUR = 0,                               /* MT_MEM_NCAT bytes held now */
    R_PEAK = R_CUR + MT_MEM_NCAT,            /* MT_MEM_NCAT peak bytes per category */
    R_PEAK_TOTAL = R_PEAK + MT_MEM_NCAT,     /* peak of the sum */
    R_STEPS = R_PEAK_TOTAL + 1,              /* optimizer steps run by this process */
    R_STEP_S, R_BACKWARD_S, R_EXPOSED_S,     /* summed seconds */
    R_ARENA_COUNT, R_ARENA_BYTES, R_ARENA_BUFFERS, /* the activation arena: allocations, bytes, buffers */
    R_DEV_OPEN, R_DEV_NOW, R_DEV_PLACED,     /* a GPU's used bytes (cudaMemGetInfo) when the backend opened and
                                                now, and the bytes accounted at placement device now; -1: no GPU */
    R_RING_MEASURED, R_RING_TRAIN_STEPS,     /* {profile}: 1 and the profiled steps, else 0 */
    R_RING,                                  /* mt_prof_ring totals: comm, hidden, exposed, wait, compute,
                                                in_flight, probe, steps */
    R_COMM = R_RING + 8,                     /* [axis][kind][calls, bytes_sent, payload, bytes_inter] totals */
    R_LEN = R_COMM + ACCT_NAXES * MT_COMM_NKIND * 4
};

static size_t comm_index(int axis, int kind, int field) {
    return (size_t)R_COMM + ((size_t)axis * MT_COMM_NKIND + (size_t)kind) * 4 + (size_t)field;
}

static void pack_record(const mt_trainer *tr, double *rec) {
    memset(rec, 0, R_LEN * sizeof(double));
    for (int c = 0; c < MT_MEM_NCAT; c++) {
        rec[R_CUR + c] = (double)tr->mem.cur[c];
        rec[R_PEAK + c] = (double)tr->mem.peak[c];
    }
    rec[R_PEAK_TOTAL] = (double)tr->mem.peak_total;
    rec[R_STEPS] = (double)tr->steps_run;
    rec[R_STEP_S] = tr->step_s;
    rec[R_BACKWARD_S] = tr->backward_s;
    rec[R_EXPOSED_S] = tr->zero.exposed_s;
    rec[R_ARENA_COUNT] = (double)tr->mem.arena[MT_MEM_ACTS].count;
    rec[R_ARENA_BYTES] = (double)tr->mem.arena[MT_MEM_ACTS].bytes;
    rec[R_ARENA_BUFFERS] = (double)tr->mem.arena[MT_MEM_ACTS].buffers;
    size_t used = 0;
    int dev = tr->device_used_open > 0 && !mt_backend_device_used((mt_backend *)&tr->be, &used);
    rec[R_DEV_OPEN] = dev ? (double)tr->device_used_open : -1;
    rec[R_DEV_NOW] = dev ? (double)used : -1;
    rec[R_DEV_PLACED] = dev ? (double)mt_mem_placed_total(&tr->mem, MT_PLACE_DEVICE) : -1;
    if (tr->model.prof) {
        const mt_prof_ring *g = &tr->prof.total_ring;
        const double v[8] = {g->comm, g->hidden, g->exposed, g->wait, g->compute, g->in_flight, g->probe, g->steps};
        rec[R_RING_MEASURED] = 1;
        rec[R_RING_TRAIN_STEPS] = (double)tr->prof.steps;
        memcpy(rec + R_RING, v, sizeof v);
    }
    for (int a = 0; a < ACCT_NAXES; a++) {
        const mt_comm *c = acct_comm(tr, a);
        if (!c) continue;
        const mt_comm_stats *st = mt_comm_get_stats(c);
        for (int k = 0; k < MT_COMM_NKIND; k++) {
            rec[comm_index(a, k, 0)] = (double)st->k[k].calls;
            rec[comm_index(a, k, 1)] = (double)st->k[k].bytes_sent;
            rec[comm_index(a, k, 2)] = (double)st->k[k].payload_bytes;
            rec[comm_index(a, k, 3)] = (double)st->k[k].bytes_inter;
        }
    }
}

void mt_trainer_accounting_alloc(mt_trainer *tr, mt_comm *world) {
    tr->world = world;
    size_t n = (size_t)mt_comm_size(world) * R_LEN;
    tr->acct_start = mt_xcalloc(n, sizeof(double), "accounting records");
    tr->acct_end = mt_xcalloc(n, sizeof(double), "accounting records");
}

void mt_trainer_accounting_free(mt_trainer *tr) {
    free(tr->acct_start);
    free(tr->acct_end);
    tr->acct_start = tr->acct_end = NULL;
}

static void gather_records(mt_trainer *tr, double *all) {
    double rec[R_LEN];
    pack_record(tr, rec);
    mt_comm_allgather(tr->world, rec, all, sizeof rec);
}

static double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

static void print_memory_table(const double *all, int n, const char *when, int with_peak) {
    printf("memory per rank %s (MiB):\n  rank %9s %9s %9s %11s %9s %9s %9s %9s%s\n", when, "params", "grads",
           "optimizer", "activations", "comm", "scratch", "frozen", "total", with_peak ? "      peak" : "");
    for (int r = 0; r < n; r++) {
        const double *rec = all + (size_t)r * R_LEN;
        double tot = 0;
        printf("  %4d", r);
        for (int c = 0; c < MT_MEM_NCAT; c++) {
            printf(c == MT_MEM_ACTS ? " %11.2f" : " %9.2f", mib(rec[R_CUR + c]));
            tot += rec[R_CUR + c];
        }
        printf(" %9.2f", mib(tot));
        if (with_peak) printf(" %9.2f", mib(rec[R_PEAK_TOTAL]));
        printf("\n");
    }
    /* a GPU: what meshtrain added to its used memory since the backend opened, beside what it accounts there */
    for (int r = 0; r < n; r++) {
        const double *rec = all + (size_t)r * R_LEN;
        if (rec[R_DEV_NOW] < 0) continue;
        double added = rec[R_DEV_NOW] - rec[R_DEV_OPEN];
        printf("  %4d GPU memory (cudaMemGetInfo): %.2f MiB used, %.2f when the backend opened (CUDA context, stream, "
               "cuBLAS handles, cuBLASLt workspace); the %.2f MiB added vs %.2f accounted at placement device: %+.2f MiB (cuBLAS "
               "workspace, allocation granularity)\n",
               r, mib(rec[R_DEV_NOW]), mib(rec[R_DEV_OPEN]), mib(added), mib(rec[R_DEV_PLACED]),
               mib(added - rec[R_DEV_PLACED]));
    }
    /* at start: the activations are one allocation (models/model.c), its size beside the bytes it holds */
    for (int r = 0; !with_peak && r < n; r++) {
        const double *rec = all + (size_t)r * R_LEN;
        printf("  %4d activation arena: %.0f allocation(s), %.0f bytes, %.0f buffers (%.0f bytes of activations, "
               "%.0f of alignment gaps)\n",
               r, rec[R_ARENA_COUNT], rec[R_ARENA_BYTES], rec[R_ARENA_BUFFERS], rec[R_CUR + MT_MEM_ACTS],
               rec[R_ARENA_BYTES] - rec[R_CUR + MT_MEM_ACTS]);
    }
}

/* Bytes sent per step by each rank, per collective kind summed over groups. */
static void print_comm_table(const double *all, int n) {
    static const mt_comm_kind kinds[] = {MT_COMM_ALLREDUCE, MT_COMM_REDUCE_SCATTER, MT_COMM_ALLGATHER,
                                         MT_COMM_ALLREDUCE_CTL, MT_COMM_BROADCAST, MT_COMM_SEND, MT_COMM_ALLTOALL,
                                         MT_COMM_ALLTOALLV};
    printf("bytes sent per step per rank (MB; dp, shard, replica, tp, pp, cp, ZeRO++ and ep groups; inter-node: the part sent to "
           "another node):\n  rank");
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) printf(" %14s", mt_comm_kind_name(kinds[k]));
    printf(" %14s %14s\n", "total", "inter-node");
    for (int r = 0; r < n; r++) {
        const double *rec = all + (size_t)r * R_LEN;
        double steps = rec[R_STEPS] > 0 ? rec[R_STEPS] : 1.0;
        printf("  %4d", r);
        double total = 0, inter = 0;
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
            double s = 0;
            for (int a = 0; a < ACCT_NAXES; a++) {
                s += rec[comm_index(a, (int)kinds[k], 1)];
                inter += rec[comm_index(a, (int)kinds[k], 3)];
            }
            total += s;
            printf(" %14.4f", s / steps * 1e-6);
        }
        printf(" %14.4f %14.4f\n", total / steps * 1e-6, inter / steps * 1e-6);
    }
}

void mt_trainer_report_start(mt_trainer *tr) {
    gather_records(tr, tr->acct_start);
    if (tr->rank == 0 && tr->o.log_every > 0)
        print_memory_table(tr->acct_start, mt_comm_size(tr->world), "at start", 0);
}

static void json_memory(FILE *f, const char *key, const double *v) {
    fprintf(f, "\"%s\":{", key);
    for (int c = 0; c < MT_MEM_NCAT; c++) fprintf(f, "%s\"%s\":%.0f", c ? "," : "", mt_mem_cat_name((mt_mem_cat)c), v[c]);
    fprintf(f, "}");
}

static void json_comm(FILE *f, const double *rec) {
    double steps = rec[R_STEPS] > 0 ? rec[R_STEPS] : 1.0;
    fprintf(f, "\"comm_per_step\":{");
    for (int a = 0; a < ACCT_NAXES; a++) {
        fprintf(f, "%s\"%s\":{", a ? "," : "", acct_name(a));
        for (int k = 0; k < MT_COMM_NKIND; k++)
            fprintf(f, "%s\"%s\":{\"calls\":%.3f,\"bytes_sent\":%.1f,\"payload\":%.1f,\"bytes_inter\":%.1f}",
                    k ? "," : "", mt_comm_kind_name((mt_comm_kind)k), rec[comm_index(a, k, 0)] / steps,
                    rec[comm_index(a, k, 1)] / steps, rec[comm_index(a, k, 2)] / steps, rec[comm_index(a, k, 3)] / steps);
        fprintf(f, "}");
    }
    fprintf(f, "}");
}

static void json_rank(FILE *f, const double *start, const double *end) {
    double steps = end[R_STEPS] > 0 ? end[R_STEPS] : 1.0;
    json_memory(f, "memory", end + R_CUR);
    fprintf(f, ",");
    json_memory(f, "memory_start", start + R_CUR);
    fprintf(f, ",");
    json_memory(f, "memory_peak", end + R_PEAK);
    fprintf(f, ",\"memory_peak_total\":%.0f", end[R_PEAK_TOTAL]);
    if (end[R_DEV_NOW] >= 0)
        fprintf(f, ",\"gpu_memory\":{\"used_at_open\":%.0f,\"used\":%.0f,\"accounted_device\":%.0f}", end[R_DEV_OPEN],
                end[R_DEV_NOW], end[R_DEV_PLACED]);
    fprintf(f, ",\"activation_arena\":{\"allocations\":%.0f,\"bytes\":%.0f,\"buffers\":%.0f}", end[R_ARENA_COUNT],
            end[R_ARENA_BYTES], end[R_ARENA_BUFFERS]);
    fprintf(f, ",\"time_per_step_s\":{\"step\":%.6f,\"backward\":%.6f,\"grad_comm_exposed\":%.6f},", end[R_STEP_S] / steps,
            end[R_BACKWARD_S] / steps, end[R_EXPOSED_S] / steps);
    json_comm(f, end);
    if (end[R_RING_MEASURED] > 0) { /* the ring's communication ({profile}): per step, mt_prof_ring */
        double n = end[R_RING_TRAIN_STEPS] > 0 ? end[R_RING_TRAIN_STEPS] : 1.0;
        const double *g = end + R_RING;
        fprintf(f, ",\"ring_overlap\":{\"profiled_steps\":%.0f,\"ring_steps_per_step\":%.3f,\"comm_ms\":%.4f,"
                   "\"hidden_ms\":%.4f,\"exposed_ms\":%.4f,\"hidden_pct\":",
                end[R_RING_TRAIN_STEPS], g[7] / n, g[0] / n * 1e3, g[1] / n * 1e3, g[2] / n * 1e3);
        if (g[0] > 0) fprintf(f, "%.3f", 100.0 * g[1] / g[0]);
        else fprintf(f, "null"); /* no ring communication */
        fprintf(f, ",\"wait_ms\":%.4f,\"compute_ms\":%.4f,\"in_flight_ms\":%.4f,\"probe_ms\":%.4f}", g[3] / n * 1e3,
                g[4] / n * 1e3, g[5] / n * 1e3, g[6] / n * 1e3);
    }
}

/* Top level: rank 0's numbers (every rank of a layout holds the same amounts
 * up to the padding of the last shard), then "ranks": every rank's. */
static int write_json(const mt_trainer *tr, const char *path, mt_error *err) {
    char *tmp = NULL; /* written to a temporary, renamed when whole: no empty file on failure */
    mt_error e;
    FILE *f = mt_fopen_temp(path, &tmp, &e);
    if (!f) return mt_errorf(err, "cannot open {report-json} file '%s' for writing: %s", path, e.msg);
    int n = mt_comm_size(tr->world);
    fprintf(f, "{\"world\":%d,\"dp\":%d,\"cp\":%d,\"zero\":%d,\"shard_group\":%d,\"bucket_mb\":%g,\"params\":%zu,\"steps\":%lld,", n,
            tr->dp, tr->cp.size, tr->o.zero, tr->mesh.shape.shard, (double)tr->o.bucket_mb, tr->model.layout.gtotal_params,
            (long long)tr->steps_run);
    fprintf(f, "\"tp\":%d,\"partitioned_activations\":%d,", tr->tp.size, tr->model.partition);
    json_rank(f, tr->acct_start, tr->acct_end);
    fprintf(f, ",\"ranks\":[");
    for (int r = 0; r < n; r++) {
        fprintf(f, "%s{\"rank\":%d,", r ? "," : "", r);
        json_rank(f, tr->acct_start + (size_t)r * R_LEN, tr->acct_end + (size_t)r * R_LEN);
        fprintf(f, "}");
    }
    fprintf(f, "]}\n");
    if (mt_fcommit_temp(f, tmp, path, 0, &e))
        return mt_errorf(err, "cannot write {report-json} file '%s': %s", path, e.msg);
    return 0;
}

int mt_trainer_report_end(mt_trainer *tr, mt_error *err) {
    gather_records(tr, tr->acct_end);
    if (tr->rank != 0) return 0;
    int n = mt_comm_size(tr->world);
    if (tr->o.log_every > 0) {
        print_memory_table(tr->acct_end, n, "at end", 1);
        if (tr->steps_run > 0) print_comm_table(tr->acct_end, n);
    }
    return tr->o.report_json ? write_json(tr, tr->o.report_json, err) : 0;
}
