#include "train/train_io.h"
#include "ckpt/checkpoint.h"
#include "data/shard.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mt_train_read_tokens(const char *path, uint32_t **tokens, size_t *n, mt_error *err) {
    uint32_t mx;
    return mt_shard_read(path, tokens, n, &mx, err);
}

int mt_train_ckpt_peek(const char *dir, mt_ckpt_info *info, mt_error *err) {
    memset(info, 0, sizeof *info);
    mt_ckpt *ck = mt_ckpt_open_ex(dir, MT_CKPT_NO_VERIFY, err);
    if (!ck) return -1;
    const mt_json *st = mt_ckpt_state(ck);
    const mt_json *cfg = mt_json_get(st, "config");
    if (!cfg) {
        mt_ckpt_close(ck);
        return mt_errorf(err, "checkpoint '%s' has no model config in its state", dir);
    }
    if (mt_model_config_read_json(cfg, &info->cfg, err)) {
        char msg[MT_ERROR_LEN];
        snprintf(msg, sizeof msg, "%s", err ? err->msg : "");
        mt_ckpt_close(ck);
        return mt_errorf(err, "checkpoint '%s': %s", dir, msg);
    }
    info->has_config = 1;
    info->step = mt_ckpt_step(ck);
    mt_ckpt_close(ck);
    return 0;
}

static int read_named(mt_ckpt *ck, const char *name, float *dst, size_t numel, mt_error *err) {
    size_t have = 0;
    if (!mt_ckpt_has(ck, name, &have)) return mt_errorf(err, "checkpoint has no tensor '%s'", name);
    if (have != numel)
        return mt_errorf(err, "checkpoint tensor '%s' has %zu elements, the model expects %zu", name, have, numel);
    return mt_ckpt_read(ck, name, 0, numel, dst, err);
}

/* Reads every full tensor "<prefix><name>" of a unit into dst (the full
 * unit: gnumel floats at the tensors' full offsets); rows past what a
 * checkpoint holds (vocabulary padding of this layout's tp) are zero. */
static int read_unit(mt_ckpt *ck, const mt_unit_layout *u, const char *prefix, float *dst, mt_error *err) {
    char name[128];
    for (int i = 0; i < u->n_tensors; i++) {
        const mt_tensor *t = &u->t[i];
        size_t held = (size_t)t->ckpt_rows * (size_t)t->gshape[1];
        snprintf(name, sizeof name, "%s%s", prefix, t->name);
        if (read_named(ck, name, dst + t->goffset, held, err)) return -1;
        memset(dst + t->goffset + held, 0, (t->gnumel - held) * sizeof(float));
    }
    return 0;
}

/* The full unit read from the checkpoint, as this tp rank's slices (the
 * buffer itself without tensor parallelism). */
static int read_unit_local(mt_ckpt *ck, const mt_layout *l, int u, const char *prefix, float *full, float *local,
                           float **out, mt_error *err) {
    if (read_unit(ck, &l->units[u], prefix, full, err)) return -1;
    if (l->tp == 1) {
        *out = full;
        return 0;
    }
    mt_unit_from_full(l, u, full, local);
    *out = local;
    return 0;
}

