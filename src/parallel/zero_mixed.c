/* Mixed precision (ZeRO paper, section 5): parameters and gradients held in
 * 16 bits (bf16 or fp16), the fp32 master only for the owned range. The
 * model's fp32 values are taken in once at init; before a unit runs, its
 * 16-bit parameters are widened into a pooled fp32 buffer for the non-GEMM
 * ops while the GEMMs read the 16-bit storage itself; after its backward the
 * unit's gradient, computed into a transient fp32 buffer, is added into the
 * 16-bit gradient, or reduced first (in fp32, or rounded to bf16); the
 * optimizer updates the master from the owned gradient widened a chunk at a
 * time and rounds the result back into the 16-bit parameters. zero.h says
 * which stage keeps what, and when each rounding happens. */
#include "parallel/zero_impl.h"
#include "ops/ops.h"
#include <stdlib.h>
#include <string.h>

/* Mixed precision: takes the model's fp32 initial values into the 16-bit
 * parameters and the fp32 master of the owned range, and frees the model's
 * fp32 parameters, gradients and 16-bit weight copies (the unit hooks point
 * the model at pooled buffers instead). */
void mt_zero_init_mixed(mt_zero *z, mt_model *m) {
    mt_mem *mem = z->mem;
    int U = z->n_units;
    z->mp.p16 = mt_xcalloc((size_t)U, sizeof(uint16_t *), "zero tables");
    z->mp.g16 = mt_xcalloc((size_t)U, sizeof(uint16_t *), "zero tables");
    z->mp.master = mt_xcalloc((size_t)U, sizeof(float *), "zero tables");
    z->mp.gscratch_len = 1;
    for (int u = 0; u < U; u++) {
        if (!z->numel[u]) continue;
        mt_model_materialize_unit(m, u, 0); /* this unit's initial values, freed below */
        size_t S = z->S[u], b, e;
        owned_range(z, u, &b, &e);
        z->mp.gscratch_len = S > z->mp.gscratch_len ? S : z->mp.gscratch_len;
        z->mp.master[u] =
            mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_OPTIM, S * sizeof(float), "fp32 master parameters");
        op_zero_bytes(z->be, z->mp.master[u], S * sizeof(float));
        if (e > b) op_copy(z->be, z->mp.master[u], m->params[u] + b, (e - b));
        size_t np = p16_len(z, u), ng = g16_len(z, u);
        z->mp.p16[u] = mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_PARAMS, np * sizeof(uint16_t), "16-bit parameters");
        op_zero_bytes(z->be, z->mp.p16[u], np * sizeof(uint16_t));
        if (z->stage == 3) op_to_16(z->be, z->mp.dt16, z->mp.p16[u], z->mp.master[u], S);
        else op_to_16(z->be, z->mp.dt16, z->mp.p16[u], m->params[u], z->numel[u]);
        z->mp.g16[u] = mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_GRADS, ng * sizeof(uint16_t), "16-bit gradients");
        op_zero_bytes(z->be, z->mp.g16[u], ng * sizeof(uint16_t));
        mt_mem_free_at(mem, MT_PLACE_DEVICE, MT_MEM_PARAMS, m->params[u], z->numel[u] * sizeof(float));
        mt_mem_free_at(mem, MT_PLACE_DEVICE, MT_MEM_GRADS, m->grads[u], z->numel[u] * sizeof(float));
        if (m->w16[u]) mt_mem_free_at(mem, MT_PLACE_DEVICE, MT_MEM_PARAMS, m->w16[u], z->numel[u] * sizeof(uint16_t));
        m->params[u] = m->grads[u] = NULL;
        m->w16[u] = NULL;
    }
    size_t P0 = padded(z, 0);
    z->punit0 = mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_COMM, P0 * sizeof(float), "unit-0 fp32 parameters");
    z->gunit0 = mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_COMM, P0 * sizeof(float), "unit-0 gradient buffer");
    for (int k = 0; k < 2; k++) {
        z->ppool[k] =
            mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_COMM, z->pool_len * sizeof(float), "fp32 parameter pool");
        z->gpool[k] = mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_COMM, z->pool_len * sizeof(float), "gradient pool");
    }
    if (z->stage == 3) {
        z->mp.p16unit0 = mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_COMM, P0 * sizeof(uint16_t),
                                         "unit-0 gathered 16-bit parameters");
        for (int k = 0; k < 2; k++)
            z->mp.p16pool[k] = mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_COMM, z->pool_len * sizeof(uint16_t),
                                               "16-bit parameter gather pool");
    }
    if (z->stage >= 2 && z->mp.reduce16) {
        z->mp.g16unit0 =
            mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_COMM, P0 * sizeof(uint16_t), "unit-0 bf16 gradient buffer");
        for (int k = 0; k < 2; k++)
            z->mp.g16pool[k] = mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_COMM, z->pool_len * sizeof(uint16_t),
                                               "bf16 gradient pool");
    }
    z->mp.gscratch = mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_SCRATCH, z->mp.gscratch_len * sizeof(float),
                                     "owned gradient in fp32");
}

