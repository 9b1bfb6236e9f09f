#include "train/train_io.h"
#include "train/pipeline_step.h"
#include "ckpt/checkpoint.h"
#include "interop/gptq.h"
#include "quant/qweight.h"
#include "data/shard.h"
#include "core/clock.h"
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Optimizer state stream k of unit u as fp32, the rank's shard
 * (mt_zero_state_len floats, zero padding; `buf` holds it unless the stream
 * is fp32 in memory). k = MT_OPT_STREAM_MASTER: the fp32 master where it is
 * a stream of the state (mt_zero_master_released). */
static const float *opt_shard(mt_trainer *tr, int su, int k, float *buf) { /* su: a state unit */
    mt_error e = {{0}};
    const float *s = mt_opt_states_get(&tr->optim, su, k, buf, &e);
    if (!s) mt_die("reading optimizer state stream %d of state unit %d failed: %s", k, su, e.msg);
    return s;
}

int mt_train_read_tokens(const char *path, int vocab_size, uint32_t **tokens, size_t *n, mt_error *err) {
    uint32_t mx;
    if (mt_shard_read(path, tokens, n, &mx, err)) return -1;
    if (vocab_size > 0 && mx >= (uint32_t)vocab_size) { /* an id the embedding has no row for */
        mt_shard_check_vocab(path, *tokens, *n, vocab_size, err);
        free(*tokens);
        *tokens = NULL;
        return -1;
    }
    return 0;
}

int mt_train_read_flags(const char *path, uint8_t **flags, int *window, mt_error *err) {
    mt_shard s;
    *flags = NULL;
    *window = 0;
    if (mt_shard_open(&s, path, err)) return -1;
    if (s.flags) {
        *flags = mt_xmalloc(s.n, "token shard flags");
        memcpy(*flags, s.flags, s.n);
        *window = s.window;
    }
    mt_shard_close(&s);
    return 0;
}

/* ---- tensors in checkpoint (tp-1) coordinates ---- */

/* The stored shape of a tensor: its tp-1 shape with the rows a checkpoint
 * holds (a vocabulary padded further for this layout's tp keeps its tp-1
 * rows). */
static void stored_shape(const mt_tensor *t, int *ndim, int64_t shape[MT_CKPT_MAX_DIM]) {
    *ndim = t->ndim;
    shape[0] = t->ckpt_rows;
    shape[1] = t->ndim == 2 ? t->gshape[1] : 1;
    shape[2] = shape[3] = 1;
}

/* Every tensor of a layout, "<prefix><name>", is in the checkpoint with the
 * shape the model needs (checked before anything is allocated for it). */
/* Which tensors check_shapes and for_each_run look at. */
enum { TRAINABLE = 0, FROZEN = 1, BASE = 2 /* frozen and trainable but not the adapters: a base checkpoint's */ };

static int n_of(const mt_unit_layout *ul, int which) { return which == FROZEN ? ul->n_frozen : ul->n_tensors; }
static const mt_tensor *tensor_of(const mt_unit_layout *ul, int which, int i) {
    return which == FROZEN ? &ul->ft[i] : &ul->t[i];
}

static int check_shapes_of(const mt_ckpt *ck, const mt_layout *l, const char *prefix, const char *dir, int which,
                           mt_error *err) {
    char name[160];
    for (int u = 0; u < l->n_units; u++)
        for (int i = 0; i < n_of(&l->units[u], which); i++) {
            const mt_tensor *t = tensor_of(&l->units[u], which, i);
            if (which == BASE && t->adapter) continue;
            int nd, hnd;
            int64_t want[MT_CKPT_MAX_DIM], have[MT_CKPT_MAX_DIM];
            stored_shape(t, &nd, want);
            snprintf(name, sizeof name, "%s%s", prefix, t->name);
            hnd = mt_ckpt_shape(ck, name, have);
            if (hnd < 0) return mt_errorf(err, "checkpoint '%s' has no tensor '%s'", dir, name);
            int same = hnd == nd;
            for (int d = 0; d < nd && same; d++) same = have[d] == want[d];
            if (!same) {
                char a[96], b[96];
                size_t k = 0;
                k += (size_t)snprintf(a + k, sizeof a - k, "[");
                for (int d = 0; d < hnd && k < sizeof a; d++)
                    k += (size_t)snprintf(a + k, sizeof a - k, d ? ", %lld" : "%lld", (long long)have[d]);
                if (k < sizeof a) snprintf(a + k, sizeof a - k, "]");
                k = (size_t)snprintf(b, sizeof b, "[");
                for (int d = 0; d < nd && k < sizeof b; d++)
                    k += (size_t)snprintf(b + k, sizeof b - k, d ? ", %lld" : "%lld", (long long)want[d]);
                if (k < sizeof b) snprintf(b + k, sizeof b - k, "]");
                return mt_errorf(err, "checkpoint '%s': tensor '%s' has shape %s, the model needs %s (a different "
                                 "model, or a damaged manifest)", dir, name, a, b);
            }
        }
    return 0;
}

static int check_shapes(const mt_ckpt *ck, const mt_layout *l, const char *prefix, const char *dir, mt_error *err) {
    return check_shapes_of(ck, l, prefix, dir, TRAINABLE, err);
}

/* Runs of a unit's local elements [a, b) that are contiguous both here and
 * in one stored tensor: fn(ctx, local element, tensor, first stored element,
 * count). Rows past what a checkpoint holds (vocabulary padding of this
 * layout's tp) are left out. writer: only the tp ranks that write a tensor
 * (the first of each group holding the same slice) see it. */
typedef int (*run_fn)(void *ctx, size_t local, const mt_tensor *t, int ti, uint64_t gstart, size_t n, mt_error *err);