/* Every rank reads the full tensors and keeps what it owns (its ZeRO shard). */
int mt_train_ckpt_load(mt_trainer *tr, const char *dir, int resume, mt_error *err) {
    mt_ckpt *ck = mt_ckpt_open(dir, err);
    if (!ck) return -1;
    const mt_layout *l = &tr->model.layout;
    size_t mx = 0;
    for (int u = 0; u < l->n_units; u++) mx = l->units[u].gnumel > mx ? l->units[u].gnumel : mx;
    float *full = mt_xcalloc(mx, sizeof(float), "checkpoint load buffer");
    float *local = l->tp > 1 ? mt_xcalloc(mx, sizeof(float), "checkpoint load buffer") : NULL;
    char prefix[64];
    int rc = 0;
    int ns = mt_opt_state_count(tr->o.opt.kind);
    for (int u = 0; u < l->n_units && !rc; u++) {
        if (!mt_zero_state_len(&tr->zero, u)) continue; /* another pipeline stage's unit */
        float *mine;
        rc = read_unit_local(ck, l, u, "model/", full, local, &mine, err);
        if (!rc) mt_zero_set_full_params(&tr->zero, &tr->model, u, mine);
        if (!rc && mt_zero_master_released(&tr->zero, u)) /* the fp32 master lives in the offload file */
            rc = mt_trainer_set_opt_state(tr, u, tr->offload_master, mine, err);
        for (int s = 0; s < ns && resume && !rc; s++) {
            snprintf(prefix, sizeof prefix, "optim/%s/", mt_opt_state_name(tr->o.opt.kind, s));
            rc = read_unit_local(ck, l, u, prefix, full, local, &mine, err);
            if (!rc) rc = mt_trainer_set_opt_state(tr, u, s, mine, err);
        }
    }
    free(full);
    free(local);
    if (!rc && resume) {
        const mt_json *st = mt_ckpt_state(ck);
        const char *opt = NULL;
        if (mt_json_get_string(st, "optimizer", &opt, err) == 0 && strcmp(opt, mt_opt_kind_name(tr->o.opt.kind)))
            rc = mt_errorf(err, "checkpoint was trained with --optimizer %s, this run uses %s", opt,
                           mt_opt_kind_name(tr->o.opt.kind));
        int64_t v;
        if (!rc && mt_json_get_int64(st, "batch", &v, NULL) == 0 && v != tr->o.batch)
            rc = mt_errorf(err, "checkpoint was trained with --batch %lld, this run uses %d; resuming needs the same batch",
                           (long long)v, tr->o.batch);
        if (!rc && mt_json_get_int64(st, "seed", &v, NULL) == 0 && (uint64_t)v != tr->o.seed)
            rc = mt_errorf(err, "checkpoint was trained with --seed %lld, this run uses %llu; resuming needs the same seed",
                           (long long)v, (unsigned long long)tr->o.seed);
        const char *ord = NULL;
        const char *mine = mt_data_order_name(tr->o.order);
        if (!rc && mt_json_get_string(st, "data_order", &ord, NULL) == 0 && strcmp(ord, mine))
            rc = mt_errorf(err, "checkpoint was trained with --data-order %s, this run uses %s", ord, mine);
        if (!rc && mt_json_get_int64(st, "nonfinite_skipped", &v, NULL) == 0) tr->nonfinite_skipped = v;
        const mt_json *ls = mt_json_get(st, "loss_scaler");
        if (!rc && tr->o.precision == MT_FP16 && ls) rc = mt_loss_scaler_read_json(ls, &tr->scaler, err);
        tr->step = mt_ckpt_step(ck);
    }
    mt_model_params_changed(&tr->model);
    mt_ckpt_close(ck);
    return rc;
}

int mt_model_load_checkpoint(mt_model *m, const char *dir, mt_error *err) {
    mt_ckpt *ck = mt_ckpt_open(dir, err);
    if (!ck) return -1;
    const mt_layout *l = &m->layout;
    int rc = 0;
    for (int u = 0; u < l->n_units && !rc; u++) rc = read_unit(ck, &l->units[u], "model/", m->params[u], err);
    mt_ckpt_close(ck);
    return rc;
}

/* Tensor parallelism: tp rank 0 (of the first data-parallel replica)
 * assembles the full unit from every tp rank's slices (`loc`: this rank's,
 * ne floats); `full` receives it there, `tmp` holds a received slice. */