void mt_zero_free_mixed(mt_zero *z, mt_model *m) {
    mt_mem *mem = z->mem;
    size_t P0 = padded(z, 0);
    for (int u = 0; u < z->n_units; u++) {
        mt_mem_free_at(mem, MT_PLACE_DEVICE, MT_MEM_OPTIM, z->mp.master[u], z->S[u] * sizeof(float));
        mt_mem_free_at(mem, MT_PLACE_DEVICE, MT_MEM_PARAMS, z->mp.p16[u], p16_len(z, u) * sizeof(uint16_t));
        mt_mem_free_at(mem, MT_PLACE_DEVICE, MT_MEM_GRADS, z->mp.g16[u], g16_len(z, u) * sizeof(uint16_t));
        m->params[u] = m->grads[u] = NULL; /* pooled buffers: not the model's to free */
        m->w16[u] = NULL;
    }
    mt_mem_free_at(mem, MT_PLACE_DEVICE, MT_MEM_COMM, z->mp.p16unit0, P0 * sizeof(uint16_t));
    mt_mem_free_at(mem, MT_PLACE_DEVICE, MT_MEM_COMM, z->mp.g16unit0, P0 * sizeof(uint16_t));
    for (int k = 0; k < 2; k++) {
        mt_mem_free_at(mem, MT_PLACE_DEVICE, MT_MEM_COMM, z->mp.p16pool[k], z->pool_len * sizeof(uint16_t));
        mt_mem_free_at(mem, MT_PLACE_DEVICE, MT_MEM_COMM, z->mp.g16pool[k], z->pool_len * sizeof(uint16_t));
    }
    mt_mem_free_at(mem, MT_PLACE_DEVICE, MT_MEM_SCRATCH, z->mp.gscratch, z->mp.gscratch_len * sizeof(float));
    free(z->mp.p16); free(z->mp.g16); free(z->mp.master);
}

static int read_16bit_only(const mt_tensor *t) { return t->read_16bit_only; }

/* Widens unit u's 16-bit parameters src into buf, except the tensors the
 * model reads only in 16 bits (the linear layers' weights, an embedding; from
 * m->w16): their part of buf is never read and keeps whatever the pool
 * buffer held (or was never touched) -- 99% of a block's elements. */
void mt_zero_widen_unit(const mt_zero *z, const mt_model *m, int u, float *buf, const uint16_t *src) {
    size_t b, e;
    for (run_cursor c = {0, 0}; next_run(&m->layout.units[u], z->numel[u], read_16bit_only, &c, &b, &e);)
        op_from_16(z->be, z->mp.dt16, buf + b, src + b, e - b);
}

/* Mixed precision, stages 0-2: widens unit u's 16-bit parameters for its
 * forward or backward (unit 0, which a tied head shares, once per parameter change). */
static void widen_params(mt_zero *z, mt_model *m, int u) {
    if (u == 0) {
        if (z->mp.punit0_version != m->param_version) {
            mt_zero_widen_unit(z, m, 0, z->punit0, z->mp.p16[0]);
            z->mp.punit0_version = m->param_version;
        }
        mt_zero_bind_params(z, m, 0, z->punit0, z->mp.p16[0]);
        return;
    }
    float *buf = z->ppool[z->mp.conv_k];
    z->mp.conv_k ^= 1;
    mt_zero_widen_unit(z, m, u, buf, z->mp.p16[u]);
    mt_zero_bind_params(z, m, u, buf, z->mp.p16[u]);
}

/* Mixed precision, stages 0-2: the fp32 parameters unit u's forward or
 * backward reads, with those of the unit it shares tensors with (a tied
 * head: unit 0). */
void mt_zero_widen_for_unit(mt_zero *z, mt_model *m, int u) {
    widen_params(z, m, u);
    int s = m->layout.units[u].shared_unit;
    if (s >= 0 && z->numel[s]) widen_params(z, m, s);
}

