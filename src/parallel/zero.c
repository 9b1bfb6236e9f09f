/* ZeRO's core (zero.h describes the stages): the even split of every unit
 * over the shard group, set up at init, and the hooks the trainer calls
 * around each unit's forward and backward. Stage 3 gathers a unit's
 * parameters into one of two pooled buffers while the unit before it runs
 * (a fixed sequence per microbatch); a backward writes its gradient into a
 * buffer whose reduction (all-reduce, or reduce-scatter added into the
 * accumulating shard) is started at once and waited for only when the buffer
 * is needed again. Here too: the gradient norm and the owned ranges the
 * optimizer updates. Mixed precision, stage 0's buckets and the checkpoint
 * helpers are in zero_mixed.c, zero_buckets.c and zero_ckpt.c, ZeRO++ in
 * zero_hpz.c, zero_qwz.c and zero_qgz.c. */
#include "parallel/zero_impl.h"
#include "core/clock.h"
#include "ops/ops.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Every wait for a gradient reduction is time the backward did not hide. */
static void wait_grad(mt_zero *z, int u) {
    if (!z->greq[u].active) return;
    double t0 = mt_clock_s();
    mt_comm_wait(&z->greq[u]);
    z->exposed_s += mt_clock_s() - t0;
}

int mt_zero_init(mt_zero *z, mt_model *m, const mt_mesh *mesh, int stage, size_t bucket_bytes,
                 mt_dtype grad_reduce, mt_mem *mem, mt_error *err) {
    memset(z, 0, sizeof *z);
    if (stage < 0 || stage > 3) return mt_errorf(err, "{zero} must be 0, 1, 2 or 3, got %d", stage);
    if (bucket_bytes > 0 && stage != 0)
        return mt_errorf(err, "{bucket-mb} applies to {zero} 0 only: ZeRO stages 1-3 reduce each unit's "
                              "shard-aligned gradient on its own (the unit is the bucket); drop {bucket-mb}");
    if (bucket_bytes > 0 && m->precision != MT_FP32)
        return mt_errorf(err, "{bucket-mb} needs {precision} fp32: under mixed precision each unit's gradient is "
                              "reduced from its own fp32 buffer as its backward ends; drop {bucket-mb}");
    if (grad_reduce != MT_FP32 && !(grad_reduce == MT_BF16 && m->precision == MT_BF16))
        return mt_errorf(err, "{grad-reduce-dtype} %s needs {precision} bf16 (the gradients are held in bf16 "
                              "there); got {precision} %s", mt_dtype_name(grad_reduce), mt_dtype_name(m->precision));
    z->mp.dt16 = m->precision;
    z->mp.reduce16 = grad_reduce == MT_BF16;
    const mt_layout *l = &m->layout;
    z->stage = stage;
    z->mem = mem;
    z->be = m->be;
    z->dp = mt_mesh_comm(mesh, MT_AXIS_DP);
    z->shard = mt_mesh_comm(mesh, MT_AXIS_SHARD);
    z->replica = mt_mesh_comm(mesh, MT_AXIS_REPLICA);
    if (mesh->shape.ep > 1) { /* expert parallelism (zero.h) */
        if (bucket_bytes > 0)
            return mt_errorf(err, "{bucket-mb} is not supported with {ep}: stage 0 reduces each unit over the "
                                  "expert-data-parallel group and its dense part over the ep group; drop {bucket-mb}");
        z->ep = z->replica;
        z->dp = z->shard;
    }
    z->n = stage == 0 ? 1 : mt_comm_size(z->shard);
    z->r = stage == 0 ? 0 : mt_comm_rank(z->shard);
    z->dp_all = mt_mesh_comm(mesh, MT_AXIS_DP);
    int U = z->n_units = l->n_units;
    /* Unit 0 stays gathered (stage 3) and its gradient open for a whole
     * microbatch, from its forward to its backward: the one unit other units
     * may share tensors with (a tied head), wherever in the sequence they run. */
    for (int u = 1; u < U; u++)
        if (l->units[u].shared_unit > 0)
            return mt_errorf(err, "ZeRO: unit %d shares tensors with unit %d; only sharing with unit 0 (the input "
                                  "unit) is supported", u, l->units[u].shared_unit);
    /* {ep}, stages 1-3, fp32: the dense part of every unit over all dp ranks, its experts over the shard
     * group; the layout starts the experts at a multiple of the dp size, so each part splits evenly and
     * a part's collectives never reach into the other's elements (mt_layout_shard_experts) */
    z->split = z->ep && stage >= 1 && !mixed(z) && l->dense_align > 1;
    if (z->split && l->dense_align != mt_comm_size(z->dp_all))
        return mt_errorf(err, "ZeRO with {ep}: the layout's experts start at multiples of %d, the dp group has %d "
                              "ranks (the model part's dense_align must be the dp size)", l->dense_align,
                         mt_comm_size(z->dp_all));
    z->first = mt_xcalloc((size_t)U + 1, sizeof(int), "zero tables");
    z->unumel = mt_xcalloc((size_t)U, sizeof(size_t), "zero tables");
    z->dense = mt_xcalloc((size_t)U, sizeof(size_t), "zero tables");
    int K = 0;
    for (int u = 0; u < U; u++) {
        z->first[u] = K;
        z->unumel[u] = m->held[u] ? l->units[u].numel : 0;
        z->dense[u] = m->held[u] ? l->units[u].dense_numel : 0;
        K += z->split && z->dense[u] > 0 && z->dense[u] < z->unumel[u] ? 2 : 1;
    }
    z->first[U] = z->n_state = K;
    z->numel = mt_xcalloc((size_t)K, sizeof(size_t), "zero tables");
    z->S = mt_xcalloc((size_t)K, sizeof(size_t), "zero tables");
    z->off = mt_xcalloc((size_t)K, sizeof(size_t), "zero tables");
    z->kcomm = mt_xcalloc((size_t)K, sizeof(mt_comm *), "zero tables");
    z->kn = mt_xcalloc((size_t)K, sizeof(int), "zero tables");
    z->kr = mt_xcalloc((size_t)K, sizeof(int), "zero tables");
    z->state_unit = mt_xcalloc((size_t)K, sizeof(int), "zero tables");
    z->state_ul = mt_xcalloc((size_t)K, sizeof(mt_unit_layout), "zero tables");
    z->full_p = mt_xcalloc((size_t)K, sizeof(float *), "zero tables");
    z->full_g = mt_xcalloc((size_t)K, sizeof(float *), "zero tables");
    z->pshard = mt_xcalloc((size_t)K, sizeof(float *), "zero tables");
    z->gshard = mt_xcalloc((size_t)K, sizeof(float *), "zero tables");
    z->greq = mt_xcalloc((size_t)K, sizeof(mt_comm_req), "zero tables");
    z->gslot = mt_xcalloc((size_t)U, sizeof(float *), "zero tables");
    z->mp.gslot16 = mt_xcalloc((size_t)U, sizeof(uint16_t *), "zero tables");
    z->mp.g16_used = mt_xcalloc((size_t)U, sizeof(unsigned char), "zero tables");
    z->mp.g16_sumsq = mt_xcalloc((size_t)U, sizeof(double), "zero tables");
    z->mp.g16_sumsq_ok = mt_xcalloc((size_t)U, sizeof(unsigned char), "zero tables");
    z->in_norm = mt_xcalloc((size_t)U, sizeof(unsigned char), "zero tables");
    for (int u = 0; u < U; u++) {
        z->in_norm[u] = 1;
        for (int k = z->first[u]; k < z->first[u + 1]; k++) {
            int experts = k > z->first[u] || (z->split && z->dense[u] == 0 && z->unumel[u] > 0);
            z->state_unit[k] = u;
            z->state_ul[k] = l->units[u];
            z->off[k] = k > z->first[u] ? z->dense[u] : 0;
            z->numel[k] = !z->split || z->first[u + 1] - z->first[u] == 1 ? z->unumel[u]
                          : experts ? z->unumel[u] - z->dense[u] : z->dense[u];
            z->kcomm[k] = z->split && !experts ? z->dp_all : z->shard;
            z->kn[k] = stage == 0 ? 1 : mt_comm_size(z->kcomm[k]);
            z->kr[k] = stage == 0 ? 0 : mt_comm_rank(z->kcomm[k]);
            z->S[k] = (z->numel[k] + (size_t)z->kn[k] - 1) / (size_t)z->kn[k];
        }
        if (u >= 1 && unit_padded(z, u) > z->pool_len) z->pool_len = unit_padded(z, u);
    }
    if (mixed(z)) {
        mt_zero_init_mixed(z, m);
        return 0;
    }
    z->own_full_p = stage == 1 || stage == 2;
    z->own_full_g = stage == 1;
    for (int u = 0; u < U; u++) {
        if (!z->unumel[u]) continue;
        mt_model_materialize_unit(m, u, stage == 0); /* stages 1-3: only while its storage is made */
        int k0 = z->first[u], k1 = z->first[u + 1];
        size_t P = unit_padded(z, u);
        if (stage == 0) {
            z->full_p[k0] = m->params[u];
            z->full_g[k0] = m->grads[u];
            continue;
        }
        if (z->own_full_p) {
            float *buf =
                mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_PARAMS, P * sizeof(float), "parameters (padded)");
            op_copy(z->be, buf, m->params[u], z->unumel[u]);
            for (int k = k0; k < k1; k++) z->full_p[k] = buf + z->off[k];
        } else { /* stage 3 */
            for (int k = k0; k < k1; k++) {
                size_t b, e;
                owned_range(z, k, &b, &e);
                z->pshard[k] =
                    mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_PARAMS, z->S[k] * sizeof(float), "parameter shard");
                if (e > b) op_copy(z->be, z->pshard[k], m->params[u] + b, (e - b));
            }
        }
        mt_mem_free_at(mem, MT_PLACE_DEVICE, MT_MEM_PARAMS, m->params[u], z->unumel[u] * sizeof(float));
        m->params[u] = z->full_p[k0];
        mt_mem_free_at(mem, MT_PLACE_DEVICE, MT_MEM_GRADS, m->grads[u], z->unumel[u] * sizeof(float));
        m->grads[u] = NULL;
        if (z->own_full_g) {
            float *buf = mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_GRADS, P * sizeof(float), "gradients (padded)");
            for (int k = k0; k < k1; k++) z->full_g[k] = buf + z->off[k];
            m->grads[u] = buf;
        } else {
            for (int k = k0; k < k1; k++)
                z->gshard[k] =
                    mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_GRADS, z->S[k] * sizeof(float), "gradient shard");
        }
    }
    if (stage == 0 && bucket_bytes > 0) mt_zero_build_buckets(z, m, bucket_bytes);
    if (stage >= 2) {
        z->gunit0 = mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_COMM, unit_padded(z, 0) * sizeof(float),
                                    "unit-0 gradient buffer");
        for (int k = 0; k < 2; k++)
            z->gpool[k] =
                mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_COMM, z->pool_len * sizeof(float), "gradient pool");
    }
    if (stage == 3) {
        z->punit0 = mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_COMM, unit_padded(z, 0) * sizeof(float),
                                    "unit-0 gathered parameters");
        for (int k = 0; k < 2; k++)
            z->ppool[k] = mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_COMM, z->pool_len * sizeof(float),
                                          "parameter gather pool");
    }
    return 0;
}

