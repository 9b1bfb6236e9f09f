/* The pipeline executor: runs this rank's action list of the schedule
 * (parallel/pipeline_schedule.h) over the model part it holds, with the ZeRO
 * hooks around each unit. A single process is the 1-stage pipeline
 * (F0 B0 F1 B1 ...), so every run goes through here.
 *
 * Buffers (no allocation per step). Microbatch mb of local chunk c uses
 * activation slot mb % slots: the schedule keeps at most `slots` chunk-
 * microbatches in flight and runs each chunk's microbatches in order, so the
 * in-flight ones of a chunk never share a slot.
 *   - activation received for chunk c: the output buffer of block blocks[lo-1] of the slot (the
 *     model allocates it as the stage input); after BACKWARD it is dead, so
 *     the input gradient is sent from the same buffer;
 *   - activation sent by chunk c: the output buffer of block blocks[hi-1] of the slot;
 *   - the last virtual stage runs the output unit's forward and backward back
 *     to back inside FORWARD (the loss ends the graph; the logits buffer is
 *     then shared by all slots) and parks dL/d(final block output) in the
 *     slot's parking buffer (mt_model_park), dead after the output unit's
 *     backward, until BACKWARD.
 * A send's buffer is reused only after its request completed (waited for
 * just before the reuse, and at the end of the step).
 *
 * Shared tensors (a head tied to the embedding): with pp > 1 the last stage
 * holds a replica of the unit the output unit shares tensors with (the
 * model marks it held). Its gradient is all-reduced with the first stage's
 * over the "shared" group (first and last stage) after the data-parallel
 * reduction, both replicas take the same optimizer step, and only the first
 * stage counts it in the gradient norm. */
#include "train/pipeline_step.h"
#include "core/clock.h"
#include "ops/ops.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


/* MPI guarantees tags up to at least 32767. */
#define PP_TAG_LIMIT 32767

/* Blocks per virtual stage: the {pp-layers} list, or an even split (the
 * first L mod S stages one block more). */
static int layer_split(const mt_train_opts *o, int S, int *count, mt_error *err) {
    int L = o->cfg.n_layer;
    if (!o->pp_layers) {
        if (L < S)
            return mt_errorf(err, "%d blocks cannot fill %d virtual pipeline stages ({pp} x {pp-chunks}); "
                                  "use fewer stages or more {layers}", L, S);
        for (int s = 0; s < S; s++) count[s] = L / S + (s < L % S);
        return 0;
    }
    const char *p = o->pp_layers;
    int n = 0, sum = 0;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > L)
            return mt_errorf(err, "{pp-layers} '%s': expected %d comma-separated block counts >= 1", o->pp_layers, S);
        if (n < S) count[n] = (int)v;
        n++;
        sum += (int)v;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return mt_errorf(err, "{pp-layers} '%s': expected %d comma-separated block counts", o->pp_layers, S);
    }
    if (n != S)
        return mt_errorf(err, "{pp-layers} '%s' gives %d stages, the pipeline has %d virtual stages ({pp} x {pp-chunks})",
                         o->pp_layers, n, S);
    if (sum != L) return mt_errorf(err, "{pp-layers} '%s' sums to %d blocks, the model has %d", o->pp_layers, sum, L);
    return 0;
}

