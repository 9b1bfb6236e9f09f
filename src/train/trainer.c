#include "train/trainer.h"
#include "core/clock.h"
#include "models/family.h"
#include "ops/ops.h"
#include "train/train_io.h"
#include "quant/qweight.h"
#include "train/footprint.h"
#include "train/progress.h"
#include "comm/trace_merge.h"
#include "core/stop_signal.h"
#include <stdarg.h>
#include <errno.h>
#include <unistd.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


/* The optimizer's state of every unit over the rank's owned range (none
 * for another stage's units), in memory or in a disk-offload file. Under
 * mixed precision with offload the fp32 master is one more stream of the
 * file (ZeRO-Infinity keeps it with the moments): written once here, then
 * freed from memory. Rank-local. */
static int init_optimizer(mt_trainer *tr, mt_error *err) {
    const mt_train_opts *o = &tr->o;
    mt_zero *z = &tr->zero;
    int K = mt_zero_n_state(z); /* the optimizer's units are ZeRO's state units */
    size_t n = (size_t)(K > 0 ? K : 1);
    size_t *lo = mt_xcalloc(n, sizeof *lo, "optimizer ranges"), *hi = mt_xcalloc(n, sizeof *hi, "optimizer ranges"),
           *len = mt_xcalloc(n, sizeof *len, "optimizer ranges");
    for (int k = 0; k < K; k++) {
        float *p, *g;
        mt_zero_owned(z, &tr->model, k, &lo[k], &hi[k], &p, &g);
        len[k] = mt_zero_state_len(z, k);
    }
    mt_opt_config c = mt_train_opts_optimizer_config(o);
    mt_opt_offload_cfg off = {o->offload_dir, tr->rank, (size_t)((double)o->offload_buffer_mb * 1048576.0),
                              o->precision != MT_FP32};
    int rc = mt_opt_states_init(&tr->optim, &c, mt_zero_state_layouts(z), K, lo, hi, len, &off, &tr->mem, err);
    tr->optim.be = &tr->be; /* its in-memory state is this backend's memory */
    for (int k = 0; k < K && !rc && mt_opt_states_has_master(&tr->optim); k++) {
        float *p, *g;
        if (!len[k]) continue;
        mt_zero_owned(z, &tr->model, k, &lo[k], &hi[k], &p, &g);
        rc = mt_opt_states_put_master(&tr->optim, k, p, err);
        if (!rc) mt_zero_release_master(z, k);
    }
    free(lo);
    free(hi);
    free(len);
    return rc;
}

/* Makes a rank-local outcome collective: if any rank failed, every rank
 * returns -1 with the message of the lowest failing rank (prefixed with its
 * rank when not every rank failed). */
static int agree(mt_comm *world, int rc, mt_error *err) {
    int64_t n = mt_comm_size(world), me = mt_comm_rank(world);
    int64_t v[2] = {rc ? me : n, rc ? 1 : 0};
    mt_comm_allreduce_ctl(world, &v[0], &v[0], 1, MT_COMM_I64, MT_COMM_MIN);
    mt_comm_allreduce_ctl(world, &v[1], &v[1], 1, MT_COMM_I64, MT_COMM_SUM);
    if (v[0] == n) return 0;
    char msg[MT_ERROR_LEN];
    memset(msg, 0, sizeof msg);
    if (me == v[0] && err) snprintf(msg, sizeof msg, "%s", err->msg);
    mt_comm_broadcast(world, msg, sizeof msg, (int)v[0]);
    if (v[1] == n) return mt_errorf(err, "%s", msg);
    return mt_errorf(err, "rank %lld: %s", (long long)v[0], msg);
}

/* The first owned parameter tensor of this rank holding an inf or NaN
 * (its name), or NULL. The owned range is what the optimizer updates; a
 * master streamed from disk is not looked at. */
static int nonfinite(mt_trainer *tr, const float *x, size_t n) {
    double s[MT_SCALAR_COUNT];
    mt_backend_clear_scalar(&tr->be, MT_SCALAR_PARAMS_NONFINITE);
    op_nonfinite_flag(&tr->be, MT_SCALAR_PARAMS_NONFINITE, x, n);
    mt_backend_read_scalars(&tr->be, s);
    return s[MT_SCALAR_PARAMS_NONFINITE] != 0.0;
}

static const char *owned_nonfinite_tensor(mt_trainer *tr) {
    const mt_layout *l = &tr->model.layout;
    for (int k = 0; k < mt_zero_n_state(&tr->zero); k++) {
        if (!mt_zero_state_len(&tr->zero, k)) continue;
        int u = mt_zero_state_unit(&tr->zero, k);
        size_t lo, hi;
        float *p, *g;
        mt_zero_owned(&tr->zero, &tr->model, k, &lo, &hi, &p, &g);
        if (!p || hi <= lo || !nonfinite(tr, p, hi - lo)) continue;
        for (int i = 0; i < l->units[u].n_tensors; i++) {
            const mt_tensor *t = &l->units[u].t[i];
            size_t b = t->offset > lo ? t->offset : lo, e = t->offset + t->numel < hi ? t->offset + t->numel : hi;
            if (e > b && nonfinite(tr, p + (b - lo), e - b)) return t->name;
        }
        return l->units[u].t[0].name;
    }
    return NULL;
}

/* 1 if this rank's owned parameters hold an inf or NaN: one vectorised read
 * of the shard the optimizer has just written (still in cache for small
 * shards; its cost is measured in docs/usage.md), flagged in a backend
 * scalar the host reads once. */
static int owned_params_nonfinite(mt_trainer *tr) {
    double s[MT_SCALAR_COUNT];
    mt_backend_clear_scalar(&tr->be, MT_SCALAR_PARAMS_NONFINITE);
    for (int k = 0; k < mt_zero_n_state(&tr->zero); k++) {
        if (!mt_zero_state_len(&tr->zero, k)) continue;
        size_t lo, hi;
        float *p, *g;
        mt_zero_owned(&tr->zero, &tr->model, k, &lo, &hi, &p, &g);
        if (p && hi > lo) op_nonfinite_flag(&tr->be, MT_SCALAR_PARAMS_NONFINITE, p, hi - lo);
    }
    mt_backend_read_scalars(&tr->be, s);
    return s[MT_SCALAR_PARAMS_NONFINITE] != 0.0;
}

/* The piece groups of tensor parallelism: ranks that hold the same piece of
 * a tensor cut into fewer pieces than tp ranks (the layout's tp_replicas;
 * one group size per model). Collective over the tp group. */
static int init_tp_pieces(mt_trainer *tr, mt_error *err) {
    const mt_layout *l = &tr->model.layout;
    int rep = 1;
    for (int u = 0; u < l->n_units; u++)
        for (int i = 0; i < l->units[u].n_tensors; i++) {
            const mt_tensor *t = &l->units[u].t[i];
            if (t->split == MT_TP_REPLICATED || t->tp_replicas == 1) continue;
            if (rep > 1 && t->tp_replicas != rep)
                return mt_errorf(err, "tensor %s: %d tp replicas, another tensor has %d (one group size per model)",
                                 t->name, t->tp_replicas, rep);
            rep = t->tp_replicas;
        }
    return mt_tp_init_pieces(&tr->tp, rep, err);
}