void mt_zero_free(mt_zero *z, mt_model *m) {
    if (!z->numel) return;
    mt_mem *mem = z->mem;
    mt_zero_hpz_free(z);
    mt_zero_qwz_free(z);
    mt_zero_qgz_free(z);
    if (mixed(z)) mt_zero_free_mixed(z, m);
    for (int u = 0; u < z->n_units && !mixed(z); u++) {
        size_t P = unit_padded(z, u);
        int k0 = z->first[u];
        if (z->own_full_p) mt_mem_free_at(mem, MT_PLACE_DEVICE, MT_MEM_PARAMS, z->full_p[k0], P * sizeof(float));
        if (z->own_full_g) mt_mem_free_at(mem, MT_PLACE_DEVICE, MT_MEM_GRADS, z->full_g[k0], P * sizeof(float));
        for (int k = k0; k < z->first[u + 1]; k++) {
            mt_mem_free_at(mem, MT_PLACE_DEVICE, MT_MEM_PARAMS, z->pshard[k], z->S[k] * sizeof(float));
            mt_mem_free_at(mem, MT_PLACE_DEVICE, MT_MEM_GRADS, z->gshard[k], z->S[k] * sizeof(float));
        }
        if (z->stage > 0) m->params[u] = m->grads[u] = NULL; /* not the model's to free any more */
        if (z->bk.gflat) m->grads[u] = NULL;
    }
    mt_zero_free_buckets(z);
    mt_mem_free_at(mem, MT_PLACE_DEVICE, MT_MEM_COMM, z->gunit0, unit_padded(z, 0) * sizeof(float));
    mt_mem_free_at(mem, MT_PLACE_DEVICE, MT_MEM_COMM, z->punit0, unit_padded(z, 0) * sizeof(float));
    for (int k = 0; k < 2; k++) {
        mt_mem_free_at(mem, MT_PLACE_DEVICE, MT_MEM_COMM, z->gpool[k], z->pool_len * sizeof(float));
        mt_mem_free_at(mem, MT_PLACE_DEVICE, MT_MEM_COMM, z->ppool[k], z->pool_len * sizeof(float));
    }
    free(z->numel); free(z->S); free(z->dense); free(z->full_p); free(z->full_g); free(z->pshard); free(z->gshard);
    free(z->gslot); free(z->mp.gslot16); free(z->mp.g16_used); free(z->mp.g16_sumsq); free(z->mp.g16_sumsq_ok); free(z->greq); free(z->in_norm);
    free(z->state_unit); free(z->state_ul); free(z->first); free(z->off); free(z->kcomm); free(z->kn); free(z->kr);
    free(z->unumel);
    memset(z, 0, sizeof *z);
}