static int for_each_run_of(const mt_layout *l, int u, size_t a, size_t b, int writer, int which, run_fn fn, void *ctx,
                           mt_error *err) {
    const mt_unit_layout *ul = &l->units[u];
    for (int i = 0; i < n_of(ul, which); i++) {
        const mt_tensor *t = tensor_of(ul, which, i);
        if ((which == BASE && t->adapter) || (which == FROZEN && t->quant)) continue;
        size_t lo = a > t->offset ? a : t->offset, hi = b < t->offset + t->numel ? b : t->offset + t->numel;
        if (lo >= hi) continue;
        if (writer && l->tp_rank % t->tp_replicas) continue;
        size_t cols = (size_t)t->shape[1] > 0 ? (size_t)t->shape[1] : 1;
        uint64_t stored = (uint64_t)t->ckpt_rows * (uint64_t)(t->ndim == 2 ? t->gshape[1] : 1);
        size_t run_local = 0, run_n = 0;
        uint64_t run_g = 0;
        for (size_t e = lo - t->offset; e < hi - t->offset;) {
            size_t r = e / cols, c = e % cols;
            size_t len = cols - c < hi - t->offset - e ? cols - c : hi - t->offset - e;
            uint64_t g = (uint64_t)mt_tensor_row_origin(l, t, (int64_t)r) + c;
            size_t keep = g >= stored ? 0 : (stored - g < len ? (size_t)(stored - g) : len);
            if (keep) {
                if (run_n && run_local + run_n == t->offset + e && run_g + run_n == g) {
                    run_n += keep;
                } else {
                    if (run_n && fn(ctx, run_local, t, i, run_g, run_n, err)) return -1;
                    run_local = t->offset + e;
                    run_g = g;
                    run_n = keep;
                }
            }
            e += len;
        }
        if (run_n && fn(ctx, run_local, t, i, run_g, run_n, err)) return -1;
    }
    return 0;
}

static int for_each_run(const mt_layout *l, int u, size_t a, size_t b, int writer, run_fn fn, void *ctx, mt_error *err) {
    return for_each_run_of(l, u, a, b, writer, TRAINABLE, fn, ctx, err);
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
    /* The config must describe the tensors the files hold (whose sizes the
     * manifest checks against the files) before a model is built from it. */
    mt_layout l;
    mt_model_layout_build(&info->cfg, 1, 0, &l);
    int rc = check_shapes(ck, &l, "model/", dir, err);
    mt_layout_free(&l);
    if (rc) {
        mt_ckpt_close(ck);
        return -1;
    }
    info->has_config = 1;
    info->step = mt_ckpt_step(ck);
    const mt_json *gq = mt_json_get(mt_ckpt_state(ck), "gptq");
    int64_t gb = 0, gg = 0;
    if (gq && (mt_json_get_int64(gq, "bits", &gb, err) || mt_json_get_int64(gq, "group_size", &gg, err))) {
        mt_ckpt_close(ck);
        return -1;
    }
    info->gptq_bits = (int)gb, info->gptq_group_size = (int)gg;
    mt_ckpt_close(ck);
    return 0;
}

typedef struct {
    const mt_ckpt *ck;
    const char *prefix;
    float *dst;
} read_ctx;

static int read_run(void *vc, size_t local, const mt_tensor *t, int ti, uint64_t gstart, size_t n, mt_error *err) {
    (void)ti;
    read_ctx *c = vc;
    char name[160];
    snprintf(name, sizeof name, "%s%s", c->prefix, t->name);
    return mt_ckpt_read(c->ck, name, (size_t)gstart, n, c->dst + local, err);
}

/* Unit u's local elements [a, b) of "<prefix>*" into dst (the unit's local
 * buffer; everything else zero, the vocabulary padding included): only the
 * byte ranges that hold them are read. */
static int read_local(const mt_ckpt *ck, const mt_layout *l, int u, const char *prefix, size_t a, size_t b, float *dst,
                      mt_error *err) {
    memset(dst, 0, l->units[u].numel * sizeof(float));
    read_ctx c = {ck, prefix, dst};
    return for_each_run(l, u, a, b, 0, read_run, &c, err);
}

/* read_local into a model's own buffer (parameters: frozen 0; the frozen store: 1) of unit u: on a
 * device through a host copy (device memory is not the host's to write) */
static int read_unit_into(const mt_model *m, const mt_ckpt *ck, int u, int frozen, float *dst, mt_error *err) {
    const mt_layout *l = &m->layout;
    size_t n = frozen ? l->units[u].frozen_numel : l->units[u].numel;
    float *h = m->be->kind == MT_DEVICE_CPU ? dst : mt_xmalloc((n ? n : 1) * sizeof(float), "checkpoint read (host copy)");
    int rc;
    if (frozen) { /* the runs it holds replace theirs; the rest keeps what the store holds */
        if (h != dst) op_copy_to_host(m->be, h, dst, n * sizeof(float));
        read_ctx c = {ck, "model/", h};
        rc = for_each_run_of(l, u, 0, n, 0, FROZEN, read_run, &c, err);
    } else {
        rc = read_local(ck, l, u, "model/", 0, n, h, err);
    }
    if (h != dst) {
        if (!rc) op_copy_from_host(m->be, dst, h, n * sizeof(float));
        free(h);
    }
    return rc;
}

/* A base checkpoint into a model that adds adapters ({init-from} with
 * {peft}): the adapters keep their initial values (from the seed), every
 * other trainable tensor is read. */
static int read_local_base(const mt_ckpt *ck, const mt_layout *l, int u, size_t a, size_t b, float *dst, uint64_t seed,
                           mt_error *err) {
    mt_unit_init_params(l, u, dst, seed);
    read_ctx c = {ck, "model/", dst};
    return for_each_run_of(l, u, a, b, 0, BASE, read_run, &c, err);
}

/* Frozen tensor i of unit u ({quantize-base} gptq) from the GPTQ directory hd
 * the base ck was imported from: its codes as they are, after checking that
 * they dequantize to the base's fp32 weights bit for bit (the directory may
 * have changed since the import). */