/* The part of init that reads files (may fail on one rank only). */
static int init_local(mt_trainer *tr, const char *from, mt_error *err) {
    mt_train_opts *op = &tr->o;
    mt_ckpt_info info;
    memset(&info, 0, sizeof info);
    if (from) {
        char hf_config[4200];
        snprintf(hf_config, sizeof hf_config, "%s/config.json", from);
        if (mt_train_ckpt_peek(from, &info, err)) {
            if (op->init_from && access(hf_config, F_OK) == 0) /* a Hugging Face directory (GPTQ, too) */
                return mt_errorf(err, "{init-from} %s is a Hugging Face directory, not a checkpoint: import it first "
                                      "(`meshtrain import --format hf --in %s --out CKPT`; a GPTQ directory's codes "
                                      "then stay the frozen base with {quantize-base} gptq) and start from CKPT",
                                 from, from);
            return -1;
        }
        if ((op->resume && info.has_config) || op->init_from) {
            float d = op->cfg.dropout; /* dropout may differ only by flag; keep the run's */
            mt_adapter_spec asked = op->cfg.adapters;
            op->cfg = info.cfg;
            op->cfg.dropout = d;
            if (op->init_from && op->init_seq_len && !mt_family_get(info.cfg.family)->position_table) {
                op->cfg.seq_len = op->init_seq_len; /* RoPE: any context; the weights do not change */
                if (op->cfg.max_pos < op->cfg.seq_len) op->cfg.max_pos = op->cfg.seq_len;
            }
            if (op->init_from && !mt_adapter_spec_active(&info.cfg.adapters)) {
                op->cfg.adapters = asked; /* the checkpoint is the base; what is trained on it is this run's */
                if (asked.quant == MT_QUANT_GPTQ && !info.gptq_bits)
                    return mt_errorf(err, "{quantize-base} gptq keeps the codes of a GPTQ directory as the frozen "
                                          "base, but {init-from} %s was not imported from one (import the GPTQ "
                                          "directory with `meshtrain import --format hf` and start from that)",
                                     from);
                op->cfg.adapters.gptq_bits = info.gptq_bits; /* the base's, for the accounting and the record */
                op->cfg.adapters.gptq_group_size = info.gptq_group_size;
                if (asked.quant != MT_QUANT_GPTQ) op->cfg.adapters.gptq_bits = op->cfg.adapters.gptq_group_size = 0;
            } else {
                if (asked.quant == MT_QUANT_GPTQ && info.cfg.adapters.quant == MT_QUANT_GPTQ) {
                    /* a run on a GPTQ base: its bits and group size are the base's, not flags */
                    asked.gptq_bits = info.cfg.adapters.gptq_bits;
                    asked.gptq_group_size = info.cfg.adapters.gptq_group_size;
                }
                if (mt_adapter_spec_active(&asked) && memcmp(&asked, &info.cfg.adapters, sizeof asked))
                    return mt_errorf(err, "%s %s was trained with other {peft} / {lora}-* / {freeze} settings: start "
                                          "from it without them (the checkpoint keeps its own), or fold its adapters in "
                                          "first (`meshtrain merge`)", op->init_from ? "{init-from}" : "{resume}: the run in", from);
            }
        }
    }
    if (op->cfg.adapters.quant == MT_QUANT_GPTQ && !op->cfg.adapters.gptq_bits)
        return mt_errorf(err, "{quantize-base} gptq keeps the codes of a GPTQ directory as the frozen base: it needs "
                              "{init-from} a checkpoint imported from one (`meshtrain import --format hf`)");
    /* MoE's loss terms and capacity are the run's, whatever model it starts from */
    op->cfg.moe_aux_coef = op->moe_aux_coef;
    op->cfg.moe_z_coef = op->moe_z_coef;
    op->cfg.moe_capacity = op->moe_capacity;
    if (mt_model_config_validate(&op->cfg, err) || mt_model_adapters_check(&op->cfg, err)) return -1;
    if (!op->train_path) return mt_errorf(err, "{train} FILE is required");
    if (mt_train_read_tokens(op->train_path, op->cfg.vocab_size, &tr->train_tokens, &tr->n_train, err)) return -1;
    if (mt_loader_init(&tr->train_ld, tr->train_tokens, tr->n_train, op->cfg.seq_len, op->batch, op->order, op->seed,
                       op->cfg.vocab_size, err))
        return -1;
    int window;
    if (mt_train_read_flags(op->train_path, &tr->train_flags, &window, err) ||
        (tr->train_flags && mt_loader_set_flags(&tr->train_ld, tr->train_flags, window, op->train_path, err)))
        return -1;
    if (op->val_path) {
        if (mt_train_read_tokens(op->val_path, op->cfg.vocab_size, &tr->val_tokens, &tr->n_val, err)) return -1;
        /* windows of one sequence: sample g is the g-th window whatever the micro-batch (layout-free eval) */
        if (mt_loader_init(&tr->val_ld, tr->val_tokens, tr->n_val, op->cfg.seq_len, 1, MT_ORDER_SEQUENTIAL, op->seed,
                           op->cfg.vocab_size, err))
            return -1;
        if (mt_train_read_flags(op->val_path, &tr->val_flags, &window, err) ||
            (tr->val_flags && mt_loader_set_flags(&tr->val_ld, tr->val_flags, window, op->val_path, err)))
            return -1;
        tr->has_val = 1;
    }
    if (op->device == MT_DEVICE_CUDA && (tr->train_ld.packed || (tr->has_val && tr->val_ld.packed)))
        return mt_errorf(err, "packed samples (a window of %s holds several documents) are not yet supported on "
                              "{device} cuda: use {device} cpu, or a shard tokenized without packing",
                         tr->train_ld.packed ? op->train_path : op->val_path);
    return 0;
}

