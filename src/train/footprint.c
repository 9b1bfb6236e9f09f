/* Before anything is allocated: does the run fit in memory at all? A size
 * that cannot fit (thousands of layers, a 16M vocabulary, a batch of 2e9)
 * would otherwise allocate and touch gigabytes for up to a minute and then
 * die "out of memory". */
#include "train/footprint.h"
#include "plan/plan.h"
#include <stdio.h>
#include <unistd.h>

/* The bytes this machine can give its processes: physical memory, or a
 * container's limit (cgroup v2, then v1) when that is lower; 0 if unknown. */
static double memory_bytes(void) {
    static const char *const limits[] = {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"};
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    double mem = pages > 0 && size > 0 ? (double)pages * (double)size : 0;
    for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
        FILE *f = fopen(limits[i], "r");
        double v;
        if (!f) continue;
        if (fscanf(f, "%lf", &v) == 1 && v > 0 && (mem <= 0 || v < mem)) mem = v; /* "max": no limit */
        fclose(f);
    }
    return mem;
}

/* "35.4 GB" */
static const char *human(char buf[16], double bytes) {
    static const char *const unit[] = {"bytes", "kB", "MB", "GB", "TB", "PB", "EB"};
    int u = 0;
    while (bytes >= 1000 && u < 6) bytes /= 1000, u++;
    snprintf(buf, 16, "%.3g %s", bytes, unit[u]);
    return buf;
}

int mt_train_check_footprint(const mt_train_opts *o, mt_comm *world, mt_error *err) {
    int chunks = o->pp_schedule == MT_PP_INTERLEAVED ? o->pp_chunks : 1, shard = mt_mesh_shard_size(&o->mesh);
    /* a layout the planner cannot lay out is left to the trainer's own checks */
    if (o->mesh.dp < 1 || o->mesh.tp < 1 || o->mesh.pp < 1 || o->micro_batch < 1 || chunks < 1 || shard < 1 ||
        o->cfg.n_layer % (o->mesh.pp * chunks))
        return 0;
    double avail = memory_bytes();
    if (avail <= 0) return 0;
    /* the planner's engine-exact bytes (as plan {cpu} counts them) of the first rank */
    mt_plan_cluster c = {.name = "cpu", .act_bytes = 4, .engine_exact = 1, .gpus = mt_comm_size(world)};
    mt_plan_layout y = {o->mesh.dp, o->mesh.tp, o->mesh.pp, o->zero, shard /* dp x cp by default (dp / ep with {ep}); stage 0 counts whole states */, o->micro_batch,
                        chunks, o->sequence_parallel, (mt_plan_recompute)o->recompute /* the same order */,
                        o->precision != MT_FP32, 0, 0, 0, o->mesh.ep, mt_mesh_cp_size(&o->mesh)};
    double b[MT_PLAN_NCAT];
    mt_plan_bytes(&o->cfg, &c, &y, o->batch, b);
    /* the planner counts AdamW's state: other optimizers' may be smaller, a disk offload's is not in memory */
    if (o->offload_dir || (o->opt.kind != MT_OPT_ADAMW && o->opt.kind != MT_OPT_ADAM)) b[MT_PLAN_OPTIM] = 0;
    double rank_bytes = 0;
    for (int k = 0; k < MT_PLAN_NCAT; k++) rank_bytes += b[k];
    int me = mt_comm_rank(world), here = 0;
    for (int r = 0; r < mt_comm_size(world); r++) here += mt_comm_node_of(world, r) == mt_comm_node_of(world, me);
    double need = rank_bytes * here;
    if (need <= avail) return 0;
    char t[6][16], ranks[64] = "";
    if (here > 1) snprintf(ranks, sizeof ranks, " (%d ranks of %s)", here, human(t[0], rank_bytes));
    return mt_errorf(err, "this run needs at least %.0f bytes (%s) of memory on this machine%s, which has %.0f (%s): "
                          "per rank parameters %s, gradients %s, optimizer state %s, activations %s (the planner's "
                          "count); make the model, vocabulary, batch or micro-batch smaller, or spread the run over "
                          "more ranks or machines",
                     need, human(t[1], need), ranks, avail, human(t[2], avail),
                     human(t[3], b[MT_PLAN_PARAMS] + b[MT_PLAN_FROZEN]), human(t[4], b[MT_PLAN_GRADS]),
                     human(t[5], b[MT_PLAN_OPTIM]), human(t[0], b[MT_PLAN_ACTS]));
}