static int read_gptq_tensor(mt_model *m, const mt_ckpt *ck, mt_hf_dir *hd, const char *gdir, int bits, int u, int i,
                            mt_error *err) {
    const mt_tensor *t = &m->layout.units[u].ft[i];
    char hf[200], name[160];
    int tr;
    mt_family_get(m->cfg.family)->hf_name(&m->cfg, t->name, hf, sizeof hf, &tr);
    mt_gptqw g;
    int rc = mt_gptq_read_packed(hd, hf, bits, t->gshape[0], t->gshape[1], &g, err);
    if (rc == 0)
        return mt_errorf(err, "{quantize-base} gptq: %s is not quantized in the GPTQ directory %s (no %s's qweight): "
                              "train on the base without {quantize-base}, or use nf4 or int8",
                         t->name, gdir, hf);
    if (rc < 0) return -1;
    float *x = mt_xmalloc(t->gnumel * sizeof(float), "base weight");
    float *y = mt_xmalloc(t->gnumel * sizeof(float), "dequantized GPTQ weight");
    snprintf(name, sizeof name, "model/%s", t->name);
    rc = mt_ckpt_read(ck, name, 0, t->gnumel, x, err);
    if (!rc) {
        op_gptq_dequant_rows(m->be, g.qweight, g.qzeros, g.scales, g.g_idx, g.bits, g.rows, g.cols, 0, g.rows, g.cols,
                             y);
        if (memcmp(x, y, t->gnumel * sizeof(float)))
            rc = mt_errorf(err, "{quantize-base} gptq: the GPTQ directory %s no longer holds the weights its import "
                                "holds (%s differs): import the directory again",
                           gdir, t->name);
    }
    free(x);
    free(y);
    if (rc) mt_gptqw_free(&g);
    return rc ? rc : mt_model_set_gptq(m, u, i, &g, err);
}

/* The frozen stores of the held units from a checkpoint holding them as
 * trained tensors ("model/<name>"): the base a run adapts. */
static int read_frozen(mt_model *m, const char *dir, mt_error *err) {
    const mt_layout *l = &m->layout;
    if (!l->gtotal_frozen) return 0;
    mt_ckpt *ck = mt_ckpt_open_ex(dir, MT_CKPT_LAZY_VERIFY, err);
    if (!ck) return -1;
    int rc = check_shapes_of(ck, l, "model/", dir, FROZEN, err);
    mt_hf_dir *hd = NULL;
    const char *gdir = NULL;
    int64_t gbits = 0;
    if (!rc && m->cfg.adapters.quant == MT_QUANT_GPTQ) { /* where the codes are */
        const mt_json *gq = mt_json_get(mt_ckpt_state(ck), "gptq");
        if (!gq)
            rc = mt_errorf(err, "{quantize-base} gptq: the base %s was not imported from a GPTQ directory", dir);
        else if (mt_json_get_string(gq, "dir", &gdir, err) || mt_json_get_int64(gq, "bits", &gbits, err))
            rc = -1;
        mt_error e2 = {{0}};
        mt_gptq_config now = {0};
        if (!rc && (mt_hf_dir_open(gdir, &hd, &e2) || mt_gptq_config_read(mt_hf_dir_config(hd), &now, &e2)))
            rc = mt_errorf(err, "{quantize-base} gptq: the GPTQ directory %s that base %s was imported from: %s", gdir,
                           dir, e2.msg);
        else if (!rc && now.bits != gbits)
            rc = mt_errorf(err, "{quantize-base} gptq: the GPTQ directory %s no longer holds the weights its import "
                                "holds (%d bits now, %lld then): import the directory again",
                           gdir, now.bits, (long long)gbits);
    }
    for (int u = 0; u < l->n_units && !rc; u++) {
        if (!m->held[u]) continue;
        if (m->frozen[u]) rc = read_unit_into(m, ck, u, 1, m->frozen[u], err);
        for (int i = 0; i < l->units[u].n_frozen && !rc; i++) { /* quantized: the whole tensor, then quantized */
            const mt_tensor *t = &l->units[u].ft[i];
            if (!t->quant || mt_tensor_elsewhere(t)) continue; /* (another ep rank's expert: it reads that) */
            if (t->quant == MT_QUANT_GPTQ) {
                rc = read_gptq_tensor(m, ck, hd, gdir, (int)gbits, u, i, err);
                continue;
            }
            char name[160];
            snprintf(name, sizeof name, "model/%s", t->name);
            float *x = mt_xmalloc(t->gnumel * sizeof(float), "weight to quantize");
            rc = mt_ckpt_read(ck, name, 0, t->gnumel, x, err);
            if (!rc) rc = mt_model_set_quantized(m, u, i, x, err);
            free(x);
        }
    }
    if (hd) mt_hf_dir_close(hd);
    mt_ckpt_close(ck);
    mt_model_frozen_changed(m);
    return rc;
}

int mt_model_read_frozen(mt_model *m, const char *dir, mt_error *err) { return read_frozen(m, dir, err); }

/* Every rank reads the ranges it keeps: ZeRO-3 parameters and every
 * stage's optimizer state only the owned range (Adafactor's factored state
 * the unit), parameters of stages 0-2 the whole unit (this tp rank's
 * slices). One local unit buffer at a time (accounted as scratch). */
/* A resumed run follows the schedule it started with: {lr}, {min-lr},
 * {warmup} and {lr-schedule} as saved, and {steps} under cosine decay (which
 * ends at {steps}; a constant schedule may be extended). Checkpoints saved
 * before the schedule was recorded are not checked. */
static int check_schedule(const mt_json *sc, const mt_train_opts *o, mt_error *err) {
    if (!sc) return 0;
    const char *kind = NULL, *mine = o->lr.kind == MT_LR_COSINE ? "cosine" : "constant";
    double lr = 0, min_lr = 0;
    int64_t warmup = 0, steps = 0;
    if (mt_json_get_string(sc, "lr_schedule", &kind, NULL) || mt_json_get_double(sc, "lr", &lr, NULL) ||
        mt_json_get_double(sc, "min_lr", &min_lr, NULL) || mt_json_get_int64(sc, "warmup", &warmup, NULL) ||
        mt_json_get_int64(sc, "steps", &steps, NULL))
        return mt_errorf(err, "the checkpoint's schedule record is incomplete (a damaged manifest?)");
    char had[64] = "", now[64] = "";
    const char *flag = NULL;
    if (strcmp(kind, mine)) flag = "lr-schedule", snprintf(had, sizeof had, "%s", kind), snprintf(now, sizeof now, "%s", mine);
    else if (steps != o->steps && o->lr.kind == MT_LR_COSINE) flag = "steps", snprintf(had, sizeof had, "%lld", (long long)steps), snprintf(now, sizeof now, "%lld", (long long)o->steps);
    else if ((float)lr != o->lr.lr) flag = "lr", snprintf(had, sizeof had, "%g", lr), snprintf(now, sizeof now, "%g", (double)o->lr.lr);
    else if ((float)min_lr != o->lr.min_lr) flag = "min-lr", snprintf(had, sizeof had, "%g", min_lr), snprintf(now, sizeof now, "%g", (double)o->lr.min_lr);
    else if (warmup != o->lr.warmup) flag = "warmup", snprintf(had, sizeof had, "%lld", (long long)warmup), snprintf(now, sizeof now, "%lld", (long long)o->lr.warmup);
    if (!flag) return 0;
    return mt_errorf(err, "the run being resumed was started with {%s} %s, this one says {%s} %s: the learning-rate "
                          "schedule would change mid-run; resume with {%s} %s, or pass {allow-schedule-change}",
                     flag, had, flag, now, flag, had);
}