int mt_trainer_init(mt_trainer *tr, const mt_train_opts *o, mt_comm *world, mt_error *err) {
    memset(tr, 0, sizeof *tr);
    tr->o = *o;
    mt_train_opts *op = &tr->o;
    tr->rank = mt_comm_rank(world);
    mt_trainer_accounting_alloc(tr, world);
    /* Checks of the options alone: identical on every rank, so every rank
     * returns the same error before any communication. */
    if (mt_train_opts_check(op, mt_comm_size(world), err)) return -1;
    if (op->precision == MT_FP16 &&
        mt_loss_scaler_init(&tr->scaler, op->loss_scale, op->loss_scale_window, 1.0f, 16777216.0f, err))
        return -1;
    tr->dp = op->mesh.dp;
    if (op->mesh.pp > 1 && op->batch == op->micro_batch * tr->dp && tr->rank == 0 && op->log_every > 0) {
        int mb = op->batch / (tr->dp * op->mesh.pp);
        mt_train_progress(tr, 0, "hint: {pp} %d runs one microbatch per step ({batch} %d = {micro-batch} %d x {dp} %d), so the "
                                 "stages take turns and nothing overlaps; %s", op->mesh.pp, op->batch, op->micro_batch, tr->dp,
               mb >= 1 ? "a smaller {micro-batch} gives the pipeline microbatches to overlap (e.g. one that makes "
                         ">= {pp} of them)"
                       : "a larger {batch} gives the pipeline microbatches to overlap");
    }

    /* A checkpoint to start from decides the model shape. */
    const char *from = op->init_from ? op->init_from : (op->resume ? op->ckpt_dir : NULL);
    if (agree(world, init_local(tr, from, err), err)) return -1;
    /* the model shape is known (and the same everywhere) from here on */
    if (op->device == MT_DEVICE_CUDA && op->cfg.family != MT_FAMILY_GPT2 && op->cfg.family != MT_FAMILY_LLAMA)
        return mt_errorf(err, "{family} %s is not yet supported on {device} cuda (it trains gpt2 and llama): use "
                              "{device} cpu for it",
                         mt_family_name(op->cfg.family));
    if (op->device == MT_DEVICE_CUDA && op->cfg.num_experts)
        return mt_errorf(err, "a mixture-of-experts model ({moe-experts} %d) is not yet supported on {device} cuda (the "
                              "routing and expert ops have no CUDA kernels): use {device} cpu for it",
                         op->cfg.num_experts);
    if (op->device == MT_DEVICE_CUDA && op->cfg.qk_norm)
        return mt_errorf(err, "{qk-norm} (OLMoE's q_norm and k_norm) is not yet supported on {device} cuda (its op has "
                              "no CUDA kernel): use {device} cpu for it");
    if (mt_model_tp_check(&op->cfg, op->mesh.tp, err)) return -1;
    if (op->mesh.ep > 1 && !op->cfg.num_experts)
        return mt_errorf(err, "{ep} %d spreads the experts of a mixture-of-experts model over ranks, but this model has "
                              "none ({moe-experts} 0): drop {ep} or give {moe-experts}", op->mesh.ep);
    if (op->mesh.ep > 1 && op->cfg.num_experts % op->mesh.ep)
        return mt_errorf(err, "{ep} %d does not divide the %d experts ({moe-experts}): each expert-parallel rank holds "
                              "experts / ep whole experts; choose an ep that divides %d", op->mesh.ep,
                         op->cfg.num_experts, op->cfg.num_experts);
    /* LoRA, IA3, frozen and NF4/int8-quantized tensors shard with their experts (nn/layout.c: a rank holds and
       quantizes only its experts' weights) */
    if (op->mesh.ep > 1 && op->cfg.adapters.quant == MT_QUANT_GPTQ)
        return mt_errorf(err, "{quantize-base} gptq is not yet supported with {ep} %d (GPTQ bases of mixture-of-experts "
                              "models are not written or checked yet); use {quantize-base} nf4 or int8 under {ep}",
                         op->mesh.ep);
    if (op->mesh.ep > 1 && op->cfg.adapters.int8_threshold > 0.0f)
        return mt_errorf(err, "{int8-threshold} %g is not supported with {ep} %d: LLM.int8() picks its outlier columns "
                              "over a GEMM's rows, and under {ep} an expert's GEMM holds the rows of every ep rank, so "
                              "the results would depend on {ep}; use {int8-threshold} 0 (int8 weights in fp32 GEMMs) "
                              "or train without {ep}", (double)op->cfg.adapters.int8_threshold, op->mesh.ep);
    if (op->sequence_parallel && ((size_t)op->micro_batch * (size_t)op->cfg.seq_len) % (size_t)op->mesh.tp)
        return mt_errorf(err, "{sequence-parallel} splits the %d x %d token rows of a microbatch over {tp} %d: "
                              "choose a {micro-batch} or {seq-len} whose product tp divides",
                         op->micro_batch, op->cfg.seq_len, op->mesh.tp);
    int cp = mt_mesh_cp_size(&op->mesh);
    if (cp > 1 && op->cfg.family != MT_FAMILY_GPT2 && op->cfg.family != MT_FAMILY_LLAMA)
        return mt_errorf(err, "{cp} %d: context parallelism trains gpt2 and llama, not {family} %s; use {cp} 1", cp,
                         mt_family_name(op->cfg.family));
    if (cp > 1 && op->cfg.seq_len % (2 * cp))
        return mt_errorf(err, "{cp} %d cuts each sequence into 2 x %d = %d chunks (rank i holds chunks i and %d-i), "
                              "which do not divide {seq-len} %d: choose a {seq-len} that is a multiple of %d, or "
                              "another {cp}",
                         cp, cp, 2 * cp, 2 * cp - 1, op->cfg.seq_len, 2 * cp);
    if (cp > 1 && op->cp_mode == MT_CP_ALLTOALL) { /* each cp rank takes 1/cp of this tp rank's heads */
        int nh = op->cfg.n_head / op->mesh.tp, kv = mt_model_kv_heads(&op->cfg), nkv = op->mesh.tp > kv ? 1 : kv / op->mesh.tp;
        if (nh % cp || nkv % cp)
            return mt_errorf(err, "{cp-mode} alltoall gives each of the {cp} %d ranks 1/%d of the heads, but the %d query "
                                  "heads and %d kv heads%s do not divide by %d: use {cp-mode} ring, or a {cp} dividing both",
                             cp, cp, nh, nkv, op->mesh.tp > 1 ? " of a tp rank" : "", cp);
    }
    if (cp > 1 && op->sequence_parallel && ((size_t)op->micro_batch * (size_t)(op->cfg.seq_len / cp)) % (size_t)op->mesh.tp)
        return mt_errorf(err, "{sequence-parallel} splits a cp rank's %d x %d token rows over {tp} %d: choose a "
                              "{micro-batch} or {seq-len} whose product tp divides",
                         op->micro_batch, op->cfg.seq_len / cp, op->mesh.tp);
    if (op->partition_activations && ((size_t)op->micro_batch * (size_t)(op->cfg.seq_len / cp)) % (size_t)op->mesh.tp)
        return mt_errorf(err, "{partition-activations} splits the %d x %d token rows of a microbatch%s over {tp} %d: "
                              "choose a {micro-batch} or {seq-len} whose product tp divides",
                         op->micro_batch, op->cfg.seq_len / cp, cp > 1 ? " (a cp rank's)" : "", op->mesh.tp);
    if (agree(world, mt_train_check_footprint(op, world, err), err)) return -1;
    if (mt_mesh_init(&tr->mesh, world, &op->mesh, err)) return -1;
    tr->mesh_ok = 1;
    mt_straggler_init(&tr->straggler, world, &tr->mesh.shape);
    tr->dp_rank = tr->mesh.coord.dp; /* the samples' index; the DP group (dp x cp) reduces the gradients */
    tr->cp.size = cp;
    tr->cp.rank = tr->mesh.coord.cp;
    tr->cp.comm = cp > 1 ? mt_mesh_comm(&tr->mesh, MT_AXIS_CP) : NULL;
    tr->cp.mode = op->cp_mode;
    tr->tp.comm = mt_mesh_comm(&tr->mesh, MT_AXIS_TP);
    tr->tp.size = op->mesh.tp;
    tr->tp.rank = mt_comm_rank(tr->tp.comm);
    tr->tp.sequence_parallel = op->sequence_parallel;

    tr->pp = op->mesh.pp;
    tr->pp_rank = mt_comm_rank(mt_mesh_comm(&tr->mesh, MT_AXIS_PP));
    if (op->mesh.ep > 1) { /* the ep group: the replica ranks of the expert-data-parallel shard groups (mesh.h) */
        char name[MT_COMM_NAME_LEN];
        mt_mesh_coord c = tr->mesh.coord;
        int G = mt_mesh_shard_size(&tr->mesh.shape);
        snprintf(name, sizeof name, "ep%d(pp%d,tp%d)", c.dp % G, c.pp, c.tp);
        if (mt_comm_split(world, mt_mesh_group_id(&tr->mesh.shape, MT_AXIS_REPLICA, tr->mesh.rank),
                          mt_mesh_group_index(&tr->mesh.shape, MT_AXIS_REPLICA, tr->mesh.rank), name, &tr->ep_comm,
                          err))
            return -1;
    }
    tr->micro_steps = op->batch / (op->micro_batch * tr->dp);
    if (op->cfg.num_experts) {
        size_t n = (size_t)op->cfg.n_layer * (size_t)op->cfg.num_experts;
        tr->moe_load = mt_xcalloc(n, sizeof(int64_t), "expert loads");
        size_t ep = op->mesh.ep > 1 ? (size_t)op->mesh.ep : 0;
        if (ep) tr->moe_ep_rows = mt_xcalloc(ep * ep, sizeof(int64_t), "expert-parallel rows");
        tr->moe_load_json = mt_xmalloc(64 + (n + ep * ep) * 22 + ((size_t)op->cfg.n_layer + ep) * 4,
                                       "the expert loads' metrics field");
        tr->moe_load_json[0] = 0;
    }
    mt_model_part part = {0};
    unsigned char *own_layer = mt_xcalloc((size_t)op->cfg.n_layer, 1, "layer ownership");
    int rc = mt_pipeline_plan(tr, &part, own_layer, err);
    part.tp = &tr->tp;
    part.ep = tr->ep_comm;
    /* {ep} with ZeRO 1-3 in fp32: the dense parameters are sharded over every dp rank, evenly (zero.h) */
    if (tr->ep_comm && op->zero >= 1 && op->precision == MT_FP32 && !op->zeropp_hpz && !op->zeropp_qwz &&
        !op->zeropp_qgz)
        part.dense_align = mt_comm_size(mt_mesh_comm(&tr->mesh, MT_AXIS_DP));
    part.cp = &tr->cp;
    part.precision = op->precision;
    part.partition_acts = op->partition_activations;
    if (!rc && mt_backend_open_local(&tr->be, op->device, op->gemm, mt_comm_local_rank(world), op->gpus_per_node, err))
        rc = -1;
    /* bf16 mixed precision on a GPU: attention on 16-bit operands (device/backend.h) */
    if (!rc) tr->be.attention_mixed = op->precision == MT_BF16;
    /* a GPU's used memory before any buffer of ours: the accounting's baseline (accounting.c) */
    if (!rc && mt_backend_device_used(&tr->be, &tr->device_used_open)) tr->device_used_open = 0;
    /* collectives of device buffers are staged through pinned host memory, ordered on the device's stream */
    if (!rc && tr->be.comm_device) mt_comm_set_device(world, tr->be.comm_device, (mt_comm_stream *)tr->be.stream);
    if (!rc && op->comm_nccl) {
        /* NCCL refuses two ranks on one GPU: forced, it needs a GPU per rank of the node */
        int gpus = op->gpus_per_node > 0 ? op->gpus_per_node : tr->be.device_count, ranks = mt_comm_local_size(world);
        if (ranks > gpus)
            rc = mt_errorf(err, "{comm} nccl needs a GPU per rank, but %d ranks share this node's %d GPU%s (NCCL refuses "
                                "two ranks on one GPU): run at most %d rank%s per node, or use {comm} mpi (host-staged)",
                           ranks, gpus, gpus == 1 ? "" : "s", gpus, gpus == 1 ? "" : "s");
        else if (mt_comm_use_nccl(world, err))
            rc = -1;
    }
    mt_backend_attach_mem(&tr->be, &tr->mem);
    part.be = &tr->be;
    part.defer_params = 1; /* ZeRO's init materialises one unit at a time: no full fp32 model at start-up */
    /* context parallelism: a sample's rows here are its 2 of the 2 cp chunks */
    if (!rc) mt_model_create_part(&tr->model, &op->cfg, op->micro_batch, op->cfg.seq_len / cp, op->seed, &tr->mem, &part);
    free(own_layer);
    if (rc) return -1;
    if (init_tp_pieces(tr, err)) return -1;
    if (mt_zero_init(&tr->zero, &tr->model, &tr->mesh, op->zero, (size_t)((double)op->bucket_mb * 1048576.0),
                     op->grad_reduce, &tr->mem, err)) return -1;
    if (op->zeropp_hpz && mt_zero_enable_hpz(&tr->zero, &tr->model, op->zeropp_hpz, err)) return -1;
    if (op->zeropp_qwz && mt_zero_enable_qwz(&tr->zero, err)) return -1;
    int qgz = op->zeropp_qgz ? mt_zero_enable_qgz(&tr->zero, err) : 0;
    if (qgz < 0) return -1;
    if (qgz == 1) /* nodes of unequal rank counts: the plain reduce-scatter */
        mt_train_progress(tr, 0, "note: {zeropp-qgz} needs the same number of ZeRO shard-group ranks on every node, in "
                                 "node order; using the plain reduce-scatter");
    tr->zero.no_overlap = op->no_overlap;
    if (mt_pipeline_init(tr, err)) return -1;
    if (agree(world, init_optimizer(tr, err), err)) return -1;
    if (op->profile) {
        mt_profile_init(&tr->prof);
        tr->model.prof = &tr->prof;
        if (cp > 1 && op->cp_mode == MT_CP_RING) { /* the ring measured (ring_attention.h, mt_ring_probe) */
            mt_ring_probe *p = &tr->ring_probe;
            /* split off the world: a split of the cp group would count its barrier there */
            if (mt_comm_split(world, mt_mesh_group_id(&tr->mesh.shape, MT_AXIS_CP, tr->mesh.rank), tr->cp.rank,
                              "cp_probe", &p->comm, err))
                return -1;
            p->prof = &tr->prof;
            p->wait_s = mt_xcalloc((size_t)cp, sizeof(double), "the ring probe's step times");
            p->in_flight_s = mt_xcalloc((size_t)cp, sizeof(double), "the ring probe's step times");
            tr->cp.probe = p;
        }
    }
    if (op->trace_path) {
        /* every action of every step, the optimizer and the step itself */
        size_t per_step = (size_t)tr->sched.count[tr->pp_rank] + 8;
        size_t cap = per_step * (size_t)(op->steps > 0 ? op->steps : 1) + 64;
        if (cap > ((size_t)1 << 22)) cap = (size_t)1 << 22;
        if (mt_trace_init(&tr->trace_buf, tr->rank, cap, err)) return -1;
        tr->trace = &tr->trace_buf;
        mt_trace_name_thread(tr->trace, 0, "main");
        mt_trace_sync_origin(tr->trace, world);
    }
    if (from && agree(world, mt_train_ckpt_load(tr, from, op->resume, err), err)) return -1;
    if (op->resume && tr->step >= op->steps)
        return mt_errorf(err, "the checkpoint in %s is at step %lld and {steps} is %lld: nothing left to train (to train "
                              "longer, raise {steps}; under {lr-schedule} cosine also pass {allow-schedule-change})",
                         op->ckpt_dir, (long long)tr->step, (long long)op->steps);
    rc = 0;
    const char *bad = from ? owned_nonfinite_tensor(tr) : NULL;
    if (bad)
        rc = mt_errorf(err, "checkpoint %s holds inf/NaN values in tensor %s: it cannot be trained from (it was not "
                            "written by meshtrain train, which never saves non-finite state)", from, bad);
    if (agree(world, rc, err)) return -1;
    if (op->metrics_path && tr->rank == 0) {
        tr->metrics = fopen(op->metrics_path, op->resume ? "a" : "w");
        if (!tr->metrics) rc = mt_errorf(err, "cannot open {metrics} file '%s' for writing", op->metrics_path);
    }
    if (!rc && op->log_path && tr->rank == 0) {
        tr->log_file = fopen(op->log_path, op->resume ? "a" : "w");
        if (!tr->log_file)
            rc = mt_errorf(err, "cannot open {log-file} '%s' for writing: %s", op->log_path, strerror(errno));
    }
    /* one process started directly on a terminal: Open MPI gives its ranks a pseudo-terminal even when
     * mpirun's own output goes to a file, so under a launcher the lines stay plain */
    tr->tty = tr->rank == 0 && mt_comm_size(world) == 1 && isatty(STDOUT_FILENO) && !mt_comm_process_launched();
    return agree(world, rc, err);
}

