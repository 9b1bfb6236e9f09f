/* meshtrain bench-comm: bandwidth of the collectives over all ranks, printed
 * the way nccl-tests does.
 *
 *   size   bytes of the operation's full buffer: the vector for all-reduce and
 *          broadcast, the whole input of reduce-scatter (n blocks), the whole
 *          output of all-gather (n blocks)
 *   time   mean over --iters of one operation, the slowest rank's mean
 *   algbw  size / time
 *   busbw  algbw * factor, the bandwidth each link must sustain in a ring:
 *          all-reduce 2(n-1)/n, reduce-scatter and all-gather (n-1)/n,
 *          broadcast 1
 * A final correctness check per row ("ok"/"WRONG") uses values whose fp32
 * sums are exact. */
#include <stdlib.h>
#include <string.h>
#include "cli/args.h"
#include "cli/cli.h"
#include "core/strlist.h"
#include "comm/comm.h"
#include "core/clock.h"
#include "core/mem.h"

enum { OP_ALLREDUCE, OP_REDUCE_SCATTER, OP_ALLGATHER, OP_BROADCAST, OP_N };
static const char *const op_names[OP_N] = {"allreduce", "reduce_scatter", "allgather", "broadcast"};

static int parse_size(const char *flag, const char *s, size_t *out, mt_error *err) {
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || s[0] == '-')
        return mt_errorf(err, "--%s expects a size like 4096, 1K, 64M or 1G, got '%s'", flag, s);
    unsigned long long mul = 1;
    if (*end == 'K' || *end == 'k') mul = 1ull << 10, end++;
    else if (*end == 'M' || *end == 'm') mul = 1ull << 20, end++;
    else if (*end == 'G' || *end == 'g') mul = 1ull << 30, end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end)
        return mt_errorf(err, "--%s: bad size suffix in '%s' (use K, M or G: powers of 1024)", flag,
                         s);
    if (v > (1ull << 40) / mul) return mt_errorf(err, "--%s: size '%s' is too large", flag, s);
    *out = (size_t)(v * mul);
    return 0;
}

static int parse_ops(const char *s, int *want, mt_error *err) {
    memset(want, 0, OP_N * sizeof *want);
    const char *p = s, *item;
    size_t len;
    while (mt_strlist_next(&p, &item, &len)) {
        int found = 0;
        for (int o = 0; o < OP_N; o++)
            if (len == strlen(op_names[o]) && !strncmp(item, op_names[o], len)) want[o] = found = 1;
        if (len == 3 && !strncmp(item, "all", 3)) {
            for (int o = 0; o < OP_N; o++) want[o] = 1;
            found = 1;
        }
        if (!found)
            return mt_errorf(err,
                             "--ops: unknown collective '%.*s' (choose from allreduce, "
                             "reduce_scatter, allgather, broadcast, all)",
                             (int)len, item);
    }
    for (int o = 0; o < OP_N; o++)
        if (want[o]) return 0;
    return mt_errorf(err, "--ops: no collective named");
}

static void run_op(mt_comm *w, int op, float *send, float *recv, size_t count) {
    int n = mt_comm_size(w);
    switch (op) {
    case OP_ALLREDUCE: mt_comm_allreduce(w, send, recv, count); break;
    case OP_REDUCE_SCATTER: mt_comm_reduce_scatter(w, send, recv, count / (size_t)n); break;
    case OP_ALLGATHER:
        mt_comm_allgather(w, send, recv, count / (size_t)n * sizeof(float));
        break;
    default: mt_comm_broadcast(w, send, count * sizeof(float), 0); break;
    }
}

/* Fills inputs with exactly-summable values, runs once and checks. Returns
 * the number of wrong elements on this rank. */
static long check_op(mt_comm *w, int op, float *send, float *recv, size_t count) {
    int n = mt_comm_size(w), r = mt_comm_rank(w);
    size_t blk = count / (size_t)n;
    for (size_t i = 0; i < count; i++) send[i] = (float)((int)(i % 64) + r);
    for (size_t i = 0; i < count; i++) recv[i] = -1.0f;
    if (op == OP_ALLGATHER)
        for (size_t i = 0; i < blk; i++) send[i] = (float)(r * 1000 + (int)(i % 100));
    run_op(w, op, send, recv, count);
    long wrong = 0;
    double rsum = (double)n * (n - 1) / 2;
    if (op == OP_ALLREDUCE) {
        for (size_t i = 0; i < count; i++) wrong += recv[i] != (float)(n * (double)(i % 64) + rsum);
    } else if (op == OP_REDUCE_SCATTER) {
        for (size_t i = 0; i < blk; i++) {
            size_t g = (size_t)r * blk + i;
            wrong += recv[i] != (float)(n * (double)(g % 64) + rsum);
        }
    } else if (op == OP_ALLGATHER) {
        for (size_t i = 0; i < (size_t)n * blk; i++)
            wrong += recv[i] != (float)((int)(i / blk) * 1000 + (int)(i % blk % 100));
    } else {
        for (size_t i = 0; i < count; i++) wrong += send[i] != (float)(int)(i % 64);
    }
    return wrong;
}