int mt_train_ckpt_load(mt_trainer *tr, const char *dir, int resume, mt_error *err) {
    mt_ckpt *ck = mt_ckpt_open_ex(dir, MT_CKPT_LAZY_VERIFY, err);
    if (!ck) return -1;
    const mt_layout *l = &tr->model.layout;
    int ns = mt_opt_states_count(&tr->optim);
    char prefix[64];
    int rc = 0;
    mt_layout full;
    mt_model_layout_build(&tr->o.cfg, 1, 0, &full);
    /* {init-from} a base with adapters added: the base's tensors, not the adapters */
    mt_model_config ck_cfg;
    const mt_json *ck_cj = mt_json_get(mt_ckpt_state(ck), "config");
    int ck_adapters = ck_cj && mt_model_config_read_json(ck_cj, &ck_cfg, NULL) == 0 && mt_adapter_spec_active(&ck_cfg.adapters);
    int base = !resume && mt_adapter_spec_active(&tr->o.cfg.adapters) && !ck_adapters;
    rc = check_shapes_of(ck, &full, "model/", dir, base ? BASE : TRAINABLE, err);
    for (int s = 0; s < ns && resume && !rc; s++) {
        snprintf(prefix, sizeof prefix, "optim/%s/", mt_opt_states_name(&tr->optim, s));
        rc = check_shapes(ck, &full, prefix, dir, err);
    }
    mt_layout_free(&full);
    size_t mx = 0;
    for (int u = 0; u < l->n_units; u++) mx = l->units[u].numel > mx ? l->units[u].numel : mx;
    size_t bytes = (mx ? mx : 1) * sizeof(float);
    float *buf = mt_mem_alloc(&tr->mem, MT_MEM_SCRATCH, bytes, "checkpoint load buffer");
    mt_zero *z = &tr->zero;
    for (int k0 = 0, k1; k0 < mt_zero_n_state(z) && !rc; k0 = k1) {
        /* unit u's state units k0 .. k1 - 1 (consecutive); the parameters a unit at a time */
        int u = mt_zero_state_unit(z, k0);
        size_t lo = SIZE_MAX, hi = 0, n = l->units[u].numel;
        for (k1 = k0; k1 < mt_zero_n_state(z) && mt_zero_state_unit(z, k1) == u; k1++) {
            size_t a, b;
            float *p, *g;
            mt_zero_owned(z, &tr->model, k1, &a, &b, &p, &g);
            lo = a < lo ? a : lo;
            hi = b > hi ? b : hi;
        }
        if (!mt_zero_state_len(z, k0)) continue; /* another pipeline stage's unit */
        if (base) rc = read_local_base(ck, l, u, z->stage == 3 ? lo : 0, z->stage == 3 ? hi : n, buf, tr->o.seed, err);
        else rc = read_local(ck, l, u, "model/", z->stage == 3 ? lo : 0, z->stage == 3 ? hi : n, buf, err);
        if (!rc) mt_zero_set_full_params(z, &tr->model, u, buf);
        for (int k = k0; k < k1 && !rc; k++) {
            if (mt_zero_master_released(z, k)) /* the fp32 master is a stream of the optimizer state */
                rc = mt_opt_states_set(&tr->optim, k, MT_OPT_STREAM_MASTER, buf, err);
            size_t a, b;
            float *p, *g;
            mt_zero_owned(z, &tr->model, k, &a, &b, &p, &g);
            for (int s = 0; s < ns && resume && !rc; s++) {
                snprintf(prefix, sizeof prefix, "optim/%s/", mt_opt_states_name(&tr->optim, s));
                int whole = tr->optim.entry->streams[s].enc == MT_OPT_ENC_FACTORED; /* rows/columns at each tensor's start */
                rc = read_local(ck, l, u, prefix, whole ? 0 : a, whole ? n : b, buf, err);
                if (!rc) rc = mt_opt_states_set(&tr->optim, k, s, buf, err);
            }
        }
    }
    mt_mem_free(&tr->mem, MT_MEM_SCRATCH, buf, bytes);
    if (!rc && resume) {
        const mt_json *st = mt_ckpt_state(ck);
        const char *opt = NULL;
        if (mt_json_get_string(st, "optimizer", &opt, err) == 0 && strcmp(opt, mt_opt_kind_name(tr->o.opt.kind)))
            rc = mt_errorf(err, "checkpoint was trained with {optimizer} %s, this run uses %s", opt,
                           mt_opt_kind_name(tr->o.opt.kind));
        int64_t v;
        if (!rc && mt_json_get_int64(st, "batch", &v, NULL) == 0 && v != tr->o.batch)
            rc = mt_errorf(err, "checkpoint was trained with {batch} %lld, this run uses %d; resuming needs the same batch",
                           (long long)v, tr->o.batch);
        if (!rc && mt_json_get_int64(st, "seed", &v, NULL) == 0 && (uint64_t)v != tr->o.seed)
            rc = mt_errorf(err, "checkpoint was trained with {seed} %lld, this run uses %llu; resuming needs the same seed",
                           (long long)v, (unsigned long long)tr->o.seed);
        const char *ord = NULL;
        const char *mine = mt_data_order_name(tr->o.order);
        if (!rc && mt_json_get_string(st, "data_order", &ord, NULL) == 0 && strcmp(ord, mine))
            rc = mt_errorf(err, "checkpoint was trained with {data-order} %s, this run uses %s", ord, mine);
        if (!rc && mt_json_get_int64(st, "nonfinite_skipped", &v, NULL) == 0) tr->nonfinite_skipped = v;
        if (!rc && !tr->o.allow_schedule_change) rc = check_schedule(mt_json_get(st, "schedule"), &tr->o, err);
        const mt_json *ls = mt_json_get(st, "loss_scaler");
        if (!rc && tr->o.precision == MT_FP16 && ls) rc = mt_loss_scaler_read_json(ls, &tr->scaler, err);
        tr->step = mt_ckpt_step(ck);
    }
    /* the frozen base: the checkpoint itself ({init-from}), or the base a resumed run recorded */
    if (!rc && tr->model.layout.gtotal_frozen) {
        const char *bdir = NULL;
        if (base) bdir = dir;
        else if (mt_json_get(mt_ckpt_state(ck), "base") &&
                 mt_json_get_string(mt_ckpt_state(ck), "base", &bdir, err))
            rc = -1;
        if (!rc && bdir) {
            snprintf(tr->base_dir, sizeof tr->base_dir, "%s", bdir);
            rc = read_frozen(&tr->model, bdir, err);
        }
    }
    mt_model_params_changed(&tr->model);
    mt_ckpt_close(ck);
    return rc;
}