/* The replicas of a shared unit (a tied embedding) on the first and last
 * pipeline stage hold partial gradients: summed over that group, both take
 * the same step. */
static void reduce_shared_replicas(mt_trainer *tr) {
    if (!tr->embed_group) return;
    mt_zero_allreduce_owned_grad(&tr->zero, mt_pipeline_shared_unit(tr), tr->embed_group);
}

/* What the optimizer updates of unit u: ZeRO's owned range (the fp32
 * master, or NULL where it was handed to the optimizer's state), the 16-bit
 * gradient and parameters under mixed precision, and the gradient widening
 * and parameter rounding a chunk at a time. */
typedef struct {
    mt_trainer *tr;
    int u; /* a state unit (mt_zero_n_state) */
} owned_unit;

static const float *owned_grad(void *ctx, size_t off, size_t n) {
    owned_unit *a = ctx;
    return mt_zero_owned_grad(&a->tr->zero, a->u, off, n);
}

static void owned_round(void *ctx, size_t off, size_t n, const float *master) {
    owned_unit *a = ctx;
    mt_zero_round_owned_params(&a->tr->zero, a->u, off, n, master);
}

static void shard_sum(void *ctx, double *buf, size_t n) {
    mt_comm_allreduce_ctl((mt_comm *)ctx, buf, buf, n, MT_COMM_F64, MT_COMM_SUM);
}