static void tp_assemble(mt_trainer *tr, const mt_layout *tpl, int u, const float *loc, float *full, float *tmp) {
    const mt_layout *l = &tr->model.layout;
    size_t ne = l->units[u].numel;
    if (tr->tp.rank != 0) {
        mt_comm_send(tr->tp.comm, loc, ne * sizeof(float), 0, 0);
        return;
    }
    mt_unit_to_full(l, u, loc, full);
    for (int r = 1; r < tr->tp.size; r++) {
        mt_comm_recv(tr->tp.comm, tmp, ne * sizeof(float), r, 0);
        mt_unit_to_full(&tpl[r], u, tmp, full);
    }
}

/* Collective: each unit's full tensors are gathered (ZeRO shards) on the
 * pipeline stage that holds it, put together from the tensor-parallel
 * slices on its tp rank 0, sent to rank 0 by that stage's first
 * data-parallel rank, and rank 0 writes the checkpoint; all ranks return its
 * outcome. */
int mt_trainer_save(mt_trainer *tr, mt_error *err) {
    const mt_layout *l = &tr->model.layout;
    int ns = mt_opt_state_count(tr->o.opt.kind);
    int root = tr->rank == 0, tp = tr->tp.size;
    int n = 0, cap = 0;
    size_t gmx = 0;
    for (int u = 0; u < l->n_units; u++) {
        cap += l->units[u].n_tensors * (1 + ns);
        gmx = l->units[u].gnumel > gmx ? l->units[u].gnumel : gmx;
    }
    mt_layout *tpl = NULL; /* every tp rank's layout, to place its slices */
    if (tp > 1 && tr->tp.rank == 0) {
        tpl = mt_xcalloc((size_t)tp, sizeof *tpl, "tensor-parallel layouts");
        for (int r = 0; r < tp; r++) mt_model_layout_build(&tr->o.cfg, tp, r, &tpl[r]);
    }
    size_t mx = mt_zero_max_padded(&tr->zero);
    float *tmp = mt_xcalloc(mx, sizeof(float), "checkpoint gather buffer");
    float *scratch = mt_xcalloc(gmx > mx ? gmx : mx, sizeof(float), "checkpoint gather buffer");
    float *shard = mt_xcalloc(mx, sizeof(float), "checkpoint state shard");
    float *loc = tp > 1 ? mt_xcalloc(mx, sizeof(float), "checkpoint slice buffer") : NULL;
    float *store = root ? mt_xcalloc(l->gtotal_params * (size_t)(1 + ns) + (size_t)(1 + ns) * l->units[0].gnumel,
                                     sizeof(float), "checkpoint tensors")
                        : NULL;
    mt_ckpt_tensor *ts = mt_xcalloc((size_t)cap, sizeof *ts, "checkpoint tensor list");
    char (*names)[128] = mt_xcalloc((size_t)cap, 128, "checkpoint tensor names");
    size_t used = 0;
    for (int u = 0; u < l->n_units; u++) {
        size_t gne = l->units[u].gnumel;
        float *base[3];
        int holder = mt_pipeline_unit_rank(tr, u);
        mt_comm *pc = mt_mesh_comm(&tr->mesh, MT_AXIS_PP);
        for (int s = -1; s < ns; s++) {
            float *dst = root ? store + used : scratch;
            if (root) used += gne;
            if (tr->pp_rank == holder) {
                float *mine = tp > 1 ? loc : dst;
                if (s < 0 && mt_zero_master_released(&tr->zero, u)) /* the fp32 master from the offload file */
                    mt_zero_get_full_state(&tr->zero, u, mt_trainer_opt_shard(tr, u, tr->offload_master, shard), mine,
                                           tmp);
                else if (s < 0) mt_zero_get_full_params(&tr->zero, &tr->model, u, mine, tmp);
                else mt_zero_get_full_state(&tr->zero, u, mt_trainer_opt_shard(tr, u, s, shard), mine, tmp);
                if (tp > 1 && tr->dp_rank == 0) tp_assemble(tr, tpl, u, loc, dst, tmp);
            }
            if (holder != 0 && tr->dp_rank == 0 && tr->tp.rank == 0) { /* world rank 0 is (dp 0, pp 0, tp 0) */
                if (tr->pp_rank == holder) mt_comm_send(pc, dst, gne * sizeof(float), 0, 0);
                else if (root) mt_comm_recv(pc, dst, gne * sizeof(float), holder, 0);
            }
            base[s + 1] = dst;
        }
        for (int i = 0; i < l->units[u].n_tensors; i++) {
            const mt_tensor *t = &l->units[u].t[i];
            for (int s = -1; s < ns; s++) {
                if (s < 0) snprintf(names[n], 128, "model/%s", t->name);
                else snprintf(names[n], 128, "optim/%s/%s", mt_opt_state_name(tr->o.opt.kind, s), t->name);
                ts[n] = (mt_ckpt_tensor){names[n], base[s + 1] + t->goffset,
                                         (size_t)t->ckpt_rows * (size_t)t->gshape[1], t->ndim,
                                         {t->ckpt_rows, t->gshape[1], 1, 1}};
                n++;
            }
        }
    }
    int rc = 0;
    if (root) {
        mt_json_writer w;
        mt_jw_init(&w);
        mt_jw_begin_object(&w);
        mt_jw_key(&w, "config");
        mt_model_config_write_json(&w, &tr->o.cfg);
        mt_jw_key(&w, "step"); mt_jw_int(&w, tr->step);
        mt_jw_key(&w, "seed"); mt_jw_int(&w, (int64_t)tr->o.seed);
        mt_jw_key(&w, "optimizer"); mt_jw_string(&w, mt_opt_kind_name(tr->o.opt.kind));
        mt_jw_key(&w, "batch"); mt_jw_int(&w, tr->o.batch);
        mt_jw_key(&w, "data_order"); mt_jw_string(&w, mt_data_order_name(tr->o.order));
        mt_jw_key(&w, "samples_consumed"); mt_jw_int(&w, tr->step * tr->o.batch);
        if (tr->nonfinite_skipped) { /* --on-nonfinite skip: Adam's step count is the applied steps */
            mt_jw_key(&w, "nonfinite_skipped");
            mt_jw_int(&w, tr->nonfinite_skipped);
        }
        if (tr->o.precision == MT_FP16) {
            mt_jw_key(&w, "loss_scaler");
            mt_loss_scaler_write_json(&w, &tr->scaler);
        }
        mt_jw_end_object(&w);
        rc = mt_ckpt_save(tr->o.ckpt_dir, tr->step, w.buf, ts, n, err);
        mt_jw_free(&w);
    }
    free(ts);
    free(names);
    free(store);
    free(tmp);
    free(scratch);
    free(shard);
    free(loc);
    if (tpl) {
        for (int r = 0; r < tp; r++) mt_layout_free(&tpl[r]);
        free(tpl);
    }
    /* rank 0's outcome is everyone's */
    int64_t v = rc;
    char msg[MT_ERROR_LEN];
    memset(msg, 0, sizeof msg);
    mt_comm *w = tr->mesh.world;
    mt_comm_allreduce_ctl(w, &v, &v, 1, MT_COMM_I64, MT_COMM_MIN);
    if (!v) return 0;
    if (root && err) snprintf(msg, sizeof msg, "%s", err->msg);
    mt_comm_broadcast(w, msg, sizeof msg, 0);
    return mt_errorf(err, "%s", msg);
}

void mt_train_dump_grads(mt_trainer *tr, const char *path) {
    FILE *f = fopen(path, "wb");
    if (!f) mt_die("cannot open --dump-grads file '%s'", path);
    for (int u = 0; u < tr->model.layout.n_units; u++)
        if (fwrite(tr->model.grads[u], sizeof(float), tr->model.layout.units[u].numel, f) !=
            tr->model.layout.units[u].numel)
            mt_die("short write to --dump-grads file '%s'", path);
    if (fclose(f)) mt_die("cannot close --dump-grads file '%s'", path);
}