int mt_cli_bench_comm(int argc, char **argv) {
    const char *min_s = "1K", *max_s = "64M", *ops_s = "allreduce,reduce_scatter,allgather,broadcast";
    int iters = 20, warmup = 5, factor = 2, help = 0;
    float timeout = 60;
    mt_arg spec[] = {
        {"min-bytes", MT_ARG_STR, &min_s, "smallest size (default 1K; K/M/G = powers of 1024)", 0},
        {"max-bytes", MT_ARG_STR, &max_s, "largest size (default 64M)", 0},
        {"factor", MT_ARG_INT, &factor, "size multiplier between rows (default 2)", 0},
        {"iters", MT_ARG_INT, &iters, "timed iterations per size (default 20)", 0},
        {"warmup", MT_ARG_INT, &warmup, "untimed iterations per size (default 5)", 0},
        {"ops", MT_ARG_STR, &ops_s,
         "comma-separated: allreduce,reduce_scatter,allgather,broadcast (or all)", 0},
        {"timeout", MT_ARG_FLOAT, &timeout, "seconds any rank waits for the others (default 60)",
         0},
        {"help", MT_ARG_FLAG, &help, "print this help", 0},
    };
    int nspec = (int)(sizeof spec / sizeof spec[0]);
    int wrank = mt_comm_process_rank();
    mt_error err = {{0}};
    size_t minb = 0, maxb = 0;
    int want[OP_N];
    int bad = mt_args_parse(argc, argv, spec, nspec, NULL, 0, NULL, &err) ||
              (!help && (parse_size("min-bytes", min_s, &minb, &err) ||
                         parse_size("max-bytes", max_s, &maxb, &err) ||
                         parse_ops(ops_s, want, &err)));
    if (!bad && !help) {
        if (minb < 4 || maxb < minb)
            bad = mt_errorf(&err, "need 4 <= --min-bytes (%zu) <= --max-bytes (%zu)", minb, maxb);
        else if (iters < 1 || warmup < 0)
            bad = mt_errorf(&err, "need --iters >= 1 and --warmup >= 0 (got %d, %d)", iters,
                            warmup);
        else if (factor < 2)
            bad = mt_errorf(&err, "--factor must be >= 2 (got %d)", factor);
        else if (!(timeout > 0))
            bad = mt_errorf(&err, "--timeout must be > 0 seconds (got %g)", (double)timeout);
    }
    if (help || bad) {
        if (wrank == 0) {
            if (bad) mt_cli_fail("bench-comm", &err);
            else
                mt_args_usage("bench-comm", "[flags]   (run under mpirun -np N)", spec, nspec);
        }
        return bad ? 1 : 0;
    }

    mt_comm_ctx *ctx = mt_comm_ctx_create(timeout, &err);
    if (!ctx) {
        char msg[MT_ERROR_LEN];
        mt_cli_render(err.msg, msg, sizeof msg);
        fprintf(stderr, "meshtrain bench-comm: rank %d: error: %s\n", wrank, msg);
        return 1;
    }
    mt_comm *w = mt_comm_world(ctx);
    int n = mt_comm_size(w), rank = mt_comm_rank(w);
    size_t maxcount = maxb / sizeof(float) + (size_t)n;
    float *send = mt_mem_alloc(NULL, MT_MEM_COMM, maxcount * sizeof(float), "bench-comm send");
    float *recv = mt_mem_alloc(NULL, MT_MEM_COMM, maxcount * sizeof(float), "bench-comm recv");
    if (rank == 0) {
        printf("# meshtrain bench-comm: %d ranks, %d warmup + %d timed iterations per size, "
               "fp32, timeout %.0f s\n",
               n, warmup, iters, (double)timeout);
        printf("# busbw = algbw * (allreduce 2(n-1)/n, reduce_scatter/allgather (n-1)/n, "
               "broadcast 1)\n");
        printf("# %-14s %12s %12s %11s %11s %11s %6s\n", "op", "size(B)", "count", "time(us)",
               "algbw(GB/s)", "busbw(GB/s)", "check");
    }
    for (int op = 0; op < OP_N; op++) {
        if (!want[op]) continue;
        double factor_bus = op == OP_ALLREDUCE   ? 2.0 * (n - 1) / n
                            : op == OP_BROADCAST ? 1.0
                                                 : (double)(n - 1) / n;
        for (size_t size = minb; size <= maxb; size = size * (size_t)factor) {
            size_t count = size / sizeof(float);
            if (op == OP_REDUCE_SCATTER || op == OP_ALLGATHER) count -= count % (size_t)n;
            if (count == 0) continue;
            size_t bytes = count * sizeof(float);
            for (int i = 0; i < warmup; i++) run_op(w, op, send, recv, count);
            mt_comm_barrier(w);
            double t0 = mt_clock_s();
            for (int i = 0; i < iters; i++) run_op(w, op, send, recv, count);
            double t = (mt_clock_s() - t0) / iters;
            mt_comm_allreduce_ctl(w, &t, &t, 1, MT_COMM_F64, MT_COMM_MAX);
            int64_t wrong = check_op(w, op, send, recv, count);
            mt_comm_allreduce_ctl(w, &wrong, &wrong, 1, MT_COMM_I64, MT_COMM_SUM);
            if (rank == 0) {
                double alg = (double)bytes / t / 1e9;
                printf("  %-14s %12zu %12zu %11.2f %11.3f %11.3f %6s\n", op_names[op], bytes,
                       count, t * 1e6, alg, alg * factor_bus, wrong ? "WRONG" : "ok");
                fflush(stdout);
            }
            if (size > maxb / (size_t)factor) break;
        }
    }
    mt_mem_free(NULL, MT_MEM_COMM, send, maxcount * sizeof(float));
    mt_mem_free(NULL, MT_MEM_COMM, recv, maxcount * sizeof(float));
    mt_comm_ctx_free(ctx);
    return 0;
}