int mt_pipeline_plan(mt_trainer *tr, mt_model_part *part, unsigned char *own_layer, mt_error *err) {
    const mt_train_opts *o = &tr->o;
    int p = tr->pp, v = o->pp_chunks > 0 ? o->pp_chunks : 1, m = tr->micro_steps;
    if (v > 1 && o->pp_schedule != MT_PP_INTERLEAVED)
        return mt_errorf(err, "{pp-chunks} %d needs {pp-schedule} interleaved", v);
    if (v > 1 && p == 1) return mt_errorf(err, "{pp-schedule} interleaved needs {pp} >= 2 (got {pp} 1)");
    mt_pp_kind kind = o->pp_schedule;
    if (mt_pp_schedule_build(kind, p, m, v, &tr->sched, err)) {
        char msg[MT_ERROR_LEN];
        snprintf(msg, sizeof msg, "%s", err ? err->msg : "");
        return mt_errorf(err, "{batch} %d = %d microbatches of {micro-batch} %d x {dp} %d per step: %s", o->batch, m,
                         o->micro_batch, tr->dp, msg);
    }
    if (tr->sched.max_tag > PP_TAG_LIMIT)
        return mt_errorf(err, "%d microbatches x %d stages need message tags up to %d, more than MPI guarantees (%d); "
                              "use fewer microbatches per step", m, p * v, tr->sched.max_tag, PP_TAG_LIMIT);
    int S = p * v, L = o->cfg.n_layer;
    int *count = mt_xcalloc((size_t)S, sizeof(int), "layer split");
    if (layer_split(o, S, count, err)) {
        free(count);
        return -1;
    }
    tr->chunk_lo = mt_xcalloc((size_t)v, sizeof(int), "pipeline chunks");
    tr->chunk_hi = mt_xcalloc((size_t)v, sizeof(int), "pipeline chunks");
    memset(own_layer, 0, (size_t)L);
    tr->layer_rank = mt_xcalloc((size_t)L, sizeof(int), "pipeline layer map");
    int first = 0;
    for (int s = 0; s < S; s++) {
        for (int l = first; l < first + count[s]; l++) tr->layer_rank[l] = s % p;
        if (s % p == tr->pp_rank) {
            int c = s / p;
            tr->chunk_lo[c] = first;
            tr->chunk_hi[c] = first + count[s];
            for (int l = first; l < first + count[s]; l++) own_layer[l] = 1;
        }
        first += count[s];
    }
    free(count);
    part->own_layer = own_layer;
    part->own_input = tr->pp_rank == 0;
    part->own_output = tr->pp_rank == p - 1;
    int w = mt_pp_warmup_forwards(&tr->sched, tr->pp_rank);
    part->act_slots = w + 1 < m * v ? w + 1 : m * v;
    part->recompute = o->recompute;
    part->compress = o->compress_acts;
    return 0;
}

int mt_pipeline_init(mt_trainer *tr, mt_error *err) {
    int v = tr->sched.chunks, slots = tr->model.n_slots;
    tr->act_req = mt_xcalloc((size_t)slots * (size_t)v, sizeof(mt_comm_req), "pipeline requests");
    tr->grad_req = mt_xcalloc((size_t)slots * (size_t)v, sizeof(mt_comm_req), "pipeline requests");
    int shared = mt_pipeline_shared_unit(tr);
    if (tr->pp == 1 || shared < 0) return 0;
    int ends = tr->pp_rank == 0 || tr->pp_rank == tr->pp - 1;
    int color = ends ? mt_mesh_group_id(&tr->mesh.shape, MT_AXIS_PP, tr->mesh.rank) : -1;
    if (mt_comm_split(tr->world, color, tr->pp_rank, "shared tensors(first,last stage)", &tr->embed_group, err)) return -1;
    if (tr->pp_rank == tr->pp - 1) tr->zero.in_norm[shared] = 0; /* the first stage counts it */
    return 0;
}

void mt_pipeline_free(mt_trainer *tr) {
    mt_comm_free(tr->embed_group);
    tr->embed_group = NULL;
    if (tr->sched.count) mt_pp_schedule_free(&tr->sched);
    free(tr->chunk_lo);
    free(tr->chunk_hi);
    free(tr->act_req);
    free(tr->grad_req);
    free(tr->layer_rank);
}

int mt_pipeline_shared_unit(const mt_trainer *tr) {
    const mt_layout *l = &tr->model.layout;
    return l->units[l->n_units - 1].shared_unit;
}

int mt_pipeline_unit_rank(const mt_trainer *tr, int u) {
    int L = tr->o.cfg.n_layer;
    if (u == 0) return 0;
    if (u == L + 1) return tr->pp - 1;
    return tr->layer_rank[u - 1];
}

static int is_first_stage(const mt_trainer *tr, int c) { return mt_pp_is_first_stage(&tr->sched, tr->pp_rank, c); }
static int is_last_stage(const mt_trainer *tr, int c) { return mt_pp_is_last_stage(&tr->sched, tr->pp_rank, c); }

/* The microbatch's tokens, targets and sample ids (every stage needs the
 * sample ids: dropout masks are keyed by them; every stage needs the
 * positions under context parallelism: dropout and RoPE are keyed by them). */
static void fill(mt_trainer *tr, mt_loader *ld, uint64_t first) {
    mt_acts *a = &tr->model.acts;
    mt_backend_sync(&tr->be); /* the previous microbatch's kernels may still read them */
    if (tr->cp.size > 1) { /* context parallelism: this rank's two chunks of each sample, with their positions */
        a->packed = mt_loader_fill_cp(ld, first, a->B, tr->cp.size, tr->cp.rank, a->h_tokens, a->h_targets,
                                      a->h_sample_ids, a->h_doc_start, a->h_pos);
    } else {
        mt_loader_fill(ld, first, a->B, a->h_tokens, a->h_targets, a->h_sample_ids);
        /* packed samples: documents, positions */
        a->packed = mt_loader_fill_docs(ld, first, a->B, a->h_doc_start, a->h_pos);
    }
    mt_model_upload_batch(&tr->model, a);
}