int mt_model_load_checkpoint(mt_model *m, const char *dir, mt_error *err) {
    mt_ckpt *ck = mt_ckpt_open_ex(dir, MT_CKPT_LAZY_VERIFY, err);
    if (!ck) return -1;
    const mt_layout *l = &m->layout;
    int rc = check_shapes(ck, l, "model/", dir, err);
    for (int u = 0; u < l->n_units && !rc; u++) rc = read_unit_into(m, ck, u, 0, m->params[u], err);
    const char *bdir = NULL; /* a PEFT / {freeze} checkpoint: the frozen tensors are its base's */
    if (!rc && l->gtotal_frozen && mt_json_get(mt_ckpt_state(ck), "base") &&
        mt_json_get_string(mt_ckpt_state(ck), "base", &bdir, err) == 0)
        rc = read_frozen(m, bdir, err);
    mt_ckpt_close(ck);
    return rc;
}

/* ---- save ---- */

/* The manifest's tensor list: per unit, per tensor, the parameters then
 * each optimizer stream (index = first[u] + i * (1 + ns) + 1 + s). */
static int tensor_index(const mt_layout *l, int u, int i, int s, int ns) {
    int k = 0;
    for (int v = 0; v < u; v++) k += l->units[v].n_tensors * (1 + ns);
    return k + i * (1 + ns) + 1 + s;
}

/* This rank's part of the writing: the owned range [lo, hi) of unit u is
 * split over the ranks that hold the same range (stage 0: the dp group;
 * stages 1-3: the replica group of hybrid sharding), so no element is
 * written twice and every rank writes. Under expert parallelism an experts'
 * range (experts 1) is held alike only by the expert-data-parallel group (the
 * shard group): stage 0 splits it there, stages 1-3 own it alone; where ZeRO
 * shards the dense part over every dp rank (mt_zero.split) a rank owns its
 * dense range alone too. */
static void write_range(const mt_trainer *tr, size_t lo, size_t hi, int experts, size_t *a, size_t *b) {
    int k = 0, K = 1;
    const mt_comm *shard = mt_mesh_comm(&tr->mesh, MT_AXIS_SHARD);
    if (experts && tr->zero.stage == 0) {
        k = mt_comm_rank(shard);
        K = mt_comm_size(shard);
    } else if (experts || tr->zero.split) { /* split: every dp rank owns its own part of the dense tensors too */
    } else if (tr->zero.stage == 0) { /* the dp x cp ranks of the DP group hold the same parameters */
        k = mt_comm_rank(mt_mesh_comm(&tr->mesh, MT_AXIS_DP));
        K = mt_comm_size(mt_mesh_comm(&tr->mesh, MT_AXIS_DP));
    } else if (tr->zero.replica && mt_comm_size(tr->zero.replica) > 1) {
        k = mt_comm_rank(tr->zero.replica);
        K = mt_comm_size(tr->zero.replica);
    }
    size_t per = (hi - lo + (size_t)K - 1) / (size_t)K;
    *a = lo + per * (size_t)k < hi ? lo + per * (size_t)k : hi;
    *b = *a + per < hi ? *a + per : hi;
}

/* A rank-local outcome made collective: the lowest failing rank's message. */
static int agree_io(mt_comm *world, int rc, mt_error *err) {
    int64_t n = mt_comm_size(world), me = mt_comm_rank(world), v = rc ? me : n;
    mt_comm_allreduce_ctl(world, &v, &v, 1, MT_COMM_I64, MT_COMM_MIN);
    if (v == n) return 0;
    char msg[MT_ERROR_LEN];
    memset(msg, 0, sizeof msg);
    if (me == v && err) snprintf(msg, sizeof msg, "%s", err->msg);
    mt_comm_broadcast(world, msg, sizeof msg, (int)v);
    if (v == 0) return mt_errorf(err, "%s", msg);
    return mt_errorf(err, "rank %lld: %s", (long long)v, msg);
}

static char *state_json(const mt_trainer *tr) {
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
    /* the learning-rate schedule this run is following (a resume keeps it) */
    mt_jw_key(&w, "schedule");
    mt_jw_begin_object(&w);
    mt_jw_key(&w, "lr_schedule"); mt_jw_string(&w, tr->o.lr.kind == MT_LR_COSINE ? "cosine" : "constant");
    mt_jw_key(&w, "lr"); mt_jw_float(&w, tr->o.lr.lr);
    mt_jw_key(&w, "min_lr"); mt_jw_float(&w, tr->o.lr.min_lr);
    mt_jw_key(&w, "warmup"); mt_jw_int(&w, tr->o.lr.warmup);
    mt_jw_key(&w, "steps"); mt_jw_int(&w, tr->o.steps);
    mt_jw_end_object(&w);
    if (tr->base_dir[0]) { /* the checkpoint the frozen tensors come from (they are not saved here) */
        mt_jw_key(&w, "base");
        mt_jw_string(&w, tr->base_dir);
    }
    if (tr->nonfinite_skipped) { /* {on-nonfinite} skip: Adam's step count is the applied steps */
        mt_jw_key(&w, "nonfinite_skipped");
        mt_jw_int(&w, tr->nonfinite_skipped);
    }
    if (tr->o.precision == MT_FP16) {
        mt_jw_key(&w, "loss_scaler");
        mt_loss_scaler_write_json(&w, &tr->scaler);
    }
    mt_jw_end_object(&w);
    return w.buf;
}