void mt_zero_begin_step(mt_zero *z, mt_model *m) {
    /* mixed precision: a step's first contribution is rounded straight into
     * the 16-bit gradient (add_into_16), so it needs no clearing; its padding
     * is never written and stays zero */
    for (int u = 0; u < z->n_units && mixed(z); u++) z->mp.g16_used[u] = z->mp.g16_sumsq_ok[u] = 0;
    for (int u = 0; u < z->n_units && !mixed(z); u++) {
        if (!z->unumel[u]) continue;
        int k0 = z->first[u];
        if (z->full_g[k0]) op_zero(z->be, z->full_g[k0], z->stage == 0 ? z->unumel[u] : unit_padded(z, u));
        for (int k = k0; k < z->first[u + 1]; k++)
            if (z->gshard[k]) op_zero(z->be, z->gshard[k], z->S[k]);
    }
}

/* ---- stage 3: the gather sequence of a microbatch ----
 * entries: forward of units 1..L+1, then (with backward) units L+1..1;
 * entry i lives in ppool[i % 2]. Unit 0 is gathered at its forward. */
static int seq_unit(const mt_zero *z, int i) {
    int H = z->n_units - 1; /* head unit index = L + 1 */
    return i < H ? 1 + i : H - (i - H);
}

/* Unit u's shards gathered into buf (its padded parameters): each state
 * unit's over its group, into its part of buf; the first part's request in
 * req, a second's (split) in req_e. */