typedef struct {
    mt_trainer *tr;
    owned_unit unit; /* the unit of the last target (the optimizer steps units one at a time) */
} step_targets;

static void owned_target(void *ctx, int k, mt_opt_target *tg) {
    step_targets *a = ctx;
    mt_zero *z = &a->tr->zero;
    size_t lo, hi;
    float *g;
    a->unit = (owned_unit){a->tr, k};
    memset(tg, 0, sizeof *tg);
    mt_zero_owned(z, &a->tr->model, k, &lo, &hi, &tg->p, &g); /* k: a state unit */
    tg->dt = mt_zero_owned_16(z, k, &tg->g16, &tg->p16);
    tg->grad = owned_grad;
    tg->round = owned_round;
    tg->ctx = &a->unit;
    tg->be = &a->tr->be;
    /* whole-tensor statistics are summed over the ranks sharing a unit
     * (ZeRO >= 1 shards it; the replicas of hybrid sharding hold equal shards) */
    mt_comm *group = mt_zero_state_group(z, k);
    if (group) {
        tg->sum = shard_sum;
        tg->sum_ctx = group;
    }
}

/* The optimizer step on the owned range of every unit this rank holds. */
static void optimizer_update(mt_trainer *tr, float lr, int64_t t, float coef) {
    step_targets a = {tr, {tr, 0}};
    mt_error e = {{0}};
    if (mt_opt_states_step(&tr->optim, owned_target, &a, lr, t, coef, &e))
        mt_die("the optimizer step failed: %s", e.msg);
}

/* Ends a phase of the step that began at *t0 (ns): its time goes to the
 * {profile} category and, when name is given, to a {trace} span; the next
 * phase begins now. Both are no-ops when off. */
static void phase_done(mt_trainer *tr, int64_t *t0, mt_prof_cat cat, const char *name, const char *trace_cat) {
    int64_t t1 = mt_trace_now_ns();
    mt_prof_add(tr->model.prof, cat, 1e-9 * (double)(t1 - *t0));
    if (name) mt_trace_span(tr->trace, name, trace_cat, 0, *t0, t1);
    *t0 = t1;
}

/* The MoE blocks' statistics of this step over the data-parallel and
 * pipeline ranks (tp ranks route alike; each counts the same). */
static void moe_step_stats(mt_trainer *tr) {
    const mt_moe_stats *st = &tr->model.moe;
    double v[4] = {st->aux, st->z, (double)st->dropped, (double)st->routed}, mx = (double)st->max_load;
    mt_comm_allreduce_ctl(mt_mesh_comm(&tr->mesh, MT_AXIS_DP), v, v, 4, MT_COMM_F64, MT_COMM_SUM);
    mt_comm_allreduce_ctl(mt_mesh_comm(&tr->mesh, MT_AXIS_PP), v, v, 4, MT_COMM_F64, MT_COMM_SUM);
    mt_comm_allreduce_ctl(mt_mesh_comm(&tr->mesh, MT_AXIS_DP), &mx, &mx, 1, MT_COMM_F64, MT_COMM_MAX);
    mt_comm_allreduce_ctl(mt_mesh_comm(&tr->mesh, MT_AXIS_PP), &mx, &mx, 1, MT_COMM_F64, MT_COMM_MAX);
    double blocks = (double)tr->o.cfg.n_layer * tr->micro_steps * tr->dp; /* (block, microbatch) pairs */
    tr->moe_aux = v[0] / blocks;
    tr->moe_z = v[1] / blocks;
    tr->moe_dropped = (int64_t)v[2];
    tr->moe_routed = (int64_t)v[3];
    tr->moe_max_load = (int64_t)mx;
    /* rows per expert and layer, summed over the microbatches and data-parallel ranks (each pipeline stage
       counts its own layers) */
    int L = tr->o.cfg.n_layer, E = tr->o.cfg.num_experts;
    size_t n = (size_t)L * (size_t)E;
    mt_comm_allreduce_ctl(mt_mesh_comm(&tr->mesh, MT_AXIS_DP), tr->model.moe_load, tr->moe_load, n, MT_COMM_I64,
                          MT_COMM_SUM);
    mt_comm_allreduce_ctl(mt_mesh_comm(&tr->mesh, MT_AXIS_PP), tr->moe_load, tr->moe_load, n, MT_COMM_I64, MT_COMM_SUM);
    char *p = tr->moe_load_json;
    p += sprintf(p, ",\"moe_load\":[");
    for (int l = 0; l < L; l++) {
        *p++ = l ? ',' : '[';
        if (l) *p++ = '[';
        for (int e = 0; e < E; e++) p += sprintf(p, e ? ",%lld" : "%lld", (long long)tr->moe_load[(size_t)l * E + e]);
        *p++ = ']';
    }
    p += sprintf(p, "]");
    if (!tr->ep_comm) return;
    /* {ep}: the rows each ep rank sent each ep rank (row: the sender), summed over the expert-data-parallel
       groups, microbatches and layers -- what the all-to-alls' byte counts follow from */
    int P = mt_comm_size(tr->ep_comm), me = mt_comm_rank(tr->ep_comm);
    memset(tr->moe_ep_rows, 0, (size_t)P * (size_t)P * sizeof(int64_t));
    for (int j = 0; j < P; j++) tr->moe_ep_rows[(size_t)me * P + j] = tr->model.moe_ep_rows[j];
    mt_comm_allreduce_ctl(mt_mesh_comm(&tr->mesh, MT_AXIS_DP), tr->moe_ep_rows, tr->moe_ep_rows, (size_t)P * P,
                          MT_COMM_I64, MT_COMM_SUM);
    mt_comm_allreduce_ctl(mt_mesh_comm(&tr->mesh, MT_AXIS_PP), tr->moe_ep_rows, tr->moe_ep_rows, (size_t)P * P,
                          MT_COMM_I64, MT_COMM_SUM);
    p += sprintf(p, ",\"moe_ep_rows\":[");
    for (int i = 0; i < P; i++) {
        p += sprintf(p, i ? ",[" : "[");
        for (int j = 0; j < P; j++) p += sprintf(p, j ? ",%lld" : "%lld", (long long)tr->moe_ep_rows[(size_t)i * P + j]);
        p += sprintf(p, "]");
    }
    sprintf(p, "]");
}