/* The layout that wrote a checkpoint (for `ckpt info`; loading ignores it). */
static char *saved_with_json(const mt_trainer *tr) {
    mt_json_writer w;
    mt_jw_init(&w);
    mt_jw_begin_object(&w);
    mt_jw_key(&w, "world"); mt_jw_int(&w, mt_comm_size(tr->mesh.world));
    mt_jw_key(&w, "dp"); mt_jw_int(&w, tr->dp);
    if (tr->cp.size > 1) { mt_jw_key(&w, "cp"); mt_jw_int(&w, tr->cp.size); }
    mt_jw_key(&w, "tp"); mt_jw_int(&w, tr->tp.size);
    mt_jw_key(&w, "pp"); mt_jw_int(&w, tr->pp);
    mt_jw_key(&w, "zero"); mt_jw_int(&w, tr->o.zero);
    mt_jw_key(&w, "shard_group"); mt_jw_int(&w, tr->mesh.shape.shard);
    if (tr->ep_comm) { /* expert parallelism (only then: older readers and layouts see what they saw) */
        mt_jw_key(&w, "ep"); mt_jw_int(&w, mt_comm_size(tr->ep_comm));
    }
    mt_jw_key(&w, "precision"); mt_jw_string(&w, mt_dtype_name(tr->o.precision));
    mt_jw_key(&w, "offload"); mt_jw_bool(&w, tr->optim.offload != NULL);
    mt_jw_end_object(&w);
    return w.buf;
}

/* The data file stem for tr->step, chosen by rank 0 (collective). */
static int save_begin(mt_trainer *tr, char base[96], mt_error *err) {
    mt_comm *world = tr->mesh.world;
    memset(base, 0, 96);
    int rc = mt_comm_rank(world) == 0 ? mt_ckpt_data_base(tr->o.ckpt_dir, tr->step, base, 96, err) : 0;
    if (agree_io(world, rc, err)) return -1;
    mt_comm_broadcast(world, base, 96, 0);
    return 0;
}

/* What this rank puts into its file, in order: fn(ctx, tensor index,
 * first stored element, source, count) for every run of the owned range it
 * writes (shard: a buffer of the longest state shard, for opt_shard). */
typedef int (*put_fn)(void *ctx, int tensor, uint64_t gstart, const float *src, size_t n, mt_error *err);
typedef struct {
    const mt_layout *l;
    int u, s, ns;
    const float *src; /* the unit's elements from `lo` on */
    size_t lo;
    put_fn put;
    void *pctx;
} write_ctx;

static int write_run(void *vc, size_t local, const mt_tensor *t, int ti, uint64_t gstart, size_t n, mt_error *err) {
    (void)t;
    write_ctx *c = vc;
    return c->put(c->pctx, tensor_index(c->l, c->u, ti, c->s, c->ns), gstart, c->src + (local - c->lo), n, err);
}

static int for_each_put(mt_trainer *tr, float *shard, put_fn put, void *pctx, mt_error *err) {
    const mt_layout *l = &tr->model.layout;
    int ns = mt_opt_states_count(&tr->optim), rc = 0;
    for (int k = 0; k < mt_zero_n_state(&tr->zero) && !rc; k++) { /* ZeRO's state units */
        int u = mt_zero_state_unit(&tr->zero, k);
        if (!mt_zero_state_len(&tr->zero, k) || tr->pp_rank != mt_pipeline_unit_rank(tr, u)) continue;
        size_t lo, hi, a, b;
        float *p, *g;
        mt_zero_owned(&tr->zero, &tr->model, k, &lo, &hi, &p, &g);
        /* expert parallelism: the dense part and the experts' are held by different groups of ranks */
        size_t dense = tr->model.ep ? l->units[u].dense_numel : hi, mid = dense < lo ? lo : dense < hi ? dense : hi;
        size_t a2, b2;
        write_range(tr, lo, mid, 0, &a, &b);
        write_range(tr, mid, hi, 1, &a2, &b2);
        if (a >= b && a2 >= b2) continue;
        for (int s = -1; s < ns && !rc; s++) {
            const float *src;
            if (s < 0 && mt_zero_master_released(&tr->zero, k)) /* the fp32 master from the optimizer state */
                src = opt_shard(tr, k, MT_OPT_STREAM_MASTER, shard);
            else if (s < 0 && tr->be.kind != MT_DEVICE_CPU) { /* device memory: through a host copy */
                op_copy_to_host(&tr->be, shard, p, (hi - lo) * sizeof(float));
                src = shard;
            } else if (s < 0) src = p;
            else src = opt_shard(tr, k, s, shard);
            write_ctx c = {l, u, s, ns, src, lo, put, pctx};
            if (a < b) rc = for_each_run(l, u, a, b, 1, write_run, &c, err);
            if (!rc && a2 < b2) rc = for_each_run(l, u, a2, b2, 1, write_run, &c, err);
        }
    }
    return rc;
}

static int put_file(void *ctx, int tensor, uint64_t gstart, const float *src, size_t n, mt_error *err) {
    return mt_ckpt_file_put(ctx, tensor, gstart, src, n, err);
}

static size_t state_shard_len(mt_trainer *tr) {
    size_t sb = 1;
    for (int k = 0; k < mt_zero_n_state(&tr->zero); k++)
        sb = mt_zero_state_len(&tr->zero, k) > sb ? mt_zero_state_len(&tr->zero, k) : sb;
    return sb;
}

/* Collective: rc is this rank's outcome of writing its file fe (named
 * "<base>-r<rank>.bin"); rank 0 gathers every file's size, checksum and
 * pieces and writes the manifest of step `step` with state st last. */