static void gather_unit(mt_zero *z, int u, float *buf, mt_comm_req *req, mt_comm_req *req_e) {
    for (int k = z->first[u]; k < z->first[u + 1]; k++)
        mt_comm_iallgather(z->kcomm[k], z->pshard[k], buf + z->off[k], z->S[k] * sizeof(float),
                           k == z->first[u] ? req : req_e);
}

static void start_gather(mt_zero *z, int i) {
    int u = seq_unit(z, i);
    if (z->hpz && i >= z->n_units - 1) { /* a backward gather: from the node's secondary parts */
        mt_zero_hpz_start_gather(z, u, mixed(z) ? (void *)z->mp.p16pool[i % 2] : (void *)z->ppool[i % 2], &z->preq[i % 2]);
        return;
    }
    if (z->qwz) {
        mt_zero_qwz_start_gather(z, u, i % 2, &z->preq[i % 2]);
        return;
    }
    if (mixed(z))
        mt_comm_iallgather(z->shard, z->mp.p16[u], z->mp.p16pool[i % 2], z->S[u] * sizeof(uint16_t), &z->preq[i % 2]);
    else
        gather_unit(z, u, z->ppool[i % 2], &z->preq[i % 2], &z->preq_e[i % 2]);
}

/* Points the model at unit u's fp32 parameters in buf (and, under mixed
 * precision, its 16-bit weights in w16, current: no reconversion). A pool
 * buffer serves one unit at a time: whichever unit held it before loses its
 * pointer, so no stale pointer can alias it (the linear layers find a
 * weight's unit by address). */