double mt_trainer_step(mt_trainer *tr) {
    mt_model *m = &tr->model;
    mt_zero *z = &tr->zero;
    mt_train_opts *o = &tr->o;
    /* The loss is the mean over the counted targets of the whole global
     * batch (all B*T of them without a loss mask): every rank counts them
     * in the loader, whatever its share, and the gradients are scaled by
     * that global count, so the data-parallel reduction is a sum and any
     * layout or accumulation equals one process. A batch without a counted
     * target contributes nothing. */
    double count = (double)mt_loader_count(&tr->train_ld, (uint64_t)tr->step * (uint64_t)o->batch, o->batch);
    /* fp16: the loss (so every gradient) is multiplied by the loss scale */
    const int fp16 = o->precision == MT_FP16;
    const float scale = fp16 ? tr->scaler.st.scale : 1.0f;
    float dscale = count > 0 ? (float)(1.0 / count) * scale : 0.0f;
    int64_t t_step = mt_trace_now_ns();
    if (o->test_slow_ms > 0 && tr->rank == o->test_slow_rank) { /* test aid: a straggler, outside communication */
        struct timespec ts = {o->test_slow_ms / 1000, (long)(o->test_slow_ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) && errno == EINTR) {}
    }
    mt_zero_begin_step(z, m);
    memset(&m->moe, 0, sizeof m->moe);
    if (m->moe_load) memset(m->moe_load, 0, (size_t)o->cfg.n_layer * (size_t)o->cfg.num_experts * sizeof(int64_t));
    if (m->moe_ep_rows) memset(m->moe_ep_rows, 0, (size_t)mt_comm_size(m->ep) * sizeof(int64_t));
    /* a block's loss (MoE's auxiliary losses) counts as its mean over the global batch's microbatches */
    tr->block_loss_weight = (float)(count / ((double)tr->micro_steps * tr->dp));
    uint64_t g0 = (uint64_t)tr->step * (uint64_t)o->batch;
    double exposed0 = z->exposed_s;
    double loss_sum = mt_pipeline_step(tr, g0, dscale);
    double exposed1 = z->exposed_s;
    int64_t t = mt_trace_now_ns();
    mt_zero_finish_grads(z, m);
    reduce_shared_replicas(tr);
    /* Waits for gradient reductions (inside backward and here) are "wait";
     * the rest of finishing them is "allreduce". */
    mt_prof_add(m->prof, MT_PROF_WAIT, z->exposed_s - exposed0);
    mt_prof_add(m->prof, MT_PROF_ALLREDUCE, -(z->exposed_s - exposed1));
    phase_done(tr, &t, MT_PROF_ALLREDUCE, "grad_sync", "collective");
    if ((o->test_overflow_step == tr->step + 1 || o->test_nonfinite_step == tr->step + 1) &&
        tr->rank == mt_comm_size(tr->world) - 1) {
        for (int k = 0; k < mt_zero_n_state(z); k++) /* this rank's first gradient element becomes inf */
            if (mt_zero_state_len(z, k)) {
                mt_zero_poison_grad(z, k);
                break;
            }
    }
    double sumsq = mt_zero_grad_sumsq(z, m);
    phase_done(tr, &t, MT_PROF_OPTIMIZER, NULL, NULL);
    double sums[2] = {loss_sum, sumsq};
    mt_comm_allreduce_ctl(mt_mesh_comm(&tr->mesh, MT_AXIS_DP), &sums[0], &sums[0], 1, MT_COMM_F64, MT_COMM_SUM);
    mt_comm_allreduce_ctl(mt_mesh_comm(&tr->mesh, MT_AXIS_PP), sums, sums, 2, MT_COMM_F64, MT_COMM_SUM);
    /* every tp rank computed the whole loss; the norm's slices add up
     * (replicated tensors are counted on tp rank 0 only) */
    if (tr->tp.size > 1) mt_comm_allreduce_ctl(tr->tp.comm, &sums[1], &sums[1], 1, MT_COMM_F64, MT_COMM_SUM);
    loss_sum = sums[0];
    if (o->cfg.num_experts) moe_step_stats(tr);
    phase_done(tr, &t, MT_PROF_ALLREDUCE, NULL, NULL);
    if (o->dump_grads && tr->step == 0 && tr->rank == 0) mt_train_dump_grads(tr, o->dump_grads);
    double norm = sqrt(sums[1]) / scale;
    t = mt_trace_now_ns();
    /* fp16: an inf/NaN gradient anywhere (the norm shows it) skips the
     * update on every rank and halves the scale; Adam's step count t counts
     * applied updates only. */
    int skip = fp16 && mt_loss_scaler_decide(&tr->scaler, tr->world, !isfinite(sums[1]), tr->step + 1,
                                             tr->rank == 0 && o->log_every > 0 ? stdout : NULL) == MT_LOSS_SCALE_SKIP;
    /* fp32/bf16: a non-finite loss or gradient norm leaves the parameters
     * and the optimizer state as they are (the run then stops, or skips the
     * step). The sums are all-reduced, so every rank decides the same
     * without another collective. */
    tr->grad_nonfinite = !fp16 && !(isfinite(sums[0]) && isfinite(sums[1]));
    tr->params_nonfinite = 0;
    if (tr->grad_nonfinite) {
        skip = 1;
        tr->nonfinite_skipped++;
    }
    if (!skip) {
        int64_t applied = tr->step + 1 - (fp16 ? tr->scaler.st.skipped : 0) - tr->nonfinite_skipped;
        optimizer_update(tr, mt_lr_at(&o->lr, tr->step), applied, mt_clip_coef(norm, o->grad_clip) / scale);
        mt_model_params_changed(m);
        tr->params_nonfinite = owned_params_nonfinite(tr);
    }
    phase_done(tr, &t, MT_PROF_OPTIMIZER, "optimizer", "compute");
    mt_zero_after_step(z, m);
    phase_done(tr, &t, MT_PROF_ALLGATHER, "param_gather", "collective");
    mt_trace_span_args(tr->trace, "step", "step", 1, t_step, t, "step", tr->step + 1, NULL, 0);
    tr->step++;
    tr->last_norm = norm;
    tr->last_loss = count > 0 ? loss_sum / count : 0.0;
    return tr->last_loss;
}

/* The eval batches are dealt round-robin over the dp ranks and the loss sums
 * all-reduced. Under ZeRO-3 every rank of the shard group takes part in each
 * forward's gathers (and under expert parallelism in each forward's
 * all-to-alls), so a rank without a batch in the last round runs a forward
 * whose loss it discards. */
/* The validation loss is the mean token loss of the first eval_batches x
 * eval_batch sequences of the validation shard (eval_batch 0: {batch}), in
 * order -- what `meshtrain eval {batch} E {batches} N` computes. It does not
 * depend on the layout: the sequences are cut into chunks of the
 * micro-batch, dealt round-robin over the dp ranks, and the chunk sums
 * added in double (orders differ only in double rounding). */
double mt_trainer_eval(mt_trainer *tr) {
    int b = tr->o.micro_batch, dp = tr->dp;
    int E = tr->o.eval_batch > 0 ? tr->o.eval_batch : tr->o.batch;
    int nb = tr->o.eval_batches > 0 ? tr->o.eval_batches : 1;
    int64_t chunks = (int64_t)nb * E / b; /* E % b == 0 (mt_trainer_init) */
    double sum = 0.0;
    int64_t rounds = (chunks + dp - 1) / dp;
    for (int64_t i = 0; i < rounds; i++) {
        int64_t k = i * dp + tr->dp_rank;
        /* ZeRO-3: every rank joins every gather; {ep}: every rank every token exchange */
        if (k >= chunks && tr->o.zero != 3 && !tr->model.ep) break;
        int64_t kk = k < chunks ? k : 0;
        double s = mt_pipeline_eval_batch(tr, (uint64_t)kk * (uint64_t)b);
        if (k < chunks) sum += s;
    }
    mt_comm_allreduce_ctl(mt_mesh_comm(&tr->mesh, MT_AXIS_DP), &sum, &sum, 1, MT_COMM_F64, MT_COMM_SUM);
    mt_comm_allreduce_ctl(mt_mesh_comm(&tr->mesh, MT_AXIS_PP), &sum, &sum, 1, MT_COMM_F64, MT_COMM_SUM);
    double count = (double)mt_loader_count(&tr->val_ld, 0, nb * E); /* the val loader's samples are single windows */
    return count > 0 ? sum / count : 0.0;
}

/* The step boundary: every rank learns whether any rank found non-finite
 * parameters, failed to write {metrics}, got SIGINT/SIGTERM, or is still
 * writing a {ckpt-async} checkpoint, and every
 * rank's step and wait times of this step (the straggler report): one
 * all-reduce (train/straggler.h); a signal may reach one rank only. */