/* The 16-bit gradient of unit u += x (n elements): the first contribution
 * of a step is rounded straight in (the gradient is zero then). */
static void add_into_16(mt_zero *z, int u, const float *x, size_t n) {
    if (z->mp.g16_used[u]) op_accumulate_16(z->be, z->mp.dt16, z->mp.g16[u], x, n);
    else op_to_16(z->be, z->mp.dt16, z->mp.g16[u], x, n);
    z->mp.g16_used[u] = 1;
}

/* After the wait for its reduction (zero.c's drain): stages 0-1 hold the
 * reduced sum of every microbatch, stages 2-3 this microbatch's shard. */
void mt_zero_drain_mixed(mt_zero *z, int v, float *slot) {
    if (z->stage <= 1) { /* the reduced sum of every microbatch, i.e. the owned gradient (S
                            elements): rounded once, its norm taken in the same pass */
        z->mp.g16_sumsq[v] = op_round_to_16_sumsq(z->be, z->mp.dt16, z->mp.g16[v], slot, z->S[v]);
        z->mp.g16_sumsq_ok[v] = 1;
        z->mp.g16_used[v] = 1;
    } else {
        if (z->mp.gslot16[v]) op_from_16(z->be, z->mp.dt16, slot, z->mp.gslot16[v], z->S[v]);
        add_into_16(z, v, slot, z->S[v]);
    }
}

/* The 16-bit buffer paired with fp32 gradient buffer slot (bf16 reduction). */
static uint16_t *slot16(const mt_zero *z, const float *slot) {
    return slot == z->gunit0 ? z->mp.g16unit0 : slot == z->gpool[0] ? z->mp.g16pool[0] : z->mp.g16pool[1];
}

void mt_zero_post_backward_mixed(mt_zero *z, mt_model *m, int unit, int last) {
    float *slot = m->grads[unit];
    m->grads[unit] = NULL;
    size_t n = z->numel[unit], S = z->S[unit];
    uint16_t *g = z->mp.g16[unit];
    if (z->stage >= 2) {
        if (z->qgz_intra) {
            mt_zero_qgz_reduce_scatter(z, unit, slot);
        } else if (z->mp.reduce16) {
            uint16_t *s16 = slot16(z, slot);
            op_to_16(z->be, z->mp.dt16, s16, slot, padded(z, unit));
            mt_comm_ireduce_scatter_bf16(z->shard, s16, s16, S, &z->greq[unit]);
            z->mp.gslot16[unit] = s16;
        } else {
            mt_comm_ireduce_scatter(z->shard, slot, slot, S, &z->greq[unit]);
        }
        z->gslot[unit] = slot;
    } else if (!last) {
        add_into_16(z, unit, slot, n);
    } else if (z->mp.reduce16) {
        add_into_16(z, unit, slot, n);
        if (z->stage == 0) mt_comm_iallreduce_bf16(z->dp, g, g, n, &z->greq[unit]);
        else mt_comm_ireduce_scatter_bf16(z->shard, g, g, S, &z->greq[unit]);
    } else {
        if (z->mp.g16_used[unit]) op_add_from_16(z->be, z->mp.dt16, slot, g, n); /* the earlier microbatches */
        if (z->stage == 0) mt_comm_iallreduce(z->dp, slot, slot, n, &z->greq[unit]);
        else mt_comm_ireduce_scatter(z->shard, slot, slot, S, &z->greq[unit]);
        z->gslot[unit] = slot;
    }
}

void mt_zero_round_owned_params(mt_zero *z, int u, size_t off, size_t n, const float *master) {
    if (mixed(z) && n) op_to_16(z->be, z->mp.dt16, z->mp.p16[u] + own16(z, u) + off, master, n);
}

void mt_zero_release_master(mt_zero *z, int u) {
    if (!mixed(z) || !z->mp.master[u]) return;
    mt_mem_free_at(z->mem, MT_PLACE_DEVICE, MT_MEM_OPTIM, z->mp.master[u], z->S[u] * sizeof(float));
    z->mp.master[u] = NULL;
}

mt_dtype mt_zero_owned_16(mt_zero *z, int u, const uint16_t **g16, uint16_t **p16) {
    *g16 = mixed(z) ? z->mp.g16[u] : NULL; /* the owned gradient starts the 16-bit gradient (mt_zero_owned_grad) */
    *p16 = mixed(z) ? z->mp.p16[u] + own16(z, u) : NULL;
    return z->mp.dt16;
}