void mt_zero_bind_params(mt_zero *z, mt_model *m, int u, float *buf, uint16_t *w16) {
    for (int v = 0; v < z->n_units; v++)
        if (v != u && m->params[v] == buf) m->params[v] = NULL;
    m->params[u] = buf;
    if (mixed(z)) {
        m->w16[u] = w16;
        m->w16_version[u] = m->param_version;
    }
}

static int grad_by_one_gemm(const mt_tensor *t) { return t->grad_by_one_gemm; }

/* Hands unit u's backward the gradient buffer slot, fresh
 * (mt_model.grad_fresh): the weight-gradient GEMMs write their matrices
 * whole (MT_SET_DW), so only the rest -- biases, LayerNorms, the padding,
 * wpe, under 1% of a block -- is cleared. A full clear cost about 1.5% of
 * a 124M bf16 step (a pass over each block's 28 MB slot). */
static void open_fresh_slot(mt_zero *z, mt_model *m, int u, float *slot) {
    size_t b, e;
    for (run_cursor c = {0, 0}; next_run(&m->layout.units[u], unit_padded(z, u), grad_by_one_gemm, &c, &b, &e);)
        op_zero(z->be, slot + b, e - b);
    m->grads[u] = slot;
    m->grad_fresh[u] = 1;
}

void mt_zero_begin_microbatch(mt_zero *z, mt_model *m, int backward) {
    if (z->stage != 3) return;
    int H = z->n_units - 1;
    z->seq_len = backward ? 2 * H : H;
    z->seq_i = 0;
}

static void take_gathered(mt_zero *z, mt_model *m, int unit) {
    int i = z->seq_i++;
    if (i >= z->seq_len || seq_unit(z, i) != unit) mt_die("zero: unit %d out of the gather sequence", unit);
    mt_comm_wait(&z->preq[i % 2]);
    mt_comm_wait(&z->preq_e[i % 2]);
    if (z->qwz && !(z->hpz && i >= z->n_units - 1)) /* hpZ's backward gather is exact */
        mt_zero_qwz_finish_gather(z, unit, i % 2, mixed(z) ? (void *)z->mp.p16pool[i % 2] : (void *)z->ppool[i % 2]);
    if (z->hpz && i < z->n_units - 1) /* a forward gather: keep the node's part for the backward one */
        mt_zero_hpz_keep(z, unit, mixed(z) ? (const void *)z->mp.p16pool[i % 2] : (const void *)z->ppool[i % 2]);
    if (mixed(z)) mt_zero_widen_unit(z, m, unit, z->ppool[i % 2], z->mp.p16pool[i % 2]);
    mt_zero_bind_params(z, m, unit, z->ppool[i % 2], z->mp.p16pool[i % 2]);
    if (i + 1 < z->seq_len) start_gather(z, i + 1);
}

void mt_zero_pre_forward(mt_zero *z, mt_model *m, int unit) {
    if (z->stage != 3) {
        if (mixed(z)) mt_zero_widen_for_unit(z, m, unit);
        return;
    }
    if (unit == 0) {
        if (z->qwz)
            mt_zero_qwz_start_gather(z, 0, 1, &z->preq[1]);
        else if (mixed(z))
            mt_comm_iallgather(z->shard, z->mp.p16[0], z->mp.p16unit0, z->S[0] * sizeof(uint16_t), &z->preq[1]);
        else
            gather_unit(z, 0, z->punit0, &z->preq[1], &z->preq_e[1]);
        mt_comm_wait(&z->preq[1]);
        mt_comm_wait(&z->preq_e[1]);
        if (z->qwz) mt_zero_qwz_finish_gather(z, 0, 1, mixed(z) ? (void *)z->mp.p16unit0 : (void *)z->punit0);
        if (z->seq_len > 0) start_gather(z, 0); /* prefetch unit 1 while unit 0 runs */
        if (mixed(z)) mt_zero_widen_unit(z, m, 0, z->punit0, z->mp.p16unit0);
        mt_zero_bind_params(z, m, 0, z->punit0, z->mp.p16unit0);
        return;
    }
    take_gathered(z, m, unit);
}

/* Stages 2-3: waits for the reduction of the gradient in unit v's slot and
 * adds each state unit's reduced shard (at its part's start in the slot) into
 * its accumulating shard. */