/* A stage boundary's message: the residual-stream rows this rank holds. */
static size_t act_bytes(const mt_trainer *tr) { return mt_model_resid_floats(&tr->model) * sizeof(float); }

/* A unit's gradient is complete here and goes to the data-parallel
 * reduction: with sequence parallelism its LayerNorm and bias gradients are
 * first summed over tp (once per step where the gradient accumulates in
 * place, every microbatch under ZeRO-2/3 and mixed precision, whose buffers
 * are per microbatch). */
static void grads_done(mt_trainer *tr, int u, int last_mb) {
    if (last_mb || tr->o.zero >= 2 || tr->o.precision != MT_FP32) mt_model_tp_reduce_grads(&tr->model, u);
    mt_zero_post_backward(&tr->zero, &tr->model, u, last_mb);
}

/* Forward of local chunk c on the current slot; on the last virtual stage
 * also the loss and the head's backward. Returns the loss sum (0 elsewhere). */
static double forward_chunk(mt_trainer *tr, int c, const mt_fwd_ctx *fc, float dscale, int backward, int last_mb) {
    mt_model *m = &tr->model;
    mt_zero *z = &tr->zero;
    int H = m->layout.n_units - 1;
    if (is_first_stage(tr, c)) {
        mt_zero_begin_microbatch(z, m, backward);
        mt_zero_pre_forward(z, m, 0);
        mt_unit_forward(m, 0, fc);
    }
    double aux0 = m->moe.loss_sum;
    for (int l = tr->chunk_lo[c]; l < tr->chunk_hi[c]; l++) {
        mt_zero_pre_forward(z, m, 1 + l);
        mt_unit_forward(m, 1 + l, fc);
    }
    /* the losses the blocks add (MoE's auxiliary losses) count where the blocks run: the loss sums are
       all-reduced over the pipeline */
    double loss = m->moe.loss_sum - aux0;
    if (!is_last_stage(tr, c)) return loss;
    mt_zero_pre_forward(z, m, H);
    loss += mt_model_loss_forward(m, fc, dscale);
    if (!backward) return loss;
    double t0 = mt_clock_s();
    mt_zero_pre_backward(z, m, H);
    mt_unit_backward(m, H, fc);
    grads_done(tr, H, last_mb);
    int shared = mt_pipeline_shared_unit(tr);
    if (tr->pp > 1 && shared >= 0) grads_done(tr, shared, last_mb); /* the shared replica is complete too */
    op_copy_bytes(m->be, mt_model_park(m), m->gs.dresid, act_bytes(tr));
    tr->backward_s += mt_clock_s() - t0;
    return loss;
}

static void backward_chunk(mt_trainer *tr, int c, const mt_fwd_ctx *fc, int last_mb) {
    mt_model *m = &tr->model;
    mt_zero *z = &tr->zero;
    double t0 = mt_clock_s();
    if (is_last_stage(tr, c)) op_copy_bytes(m->be, m->gs.dresid, mt_model_park(m), act_bytes(tr));
    for (int l = tr->chunk_hi[c] - 1; l >= tr->chunk_lo[c]; l--) {
        mt_zero_pre_backward(z, m, 1 + l); /* ZeRO-3: the params the recompute needs too */
        mt_unit_recompute(m, 1 + l, fc);
        mt_unit_backward(m, 1 + l, fc);
        grads_done(tr, 1 + l, last_mb);
    }
    if (is_first_stage(tr, c)) {
        mt_zero_pre_backward(z, m, 0);
        mt_unit_backward(m, 0, fc);
        grads_done(tr, 0, last_mb);
        mt_zero_end_microbatch(z, m);
    }
    tr->backward_s += mt_clock_s() - t0;
}