/* Seconds the ring probe has waited on its group (mt_ring_probe; 0 without one). */
static double probe_wait_s(const mt_trainer *tr) {
    if (!tr->ring_probe.comm) return 0.0;
    const mt_comm_stats *st = mt_comm_get_stats(tr->ring_probe.comm);
    double s = 0.0;
    for (int k = 0; k < MT_COMM_NKIND; k++) s += st->k[k].wait_s;
    return s;
}

static void agree_step_boundary(mt_trainer *tr, int64_t flags[MT_STRAGGLER_FLAGS], double step_ms, double wait_ms) {
    flags[0] = tr->params_nonfinite;
    flags[1] = tr->metrics_failed;
    flags[2] = mt_stop_signal_pending() != 0;
    flags[3] = mt_trainer_save_async_busy(tr);
    mt_straggler_boundary(&tr->straggler, tr->world, flags, step_ms, wait_ms);
}

/* Rank 0's metrics failure, if any, made everyone's: collective, every rank
 * calls it (only rank 0 knows whether a write failed). */
static int metrics_failure(mt_trainer *tr, mt_error *err) {
    int failed = tr->rank == 0 && tr->metrics_failed;
    if (failed) *err = tr->metrics_err;
    return agree(tr->world, failed ? -1 : 0, err);
}

/* A checkpoint, and a line saying where and how long it took. */
static int save_with_line(mt_trainer *tr, mt_error *err) {
    double t0 = mt_clock_s();
    if (mt_trainer_save(tr, err)) return -1;
    if (tr->o.log_every > 0) mt_train_progress(tr, 0, "step %5lld | checkpoint saved to %s in %.2f s", (long long)tr->step,
                                      tr->o.ckpt_dir, mt_clock_s() - t0);
    return 0;
}

/* Collective: the {ckpt-async} save in flight, if any, completed (its
 * writers waited for) and committed, and a line saying so. */
static int async_commit_with_line(mt_trainer *tr, mt_error *err) {
    double started;
    int64_t step = mt_trainer_save_async_step(tr, &started);
    if (step < 0) return 0;
    if (mt_trainer_save_async_finish(tr, 1, err)) return -1;
    if (tr->o.log_every > 0)
        mt_train_progress(tr, 0, "step %5lld | checkpoint of step %lld saved to %s (%.2f s after its snapshot)",
                          (long long)tr->step, (long long)step, tr->o.ckpt_dir, mt_clock_s() - started);
    return 0;
}

/* {ckpt-async}: a snapshot now, written in the background. */
static int save_async_with_line(mt_trainer *tr, mt_error *err) {
    if (async_commit_with_line(tr, err)) return -1; /* the one in flight first */
    double t0 = mt_clock_s();
    if (mt_trainer_save_async(tr, err)) return -1;
    if (tr->o.log_every > 0)
        mt_train_progress(tr, 0, "step %5lld | checkpoint snapshot taken in %.2f s, writing to %s in the background",
                          (long long)tr->step, mt_clock_s() - t0, tr->o.ckpt_dir);
    return 0;
}