static void drain(mt_zero *z, int v) {
    if (!z->gslot[v]) return;
    float *slot = z->gslot[v];
    for (int k = z->first[v]; k < z->first[v + 1]; k++) {
        wait_grad(z, k);
        if (!mixed(z)) op_add(z->be, z->gshard[k], z->gshard[k], slot + z->off[k], z->S[k]);
    }
    if (mixed(z)) mt_zero_drain_mixed(z, v, slot);
    z->gslot[v] = NULL;
    z->mp.gslot16[v] = NULL;
}

static float *grad_slot(mt_zero *z, int unit) {
    if (unit == 0) return z->gunit0;
    int k = (z->n_units - 1 - unit) % 2;
    float *slot = z->gpool[k];
    for (int v = 1; v < z->n_units; v++)
        if (z->gslot[v] == slot) drain(z, v);
    return slot;
}

/* Unit 0's gradient buffer for this microbatch: opened by the backward of
 * the unit sharing its tensors (a tied head, whose GEMM then writes the
 * shared tensor's gradient whole: fresh) or by unit 0's own backward (an
 * embedding adds rows into it: cleared whole). Already open, it holds
 * gradient and is added into. */
static void open_grad0(mt_zero *z, mt_model *m, int from_head) {
    if (z->g0_open) {
        m->grad_fresh[0] = 0;
        return;
    }
    drain(z, 0);
    z->g0_open = 1;
    if (from_head) {
        open_fresh_slot(z, m, 0, z->gunit0);
        return;
    }
    op_zero(z->be, z->gunit0, unit_padded(z, 0));
    m->grads[0] = z->gunit0;
    m->grad_fresh[0] = 0;
}

void mt_zero_pre_backward(mt_zero *z, mt_model *m, int unit) {
    int shares = m->layout.units[unit].shared_unit >= 0; /* unit 0's tensors (mt_zero_init checks) */
    m->grad_fresh[unit] = 0;
    if (shares) m->grad_fresh[0] = 0;
    if (z->stage == 3 && unit > 0) take_gathered(z, m, unit);
    if (z->stage < 3 && mixed(z)) mt_zero_widen_for_unit(z, m, unit);
    if (z->stage < 2 && !mixed(z)) return;
    if (shares) open_grad0(z, m, 1); /* the unit also writes unit 0's gradient (a tied head) */
    if (unit == 0) {
        open_grad0(z, m, 0);
        return;
    }
    open_fresh_slot(z, m, unit, grad_slot(z, unit));
}

void mt_zero_post_backward(mt_zero *z, mt_model *m, int unit, int last) {
    int k0 = z->first[unit], k1 = z->first[unit + 1];
    if (mixed(z)) {
        mt_zero_post_backward_mixed(z, m, unit, last);
    } else if (z->stage == 0 && z->bk.gflat) {
        if (last) mt_zero_start_bucket(z, unit);
    } else if (z->stage == 0) {
        if (last) mt_comm_iallreduce(z->dp, z->full_g[k0], z->full_g[k0], z->numel[k0], &z->greq[k0]);
    } else if (z->stage == 1) {
        for (int k = k0; k < k1 && last; k++) /* each part's own shard lands at its start */
            mt_comm_ireduce_scatter(z->kcomm[k], z->full_g[k], z->full_g[k], z->S[k], &z->greq[k]);
    } else {
        float *slot = m->grads[unit];
        if (z->qgz_intra) mt_zero_qgz_reduce_scatter(z, unit, slot);
        else
            for (int k = k0; k < k1; k++)
                mt_comm_ireduce_scatter(z->kcomm[k], slot + z->off[k], slot + z->off[k], z->S[k], &z->greq[k]);
        z->gslot[unit] = slot;
        m->grads[unit] = NULL;
    }
    if (unit == 0) z->g0_open = 0;
    if (z->no_overlap) {
        for (int k = k0; k < k1; k++) wait_grad(z, k);
        mt_zero_wait_buckets(z, 0);
    }
    mt_zero_progress(z);
}

void mt_zero_end_microbatch(mt_zero *z, mt_model *m) {
    if (z->stage < 2 && !mixed(z)) return;
    for (int u = 0; u < z->n_units; u++) drain(z, u);
}