double mt_pipeline_step(mt_trainer *tr, uint64_t g0, float dscale) {
    mt_model *m = &tr->model;
    mt_comm *pc = mt_mesh_comm(&tr->mesh, MT_AXIS_PP);
    int b = tr->o.micro_batch, dp = tr->dp, mbs = tr->micro_steps, v = tr->sched.chunks;
    mt_fwd_ctx fc = {1, (uint32_t)tr->step, dscale, tr->block_loss_weight};
    double loss = 0.0;
    const mt_pp_action *acts = tr->sched.actions[tr->pp_rank];
    for (int i = 0; i < tr->sched.count[tr->pp_rank]; i++) {
        const mt_pp_action *a = &acts[i];
        int slot = a->microbatch % m->n_slots, c = a->chunk, k = slot * v + c, last = a->microbatch == mbs - 1;
        /* rank r's samples of microbatch j: k*B + j*(b*dp) + r*b + i */
        uint64_t first = g0 + (uint64_t)a->microbatch * (uint64_t)(b * dp) + (uint64_t)tr->dp_rank * (uint64_t)b;
        mt_model_use_slot(m, slot);
        int64_t t0 = mt_trace_now_ns();
        switch (a->op) {
        case MT_PP_RECV_ACT:
            mt_comm_wait(&tr->grad_req[k]); /* the buffer's last gradient send */
            mt_comm_recv(pc, mt_model_block_out(m, tr->chunk_lo[c] - 1), act_bytes(tr), a->peer, a->tag);
            break;
        case MT_PP_FORWARD:
            mt_comm_wait(&tr->act_req[k]); /* the output buffer's last send */
            fill(tr, &tr->train_ld, first);
            loss += forward_chunk(tr, c, &fc, dscale, 1, last);
            break;
        case MT_PP_SEND_ACT:
            mt_comm_isend(pc, mt_model_block_out(m, tr->chunk_hi[c] - 1), act_bytes(tr), a->peer, a->tag, &tr->act_req[k]);
            break;
        case MT_PP_RECV_GRAD:
            mt_comm_recv(pc, m->gs.dresid, act_bytes(tr), a->peer, a->tag);
            break;
        case MT_PP_BACKWARD:
            /* full recompute rewrites the chunk's output: its send must be done */
            if (m->recompute == MT_RECOMPUTE_FULL) mt_comm_wait(&tr->act_req[k]);
            fill(tr, &tr->train_ld, first);
            backward_chunk(tr, c, &fc, last);
            break;
        case MT_PP_SEND_GRAD: {
            float *buf = mt_model_block_out(m, tr->chunk_lo[c] - 1); /* the received input: dead now */
            mt_comm_wait(&tr->grad_req[k]);
            op_copy_bytes(m->be, buf, m->gs.dresid, act_bytes(tr));
            mt_comm_isend(pc, buf, act_bytes(tr), a->peer, a->tag, &tr->grad_req[k]);
            break;
        }
        default:
            mt_die("pipeline: unknown action %d", (int)a->op);
        }
        static const char *const names[MT_PP_NOPS] = {"forward", "backward", "send_act", "recv_act", "send_grad", "recv_grad"};
        int compute = a->op == MT_PP_FORWARD || a->op == MT_PP_BACKWARD;
        if (!compute) mt_prof_add(m->prof, MT_PROF_SENDRECV, 1e-9 * (double)(mt_trace_now_ns() - t0));
        mt_trace_span_args(tr->trace, names[a->op], compute ? "compute" : "p2p", 0, t0, mt_trace_now_ns(), "mb",
                           a->microbatch, "chunk", c);
    }
    int n = m->n_slots * v;
    mt_comm_waitall(tr->act_req, n);
    mt_comm_waitall(tr->grad_req, n);
    return loss;
}

/* Forward only, one batch through the virtual stages in order (no overlap:
 * evaluation is a small part of a run). Returns the loss sum on the rank
 * holding the last stage, 0 elsewhere. */
double mt_pipeline_eval_batch(mt_trainer *tr, uint64_t first) {
    mt_model *m = &tr->model;
    mt_comm *pc = mt_mesh_comm(&tr->mesh, MT_AXIS_PP);
    int p = tr->pp, S = p * tr->sched.chunks;
    mt_fwd_ctx fc = {0, (uint32_t)tr->step, 0.0f, 0.0f};
    double loss = 0.0;
    mt_model_use_slot(m, 0);
    fill(tr, &tr->val_ld, first);
    for (int s = 0; s < S; s++) {
        if (s % p != tr->pp_rank) continue;
        int c = s / p;
        if (s > 0) mt_comm_recv(pc, mt_model_block_out(m, tr->chunk_lo[c] - 1), act_bytes(tr), (s - 1) % p, s - 1);
        loss += forward_chunk(tr, c, &fc, 0.0f, 0, 0);
        if (s < S - 1) mt_comm_send(pc, mt_model_block_out(m, tr->chunk_hi[c] - 1), act_bytes(tr), (s + 1) % p, s);
    }
    return loss;
}