static int save_commit(mt_trainer *tr, const char *base, int64_t step, const char *st, int rc,
                       const mt_ckpt_file_entry *fe, mt_error *err) {
    const mt_layout *l = &tr->model.layout;
    mt_comm *world = tr->mesh.world;
    int W = mt_comm_size(world), me = mt_comm_rank(world);
    int ns = mt_opt_states_count(&tr->optim);
    const char *dir = tr->o.ckpt_dir;
    char name[128];
    if (agree_io(world, rc, err)) return -1;
    /* rank 0 gathers every file's entry */
    uint64_t head[3] = {(uint64_t)fe->npieces, fe->bytes, fe->checksum};
    uint64_t *heads = mt_xcalloc((size_t)W * 3, sizeof(uint64_t), "checkpoint file table");
    mt_comm_allgather(world, head, heads, sizeof head);
    if (me != 0) {
        if (fe->npieces) mt_comm_send(world, fe->pieces, (size_t)fe->npieces * sizeof(mt_ckpt_piece), 0, 0);
    } else {
        mt_ckpt_file_entry *files = mt_xcalloc((size_t)W, sizeof *files, "checkpoint file table");
        mt_ckpt_piece **pcs = mt_xcalloc((size_t)W, sizeof *pcs, "checkpoint piece lists");
        char (*names)[128] = mt_xcalloc((size_t)W, 128, "checkpoint file names");
        for (int r = 0; r < W; r++) {
            size_t np = (size_t)heads[3 * r];
            snprintf(names[r], 128, "%s-r%05d.bin", base, r);
            if (r == 0) {
                files[0] = *fe;
                continue;
            }
            pcs[r] = mt_xmalloc((np ? np : 1) * sizeof(mt_ckpt_piece), "checkpoint piece list");
            if (np) mt_comm_recv(world, pcs[r], np * sizeof(mt_ckpt_piece), r, 0);
            files[r] = (mt_ckpt_file_entry){names[r], heads[3 * r + 1], heads[3 * r + 2], pcs[r], (int)np};
        }
        int nt = 0;
        for (int u = 0; u < l->n_units; u++) nt += l->units[u].n_tensors * (1 + ns);
        mt_ckpt_decl *decls = mt_xcalloc((size_t)(nt ? nt : 1), sizeof *decls, "checkpoint tensor list");
        char (*tn)[160] = mt_xcalloc((size_t)(nt ? nt : 1), 160, "checkpoint tensor names");
        for (int u = 0; u < l->n_units; u++)
            for (int i = 0; i < l->units[u].n_tensors; i++)
                for (int s = -1; s < ns; s++) {
                    int k = tensor_index(l, u, i, s, ns);
                    const mt_tensor *t = &l->units[u].t[i];
                    if (s < 0) snprintf(tn[k], 160, "model/%s", t->name);
                    else snprintf(tn[k], 160, "optim/%s/%s", mt_opt_states_name(&tr->optim, s), t->name);
                    decls[k].name = tn[k];
                    stored_shape(t, &decls[k].ndim, decls[k].shape);
                }
        char *sw = saved_with_json(tr);
        mt_ckpt_text_entry conf; /* the run's settings, so that {resume} DIR needs nothing else */
        if (tr->o.run_config) {
            mt_ckpt_run_config_name(base, name, sizeof name);
            rc = mt_ckpt_write_text(dir, name, tr->o.run_config, &conf, err);
        }
        if (!rc) rc = mt_ckpt_write_manifest(dir, step, st, sw, decls, nt, files, W, tr->o.run_config ? &conf : NULL, err);
        free(sw);
        free(decls);
        free(tn);
        for (int r = 0; r < W; r++) free(pcs[r]);
        free(pcs);
        free(names);
        free(files);
    }
    free(heads);
    return agree_io(world, rc, err);
}

/* Collective: every rank writes the pieces it owns (its ZeRO range of the
 * units its pipeline stage holds, the tp slices only the first rank of each
 * slice's group writes; parameters as the fp32 master) in tp-1 coordinates
 * to its own file, in parallel; rank 0 gathers every file's size, checksum
 * and pieces and writes the manifest last. No rank holds more than one
 * owned shard extra (a streamed optimizer state's). */
int mt_trainer_save(mt_trainer *tr, mt_error *err) {
    if (mt_trainer_save_async_finish(tr, 1, err)) return -1; /* never two saves at once */
    char base[96], name[128];
    if (save_begin(tr, base, err)) return -1;
    snprintf(name, sizeof name, "%s-r%05d.bin", base, mt_comm_rank(tr->mesh.world));
    size_t sb = state_shard_len(tr);
    float *shard = mt_mem_alloc(&tr->mem, MT_MEM_SCRATCH, sb * sizeof(float), "checkpoint state shard");
    mt_ckpt_file_entry fe;
    memset(&fe, 0, sizeof fe);
    mt_ckpt_file_writer *fw = mt_ckpt_file_begin(tr->o.ckpt_dir, name, err);
    int rc = fw ? 0 : -1;
    if (!rc) rc = for_each_put(tr, shard, put_file, fw, err);
    if (!rc) rc = mt_ckpt_file_finish(fw, &fe, err);
    mt_mem_free(&tr->mem, MT_MEM_SCRATCH, shard, sb * sizeof(float));
    char *st = state_json(tr);
    rc = save_commit(tr, base, tr->step, st, rc, &fe, err);
    free(st);
    mt_ckpt_file_free(fw);
    return rc;
}

/* ---- asynchronous save ({ckpt-async}) ----
 *
 * mt_trainer_save_async copies this rank's pieces (the same runs, in the
 * same order, as mt_trainer_save writes) into one host buffer allocated at
 * the first save, captures the state JSON, and starts a writer thread that
 * puts them into this rank's data file (temporary, fsync, rename: no MPI).
 * The manifest, the commit point, is written on the main thread by
 * mt_trainer_save_async_finish once every rank's writer is done. The file
 * the thread writes is named for a step no manifest references yet, so a
 * crash while it writes leaves the previous checkpoint as it was. */
typedef struct {
    int tensor;
    uint64_t gstart;
    size_t off, n;
} snap_run;

struct mt_ckpt_async {
    float *buf, *shard;      /* the snapshot (cap floats); opt_shard's buffer (shard_len floats) */
    size_t cap, shard_len, used;
    snap_run *runs;
    int nruns, runs_cap;
    mt_backend *be; /* the device the snapshot is copied from */
    /* the save in flight */
    int inflight, threaded;
    pthread_t thread;
    atomic_int done;         /* the writer has finished (rc and fe are set) */
    int rc;
    mt_error err;
    char base[96], name[128], *st, *dir;
    int64_t step;
    mt_ckpt_file_writer *fw;
    mt_ckpt_file_entry fe;
    double t0;
};

static int put_count(void *ctx, int tensor, uint64_t gstart, const float *src, size_t n, mt_error *err) {
    (void)tensor, (void)gstart, (void)src, (void)err;
    mt_ckpt_async *a = ctx;
    a->cap += n + 16; /* each piece starts on a 64-byte boundary in the buffer too */
    a->runs_cap++;
    return 0;
}