void mt_zero_progress(mt_zero *z) {
    for (int k = 0; k < z->n_state; k++)
        if (z->greq[k].active) mt_comm_test(&z->greq[k]);
    for (int k = 0; k < 2; k++) {
        if (z->preq[k].active) mt_comm_test(&z->preq[k]);
        if (z->preq_e[k].active) mt_comm_test(&z->preq_e[k]);
    }
    mt_zero_test_buckets(z);
}


/* The owned elements [0, n) of unit u the replica group sums: the whole
 * shard under hybrid sharding; under expert parallelism its dense part only
 * (the ep group's replicas hold different experts after it). */
static size_t replica_len(const mt_zero *z, int u) {
    if (!z->ep) return z->S[u];
    size_t b = (size_t)z->r * z->S[u], d = z->dense[u];
    return d <= b ? 0 : d - b < z->S[u] ? d - b : z->S[u];
}

static void allreduce_owned_n(mt_zero *z, int u, mt_comm *comm, size_t n) {
    if (!mixed(z)) {
        mt_comm_allreduce(comm, grad_shard(z, u), grad_shard(z, u), n);
        return;
    }
    z->mp.g16_sumsq_ok[u] = 0;
    float *g = mt_zero_owned_grad(z, u, 0, n);
    mt_comm_allreduce(comm, g, g, n);
    op_to_16(z->be, z->mp.dt16, z->mp.g16[u], g, n);
}

void mt_zero_finish_grads(mt_zero *z, mt_model *m) {
    mt_zero_end_microbatch(z, m);
    for (int k = 0; k < z->n_state; k++) wait_grad(z, k);
    mt_zero_wait_buckets(z, 1);
    for (int u = 0; u < z->n_units && mixed(z); u++) /* a unit without a backward this step */
        if (z->numel[u] && !z->mp.g16_used[u]) op_zero_bytes(z->be, z->mp.g16[u], g16_len(z, u) * sizeof(uint16_t));
    /* split: every part was reduced over its whole group already */
    if ((z->stage >= 1 || z->ep) && !z->split && mt_comm_size(z->replica) > 1) {
        for (int u = 0; u < z->n_units; u++) {
            size_t n = replica_len(z, u);
            if (!z->numel[u] || !n) continue;
            if (!mixed(z)) {
                mt_comm_iallreduce(z->replica, grad_shard(z, u), grad_shard(z, u), n, &z->greq[u]);
            } else if (z->mp.reduce16) {
                z->mp.g16_sumsq_ok[u] = 0;
                mt_comm_iallreduce_bf16(z->replica, z->mp.g16[u], z->mp.g16[u], n, &z->greq[u]);
                wait_grad(z, u);
            } else {
                allreduce_owned_n(z, u, z->replica, n);
            }
        }
        for (int u = 0; u < z->n_units; u++) wait_grad(z, u);
    }
}

/* Sum of squares of the owned gradient elements [off, off + n) of state unit k. */
static double owned_sumsq(const mt_zero *z, int k, size_t off, size_t n) {
    return mixed(z) ? op_sumsq_16(z->be, z->mp.dt16, z->mp.g16[k] + off, n)
                    : op_sumsq(z->be, grad_shard(z, k) + off, n);
}

/* Sum of squares of the owned shard of state unit k over the tensors this
 * rank counts: a tensor held by several tp ranks (replicated: norms,
 * position tables, row-parallel biases; or a piece on tp_replicas ranks) is
 * counted by the first rank holding it. */
static double unit_sumsq(mt_zero *z, const mt_model *m, int k, size_t a, size_t b) {
    if (b <= a) return 0.0;
    if (m->layout.tp_rank == 0)
        return a == 0 && b == z->S[k] && z->mp.g16_sumsq_ok[k] ? z->mp.g16_sumsq[k] : owned_sumsq(z, k, a, b - a);
    size_t base = z->stage >= 1 ? z->off[k] + (size_t)z->kr[k] * z->S[k] : 0, lo = base + a, hi = base + b;
    const mt_unit_layout *ul = &m->layout.units[z->state_unit[k]];
    double s = 0.0;
    for (int i = 0; i < ul->n_tensors; i++) {
        const mt_tensor *t = &ul->t[i];
        if (m->layout.tp_rank % t->tp_replicas) continue; /* a copy the group's first rank counts */
        size_t tb = t->offset > lo ? t->offset : lo, te = t->offset + t->numel < hi ? t->offset + t->numel : hi;
        if (te > tb) s += owned_sumsq(z, k, tb - base, te - tb);
    }
    return s;
}