int mt_trainer_run(mt_trainer *tr, mt_error *err) {
    mt_train_opts *o = &tr->o;
    double flops_tok = mt_model_flops_per_token(&tr->model, o->cfg.seq_len);
    double tokens = (double)o->batch * o->cfg.seq_len;
    int64_t saved = o->resume ? tr->step : -1;
    char nb[40];
    /* left installed when the run returns: a signal must not cut a save, the outputs or the exit short */
    if (mt_stop_signal_install(err)) return -1;
    int rc = 0;
    tr->run_t0 = mt_clock_s();
    int64_t first_step = tr->step;
    while (tr->step < o->steps) {
        double t0 = mt_clock_s(), wait0 = mt_comm_wait_total_s(tr->world) - probe_wait_s(tr);
        float lr = mt_lr_at(&o->lr, tr->step);
        double loss = mt_trainer_step(tr);
        /* the ring probe's waits are measurement, not the run's */
        double ms = (mt_clock_s() - t0) * 1e3;
        double wait_ms = (mt_comm_wait_total_s(tr->world) - probe_wait_s(tr) - wait0) * 1e3;
        tr->step_s += ms * 1e-3;
        if (tr->model.prof) {
            mt_profile_end_step(&tr->prof, (long)tr->step, ms * 1e-3);
            if (tr->metrics && !tr->metrics_failed && mt_profile_write_json(&tr->prof, tr->metrics, 0, &tr->metrics_err))
                tr->metrics_failed = 1;
        }
        tr->steps_run++;
        double tps = tokens / (ms * 1e-3), gflops = flops_tok * tps * 1e-9;
        /* ETA from this run's mean step time so far (evaluations and saves included) */
        double elapsed = mt_clock_s() - tr->run_t0;
        double eta = elapsed / (double)(tr->step - first_step) * (double)(o->steps - tr->step);
        char el[24], et[24];
        if (tr->grad_nonfinite && !o->on_nonfinite_skip) {
            rc = mt_errorf(err, "step %lld: the loss (%g) or the gradient norm (%g) is not finite; stopped before the "
                                "update, no checkpoint written from it (lower {lr}, keep {grad-clip}, or pass "
                                "{on-nonfinite} skip to leave such steps out)",
                           (long long)tr->step, loss, tr->last_norm);
            break;
        }
        if (!isfinite(loss) && !tr->grad_nonfinite) { /* fp16: the loss scaler cannot skip a non-finite loss */
            rc = mt_errorf(err, "loss became %g at step %lld; lower {lr} or enable {grad-clip}", loss, (long long)tr->step);
            break;
        }
        /* the boundary comes before this step's lines, which carry every rank's times: a failed write of
         * them is agreed at the next boundary (or after the last step) */
        int64_t flags[MT_STRAGGLER_FLAGS];
        agree_step_boundary(tr, flags, ms, wait_ms);
        if (tr->grad_nonfinite && o->log_every > 0)
            mt_train_progress(tr, 0, "step %lld: loss %g, gradient norm %g: not finite, update skipped ({on-nonfinite} skip; "
                            "%lld steps skipped so far)",
                     (long long)tr->step, loss, tr->last_norm, (long long)tr->nonfinite_skipped);
        else if (o->log_every > 0 && (tr->step % o->log_every == 0 || tr->step == o->steps))
            mt_train_progress(tr, tr->step < o->steps ? 1 : 2,
                     "step %5lld/%lld | loss %.6f | lr %.3e | norm %.4f | %.1f ms | %.0f tok/s | %.1f GFLOP/s | "
                     "elapsed %s | eta %s",
                     (long long)tr->step, (long long)o->steps, loss, (double)lr, tr->last_norm, ms, tps, gflops,
                     mt_duration_text(el, sizeof el, elapsed), mt_duration_text(et, sizeof et, eta));
        char slow[512];
        if (tr->rank == 0 && mt_straggler_check(&tr->straggler, tr->step, slow, sizeof slow) && o->log_every > 0)
            mt_train_progress(tr, 0, "%s", slow);
        if (tr->metrics) {
            char extra[320] = "";
            if (o->precision == MT_FP16) /* the scale after this step's decision, and the skips so far */
                snprintf(extra, sizeof extra, ",\"loss_scale\":%.9g,\"skipped_steps\":%lld", (double)tr->scaler.st.scale,
                         (long long)tr->scaler.st.skipped);
            else if (o->on_nonfinite_skip)
                snprintf(extra, sizeof extra, ",\"skipped_steps\":%lld", (long long)tr->nonfinite_skipped);
            if (o->cfg.num_experts) { /* MoE: the auxiliary losses (mean per block) and the capacity's drops */
                size_t k = strlen(extra);
                snprintf(extra + k, sizeof extra - k, ",\"moe_aux\":%.9g,\"moe_z\":%.9g,\"moe_dropped\":%lld,"
                         "\"moe_max_load\":%lld", tr->moe_aux, tr->moe_z, (long long)tr->moe_dropped,
                         (long long)tr->moe_max_load);
            }
            if (o->peak_gflops > 0) { /* model FLOPs per second of all ranks over all ranks' peak */
                size_t k = strlen(extra);
                snprintf(extra + k, sizeof extra - k, ",\"mfu\":%.6f",
                         gflops / ((double)o->peak_gflops * (double)mt_comm_size(tr->mesh.world)));
            }
            mt_train_metrics_line(tr,
                         "{\"step\":%lld,\"loss\":%s,\"lr\":%.9g,\"grad_norm\":%.17g,\"ms\":%.3f,\"tokens_per_s\":%.1f,"
                         "\"gflops\":%.3f,\"elapsed_s\":%.3f,\"eta_s\":%.3f%s%s%s}\n",
                         (long long)tr->step, mt_json_number_text(nb, sizeof nb, loss), (double)lr,
                         isfinite(tr->last_norm) ? tr->last_norm : -1.0, ms, tps, gflops, elapsed, eta, extra,
                         tr->moe_load_json ? tr->moe_load_json : "", mt_straggler_metrics(&tr->straggler));
        }
        if (flags[0]) {
            const char *bad = owned_nonfinite_tensor(tr);
            rc = mt_errorf(err, "step %lld: parameters are not finite after the update (%lld rank%s%s%s); stopped, no "
                                "checkpoint written from them (lower {lr} or {weight-decay})",
                           (long long)tr->step, (long long)flags[0], flags[0] > 1 ? "s" : "", bad ? ", e.g. " : "",
                           bad ? bad : "");
            rc = agree(tr->world, bad ? -1 : 0, err) ? -1 : rc; /* name the tensor of the lowest rank that has one */
            break;
        }
        if (flags[1]) {
            rc = metrics_failure(tr, err);
            break;
        }
        if (tr->has_val && o->eval_every > 0 && (tr->step % o->eval_every == 0 || tr->step == o->steps)) {
            double vl = mt_trainer_eval(tr);
            if (!isfinite(vl)) {
                rc = mt_errorf(err, "step %lld: the validation loss is %g (not finite); stopped, no checkpoint "
                                    "written from this state", (long long)tr->step, vl);
                break;
            }
            mt_train_progress(tr, 0, "step %5lld | val_loss %.6f", (long long)tr->step, vl);
            mt_train_metrics_line(tr, "{\"step\":%lld,\"val_loss\":%.17g}\n", (long long)tr->step, vl);
        }
        /* {ckpt-async}: every rank's writer is done (no rank busy): the manifest now */
        if (!flags[3] && (rc = async_commit_with_line(tr, err))) break;
        if (flags[2]) {
            tr->stopped_by_signal = 1;
            break;
        }
        if (o->ckpt_dir && o->ckpt_every > 0 && tr->step % o->ckpt_every == 0) {
            if ((rc = o->ckpt_async ? save_async_with_line(tr, err) : save_with_line(tr, err))) break;
            saved = tr->step;
        }
    }
    /* a save still in flight: committed when the run goes on to its end (the final save follows, after it),
     * else only waited for (its files stay uncommitted; the previous checkpoint stands) */
    if (!rc && async_commit_with_line(tr, err)) rc = -1;
    mt_trainer_save_async_finish(tr, 0, NULL);
    if (tr->line_open) mt_train_progress(tr, 0, "%s", ""); /* end the terminal's step line */
    if (rc) return -1;
    if (metrics_failure(tr, err)) return -1; /* the last step's lines, a val_loss line */
    if (tr->model.prof && tr->rank == 0 && tr->prof.steps > 0) {
        printf("profile of rank 0, mean per step (%s):\n", tr->prof.steps > 1 ? "all steps" : "one step");
        mt_profile_print_summary(&tr->prof, stdout);
    }
    /* Always leave a checkpoint of the final state (also of step 0, which
     * is how an initial model is written for export). Every non-finite state
     * returned above, so what is saved here is finite. */
    if (o->ckpt_dir && saved != tr->step && save_with_line(tr, err)) return -1;
    if (metrics_failure(tr, err)) return -1; /* the {log-file} line of the save */
    rc = 0;
    if (tr->metrics) {
        if (fclose(tr->metrics) != 0)
            rc = mt_errorf(err, "closing {metrics} file '%s' failed: %s (is the disk full?)", o->metrics_path,
                           strerror(errno));
        tr->metrics = NULL;
    }
    if (tr->log_file) {
        if (fclose(tr->log_file) != 0 && !rc)
            rc = mt_errorf(err, "closing {log-file} '%s' failed: %s (is the disk full?)", o->log_path, strerror(errno));
        tr->log_file = NULL;
    }
    if (agree(tr->world, rc, err)) return -1;
    if (tr->stopped_by_signal && tr->rank == 0) {
        if (o->ckpt_dir)
            mt_train_progress(tr, 0, "stopped by a signal after step %lld: checkpoint saved in %s (continue with {resume})",
                   (long long)tr->step, o->ckpt_dir);
        else
            mt_train_progress(tr, 0, "stopped by a signal after step %lld (no {ckpt-dir}: nothing saved)", (long long)tr->step);
    }
    fflush(stdout);
    return 0;
}

int mt_trainer_write_trace(mt_trainer *tr, mt_error *err) {
    if (!tr->trace) return 0;
    static const char *const compute[] = {"compute"};
    mt_trace_usage use;
    memset(&use, 0, sizeof use);
    int rc = mt_trace_usage_of(tr->trace, compute, 1, &use, err);
    int n = mt_comm_size(tr->world);
    double mine[2] = {use.idle_fraction, use.window_s};
    double *all = mt_xcalloc((size_t)n * 2, sizeof(double), "trace usage");
    mt_comm_allgather(tr->world, mine, all, sizeof mine);
    if (tr->rank == 0 && !rc) {
        printf("idle fraction per rank (time in no forward/backward/optimizer span over the traced %.3f s):", all[1]);
        for (int r = 0; r < n; r++) printf(" %d:%.3f", r, all[2 * r]);
        printf("\n");
    }
    free(all);
    if (mt_trace_merge_write(tr->trace, tr->world, tr->o.trace_path, err)) return -1;
    if (tr->rank == 0) printf("wrote trace %s (open in https://ui.perfetto.dev)\n", tr->o.trace_path);
    return rc;
}

void mt_trainer_free(mt_trainer *tr) {
    mt_trainer_save_async_free(tr); /* before the buffers it reads go */
    if (tr->trace) mt_trace_free(tr->trace);
    if (tr->metrics) fclose(tr->metrics);
    free(tr->metrics_line);
    free(tr->moe_load);
    free(tr->moe_load_json);
    free(tr->moe_ep_rows);
    if (tr->log_file) fclose(tr->log_file);
    mt_opt_states_free(&tr->optim);
    mt_pipeline_free(tr);
    if (tr->model.params) {
        mt_zero_free(&tr->zero, &tr->model);
        mt_model_free(&tr->model);
    }
    mt_tp_free_pieces(&tr->tp);
    mt_comm_free(tr->ep_comm);
    mt_comm_free(tr->ring_probe.comm);
    free(tr->ring_probe.wait_s);
    free(tr->ring_probe.in_flight_s);
    if (tr->mesh_ok) mt_mesh_free(&tr->mesh);
    mt_straggler_free(&tr->straggler);
    mt_trainer_accounting_free(tr);
    mt_loader_free(&tr->train_ld);
    mt_loader_free(&tr->val_ld);
    free(tr->train_tokens);
    free(tr->val_tokens);
    free(tr->train_flags);
    free(tr->val_flags);
    /* the staging slots go with the device (the hooks are the backend's) */
    if (tr->world && tr->be.comm_device) mt_comm_set_device(tr->world, NULL, NULL);
    mt_backend_close(&tr->be); /* after every buffer of its memory */
}