static int put_snap(void *ctx, int tensor, uint64_t gstart, const float *src, size_t n, mt_error *err) {
    mt_ckpt_async *a = ctx;
    size_t off = (a->used + 15) & ~(size_t)15;
    if (a->nruns >= a->runs_cap || off + n > a->cap)
        return mt_errorf(err, "checkpoint snapshot: the owned state grew after the first save (internal error)");
    op_copy_to_host(a->be, a->buf + off, src, n * sizeof(float));
    a->runs[a->nruns++] = (snap_run){tensor, gstart, off, n};
    a->used = off + n;
    return 0;
}

static void *writer_main(void *arg) {
    mt_ckpt_async *a = arg;
    int rc = 0;
    for (int i = 0; i < a->nruns && !rc; i++)
        rc = mt_ckpt_file_put(a->fw, a->runs[i].tensor, a->runs[i].gstart, a->buf + a->runs[i].off, a->runs[i].n, &a->err);
    if (!rc) rc = mt_ckpt_file_finish(a->fw, &a->fe, &a->err);
    a->rc = rc;
    atomic_store(&a->done, 1);
    return NULL;
}

int mt_trainer_save_async(mt_trainer *tr, mt_error *err) {
    if (mt_trainer_save_async_finish(tr, 1, err)) return -1;
    mt_ckpt_async *a = tr->ckpt_async;
    if (!a) { /* the first save: the buffers, sized for this layout's runs (the same at every save) */
        a = tr->ckpt_async = mt_xcalloc(1, sizeof *a, "checkpoint snapshot");
        a->be = &tr->be;
        a->shard_len = state_shard_len(tr);
        a->shard = mt_mem_alloc(&tr->mem, MT_MEM_SCRATCH, a->shard_len * sizeof(float), "checkpoint state shard");
        if (for_each_put(tr, a->shard, put_count, a, err)) return -1;
        a->cap = a->cap ? a->cap : 1;
        a->buf = mt_mem_alloc(&tr->mem, MT_MEM_SCRATCH, a->cap * sizeof(float), "checkpoint snapshot");
        a->runs = mt_xcalloc((size_t)(a->runs_cap ? a->runs_cap : 1), sizeof *a->runs, "checkpoint snapshot runs");
    }
    if (save_begin(tr, a->base, err)) return -1;
    snprintf(a->name, sizeof a->name, "%s-r%05d.bin", a->base, mt_comm_rank(tr->mesh.world));
    a->t0 = mt_clock_s();
    a->used = 0;
    a->nruns = 0;
    int rc = for_each_put(tr, a->shard, put_snap, a, err);
    if (!rc) {
        a->fw = mt_ckpt_file_begin(tr->o.ckpt_dir, a->name, err);
        rc = a->fw ? 0 : -1;
    }
    if (agree_io(tr->mesh.world, rc, err)) {
        mt_ckpt_file_free(a->fw);
        a->fw = NULL;
        return -1;
    }
    a->st = state_json(tr);
    a->step = tr->step;
    a->rc = 0;
    memset(&a->err, 0, sizeof a->err);
    memset(&a->fe, 0, sizeof a->fe);
    atomic_store(&a->done, 0);
    /* signals go to the training thread (which records them), never to the writer */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    a->threaded = pthread_create(&a->thread, NULL, writer_main, a) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!a->threaded) writer_main(a); /* no thread to be had: written now, committed as usual */
    a->inflight = 1;
    return 0;
}

int mt_trainer_save_async_busy(const mt_trainer *tr) {
    const mt_ckpt_async *a = tr->ckpt_async;
    return a && a->inflight && !atomic_load(&a->done);
}

int64_t mt_trainer_save_async_step(const mt_trainer *tr, double *started) {
    const mt_ckpt_async *a = tr->ckpt_async;
    if (!a || !a->inflight) return -1;
    if (started) *started = a->t0;
    return a->step;
}

int mt_trainer_save_async_finish(mt_trainer *tr, int commit, mt_error *err) {
    mt_ckpt_async *a = tr->ckpt_async;
    if (!a || !a->inflight) return 0;
    if (a->threaded) pthread_join(a->thread, NULL);
    a->inflight = 0;
    int rc = 0;
    if (commit) {
        if (a->rc && err) *err = a->err;
        rc = save_commit(tr, a->base, a->step, a->st, a->rc, &a->fe, err);
    }
    free(a->st);
    a->st = NULL;
    mt_ckpt_file_free(a->fw); /* an uncommitted file stays: the next save's manifest removes it */
    a->fw = NULL;
    return rc;
}

void mt_trainer_save_async_free(mt_trainer *tr) {
    mt_ckpt_async *a = tr->ckpt_async;
    if (!a) return;
    mt_trainer_save_async_finish(tr, 0, NULL);
    if (a->buf) mt_mem_free(&tr->mem, MT_MEM_SCRATCH, a->buf, a->cap * sizeof(float));
    if (a->shard) mt_mem_free(&tr->mem, MT_MEM_SCRATCH, a->shard, a->shard_len * sizeof(float));
    free(a->runs);
    free(a);
    tr->ckpt_async = NULL;
}

void mt_train_dump_grads(mt_trainer *tr, const char *path) {
    FILE *f = fopen(path, "wb");
    if (!f) mt_die("cannot open {dump-grads} file '%s'", path);
    float *host = NULL; /* a device's gradients come through one host buffer (a test aid, once: not the hot path) */
    size_t cap = 0;
    for (int u = 0; u < tr->model.layout.n_units; u++) {
        size_t n = tr->model.layout.units[u].numel;
        if (!n) continue; /* a unit with nothing trained (a frozen embedding) has no buffer */
        const float *g = tr->model.grads[u];
        if (tr->be.kind != MT_DEVICE_CPU) {
            if (n > cap && !(host = realloc(host, (cap = n) * sizeof(float))))
                mt_die("out of memory: %zu bytes for {dump-grads}' host copy", n * sizeof(float));
            op_copy_to_host(&tr->be, host, g, n * sizeof(float));
            mt_backend_sync(&tr->be);
            g = host;
        }
        if (fwrite(g, sizeof(float), n, f) != n) mt_die("short write to {dump-grads} file '%s'", path);
    }
    free(host);
    if (fclose(f)) mt_die("cannot close {dump-grads} file '%s'", path);
}