double mt_zero_grad_sumsq(mt_zero *z, mt_model *m) {
    double s = 0.0, se = 0.0; /* se: the experts' part under expert parallelism */
    if (z->split) { /* every element is owned by exactly one dp rank: dense parts over dp, experts over the
                       shard group of each ep rank */
        for (int k = 0; k < z->n_state; k++)
            if (z->numel[k] && z->in_norm[z->state_unit[k]]) s += unit_sumsq(z, m, k, 0, z->S[k]);
        mt_comm_allreduce_ctl(z->dp_all, &s, &s, 1, MT_COMM_F64, MT_COMM_SUM);
        return s;
    }
    for (int u = 0; u < z->n_units; u++) {
        if (!z->numel[u] || !z->in_norm[u]) continue;
        size_t n = z->ep ? replica_len(z, u) : z->S[u];
        s += unit_sumsq(z, m, u, 0, n);
        se += unit_sumsq(z, m, u, n, z->S[u]);
    }
    if (z->ep) { /* the ep group's ranks hold the same dense elements but their own experts */
        mt_comm_allreduce_ctl(z->ep, &se, &se, 1, MT_COMM_F64, MT_COMM_SUM);
        s += se;
    }
    if (z->stage >= 1) mt_comm_allreduce_ctl(z->shard, &s, &s, 1, MT_COMM_F64, MT_COMM_SUM);
    return s;
}

int mt_zero_n_state(const mt_zero *z) { return z->n_state; }

int mt_zero_state_unit(const mt_zero *z, int k) { return z->state_unit[k]; }

const mt_unit_layout *mt_zero_state_layouts(const mt_zero *z) { return z->state_ul; }

mt_comm *mt_zero_state_group(const mt_zero *z, int k) {
    return z->stage >= 1 && z->kn[k] > 1 ? z->kcomm[k] : NULL;
}

void mt_zero_owned(const mt_zero *z, mt_model *m, int k, size_t *b, size_t *e, float **p, float **g) {
    (void)m;
    owned_range(z, k, b, e);
    if (mixed(z)) {
        *p = z->mp.master[k];
        *g = NULL;
        return;
    }
    *p = z->stage == 3 ? z->pshard[k] : z->full_p[k] + (*b - z->off[k]);
    *g = grad_shard(z, k);
}

float *mt_zero_owned_grad(mt_zero *z, int k, size_t off, size_t n) {
    if (!mixed(z)) return grad_shard(z, k) + off;
    /* at the scratch's start: a chunked caller reuses the same cache lines */
    op_from_16(z->be, z->mp.dt16, z->mp.gscratch, z->mp.g16[k] + off, n);
    return z->mp.gscratch;
}

void mt_zero_poison_grad(mt_zero *z, int k) {
    z->mp.g16_sumsq_ok[k] = 0;
    if (!mixed(z)) grad_shard(z, k)[0] = INFINITY;
    else z->mp.g16[k][0] = z->mp.dt16 == MT_BF16 ? mt_fp32_to_bf16(INFINITY) : mt_fp32_to_fp16(INFINITY);
}

void mt_zero_allreduce_owned_grad(mt_zero *z, int u, mt_comm *comm) {
    for (int k = z->first[u]; k < z->first[u + 1]; k++) allreduce_owned_n(z, k, comm, z->S[k]);
}

size_t mt_zero_state_len(const mt_zero *z, int k) { return z->S[k]; }


/* Stages 1-2: every rank's updated shard to every rank (mixed precision:
 * the 16-bit parameters, half the bytes of fp32); each state unit over its
 * group. */
void mt_zero_after_step(mt_zero *z, mt_model *m) {
    if (z->stage != 1 && z->stage != 2) return;
    for (int k = 0; k < z->n_state; k++) {
        if (!z->numel[k]) continue;
        if (mixed(z))
            mt_comm_iallgather(z->shard, z->mp.p16[k] + own16(z, k), z->mp.p16[k], z->S[k] * sizeof(uint16_t),
                               &z->greq[k]);
        else
            mt_comm_iallgather(z->kcomm[k], z->full_p[k] + (size_t)z->kr[k] * z->S[k], z->full_p[k],
                               z->S[k] * sizeof(float), &z->greq[k]);
    }
    mt_comm_waitall(z->greq, z->n_state);
}
