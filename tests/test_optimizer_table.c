/* The optimizer table (optim/optimizer.h) and a rank's state over it
 * (optim/opt_state.h). Every entry, driven only through the table on a small
 * unit (the whole unit and a shard that starts and ends inside matrices):
 *  - its step equals the entry's existing update bitwise (mt_opt_update_range,
 *    mt_opt_update_range_16, mt_adafactor_update, mt_adam8bit_update), in
 *    fp32 and under bf16 (16-bit gradient in, master rounded into 16 bits);
 *  - elementwise entries: a step a chunk at a time (step_streams, what disk
 *    offload runs) equals the whole-range step;
 *  - each stream's fp32 view round-trips: get, set into a fresh state, get
 *    gives the same bytes, and the restored state steps on bitwise;
 *  - the rank state: with disk offload equal to in memory bitwise, for every
 *    entry (streamed in chunks with the fp32 master as a stream; or paged a
 *    unit at a time), and each stream set and read back through the file. */
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
#include "optim/adafactor.h"
#include "optim/adam8bit.h"
#include "optim/opt_state.h"
#include "optim/optimizer.h"
#include "testlib.h"
#include "testlib_unit.h"



/* Factored matrices (rows not a multiple of any block), vectors, a [1, n]
 * matrix; 1157 elements. */
static mt_tensor unit_tensors[6];
static mt_unit_layout test_unit(void) {
    mt_unit_layout u;
    memset(&u, 0, sizeof u);
    u.role = MT_UNIT_BLOCK;
    u.t = unit_tensors;
    u.cap = 6;
    add_test_tensors(&u);
    return u;
}

/* ---- a target over plain buffers: fp32, or bf16 gradient and params */
typedef struct {
    float *p, *g;        /* fp32 master and gradient of the range */
    uint16_t *g16, *p16; /* bf16 (dt == MT_BF16) */
    mt_dtype dt;
    float *wide;         /* scratch for the widened gradient */
} buffers;

static const float *buf_grad(void *ctx, size_t off, size_t n) {
    buffers *b = ctx;
    if (b->dt == MT_FP32) return b->g + off;
    mt_convert_from_16(b->dt, b->wide, b->g16 + off, n);
    return b->wide;
}
static void buf_round(void *ctx, size_t off, size_t n, const float *master) {
    buffers *b = ctx;
    if (b->dt != MT_FP32) mt_convert_to_16(b->dt, b->p16 + off, master, n);
}
static mt_opt_target target_of(buffers *b) {
    mt_opt_target tg = {b->p, b->dt, b->g16, b->p16, buf_grad, buf_round, b, NULL, NULL, BE};
    return tg;
}

static mt_opt_config config_of(mt_opt_kind k, float af_beta1) {
    /* AdaGrad with a decaying rate and a non-zero start of its sum (both PyTorch options) */
    float lr_decay = k == MT_OPT_ADAGRAD ? 0.1f : 0.0f, acc0 = k == MT_OPT_ADAGRAD ? 0.1f : 0.0f;
    mt_opt_config c = {{k, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.05f, 0.9f, lr_decay, acc0}, af_beta1, 0, 1.0f};
    return c;
}

/* The entry's own update API on its own state (the reference). */
typedef struct {
    float *st[2];
    mt_adafactor af;
    mt_adafactor_hparams afh;
    mt_adam8bit q8;
} reference;

static void ref_init(reference *r, const mt_opt_config *c, const mt_unit_layout *u, size_t b, size_t e, mt_mem *mem) {
    memset(r, 0, sizeof *r);
    r->st[0] = calloc(e - b + 1, 4);
    r->st[1] = calloc(e - b + 1, 4);
    mt_adafactor_hparams_default(&r->afh);
    r->afh.weight_decay = c->h.weight_decay;
    r->afh.beta1 = c->adafactor_beta1;
    if (c->h.kind == MT_OPT_ADAFACTOR) mt_adafactor_init(&r->af, &r->afh, u, b, e, mem);
    if (c->h.kind == MT_OPT_ADAMW8BIT) mt_adam8bit_init(&r->q8, u, b, e, mem);
}
static void ref_free(reference *r, const mt_opt_config *c, mt_mem *mem) {
    free(r->st[0]);
    free(r->st[1]);
    if (c->h.kind == MT_OPT_ADAFACTOR) mt_adafactor_free(&r->af, mem);
    if (c->h.kind == MT_OPT_ADAMW8BIT) mt_adam8bit_free(&r->q8, mem);
}
/* One step the way each optimizer was driven before the table: widen the
 * gradient and round the master around the update, except Adam(W)'s one
 * 16-bit pass. */
static void ref_step(reference *r, const mt_opt_config *c, const mt_unit_layout *u, size_t b, size_t e, buffers *x,
                     float lr, int64_t t, float scale) {
    size_t n = e - b;
    if (x->dt != MT_FP32 && mt_opt_has_update_16(c->h.kind)) {
        mt_opt_update_range_16(BE, &c->h, u, b, e, x->p, x->g16, x->p16, x->dt, r->st, lr, t, scale);
        return;
    }
    const float *g = buf_grad(x, 0, n);
    switch (c->h.kind) {
    case MT_OPT_ADAFACTOR: mt_adafactor_update(BE, &r->af, &r->afh, u, x->p, g, lr, t, scale, NULL, NULL); break;
    case MT_OPT_ADAMW8BIT: mt_adam8bit_update(BE, &r->q8, &c->h, u, x->p, g, lr, t, scale); break;
    default: mt_opt_update_range(BE, &c->h, u, b, e, x->p, g, r->st, lr, t, scale);
    }
    buf_round(x, 0, n, x->p);
}
static void ref_get(const reference *r, const mt_opt_config *c, const mt_unit_layout *u, size_t n, int k, float *dst) {
    if (c->h.kind == MT_OPT_ADAFACTOR) mt_adafactor_get_state(BE, &r->af, u, k, dst);
    else if (c->h.kind == MT_OPT_ADAMW8BIT) mt_adam8bit_get_state(BE, &r->q8, k, dst);
    else memcpy(dst, r->st[k], n * 4);
}

static void fill(buffers *x, size_t n, mt_dtype dt, uint64_t seed) {
    uint64_t s = seed;
    x->dt = dt;
    for (size_t i = 0; i < n; i++) {
        x->p[i] = 0.05f * rng_sym(&s);
        x->g[i] = (i % 7 ? 1.0f : 1e-3f) * rng_sym(&s);
    }
    if (dt != MT_FP32) {
        mt_convert_to_16(dt, x->p16, x->p, n);
        mt_convert_from_16(dt, x->p, x->p16, n); /* the master starts as the 16-bit value */
        mt_convert_to_16(dt, x->g16, x->g, n);
    }
}
static void alloc_buffers(buffers *x, size_t n) {
    x->p = calloc(n + 1, 4);
    x->g = calloc(n + 1, 4);
    x->wide = calloc(n + 1, 4);
    x->g16 = calloc(n + 1, 2);
    x->p16 = calloc(n + 1, 2);
}
static void free_buffers(buffers *x) {
    free(x->p);
    free(x->g);
    free(x->wide);
    free(x->g16);
    free(x->p16);
}
static int same(const void *a, const void *b, size_t bytes) { return !memcmp(a, b, bytes); }

/* The table's entry of kind k describes itself consistently. */
static void test_entries(void) {
    for (int k = 0; k < MT_OPT_N_KINDS; k++) {
        const mt_optimizer *e = mt_optimizer_get((mt_opt_kind)k);
        mt_opt_kind parsed;
        mt_error err;
        CHECK(e->kind == (mt_opt_kind)k && !strcmp(e->name, mt_opt_kind_name((mt_opt_kind)k)), "entry %d: %s", k,
              e->name);
        CHECK(mt_opt_kind_parse(e->name, &parsed, &err) == 0 && parsed == (mt_opt_kind)k, "parse %s", e->name);
        CHECK(e->n_streams >= 1 && e->n_streams <= MT_OPT_MAX_STREAMS && e->n_streams == mt_opt_state_count(e->kind),
              "%s: %d streams", e->name, e->n_streams);
        CHECK(e->elementwise == !mt_opt_is_lean(e->kind) && (e->step_streams != NULL) == e->elementwise,
              "%s: elementwise %d", e->name, e->elementwise);
        for (int s = 0; s < e->n_streams; s++)
            CHECK(!strcmp(e->streams[s].name, mt_opt_state_name(e->kind, s)), "%s stream %d: %s", e->name, s,
                  e->streams[s].name);
    }
    /* the checkpoint's stream names: the bytes of existing checkpoints */
    CHECK(!strcmp(mt_optimizer_get(MT_OPT_SGD)->streams[0].name, "momentum"), "sgd stream");
    CHECK(!strcmp(mt_optimizer_get(MT_OPT_ADAMW8BIT)->streams[1].name, "v") &&
              mt_optimizer_get(MT_OPT_ADAMW8BIT)->streams[1].enc == MT_OPT_ENC_Q8, "8-bit v");
    CHECK(mt_optimizer_get(MT_OPT_ADAFACTOR)->streams[1].enc == MT_OPT_ENC_FACTORED &&
              mt_optimizer_get(MT_OPT_ADAFACTOR)->whole_tensors, "adafactor v");
}

/* One entry on [b, e): 3 steps through the table vs the reference, then
 * the stream round trip and 2 more steps from restored state. */
static void test_entry_range(const mt_opt_config *c, size_t b, size_t e, mt_dtype dt) {
    const mt_optimizer *op = mt_optimizer_get(c->h.kind);
    mt_unit_layout u = test_unit();
    size_t n = e - b, len = n + 5; /* a padded stream, as ZeRO's shards */
    mt_mem mem;
    memset(&mem, 0, sizeof mem);
    buffers x, y;
    alloc_buffers(&x, n);
    alloc_buffers(&y, n);
    mt_opt_state *s = op->init(c, &u, b, e, len, &mem);
    reference r;
    ref_init(&r, c, &u, b, e, &mem);
    const char *tag = dt == MT_FP32 ? "fp32" : "bf16";
    int ok = 1;
    for (int t = 1; t <= 3; t++) {
        fill(&x, n, dt, 100 + (uint64_t)t);
        fill(&y, n, dt, 100 + (uint64_t)t);
        if (t > 1) { /* carry the params on (fill draws fresh gradients) */
            memcpy(x.p, y.p, n * 4);
            memcpy(x.p16, y.p16, n * 2);
        }
        mt_opt_target tg = target_of(&x);
        op->step(s, c, &u, &tg, 1e-2f, t, 0.75f);
        ref_step(&r, c, &u, b, e, &y, 1e-2f, t, 0.75f);
        ok = ok && same(x.p, y.p, n * 4) && (dt == MT_FP32 || same(x.p16, y.p16, n * 2));
        memcpy(y.p, x.p, n * 4);
        memcpy(y.p16, x.p16, n * 2);
    }
    CHECK(ok, "%s [%zu, %zu) %s: 3 table steps equal the entry's own update bitwise", op->name, b, e, tag);
    float *a = calloc(len, 4), *a2 = calloc(len, 4), *full = calloc(u.numel, 4);
    for (int k = 0; k < op->n_streams; k++) {
        op->get_stream(s, &u, k, a);
        ref_get(&r, c, &u, n, k, a2);
        CHECK(same(a, a2, n * 4), "%s [%zu, %zu) %s stream %s equals the reference's state", op->name, b, e, tag,
              op->streams[k].name);
        float *f32 = op->fp32_stream(s, k);
        CHECK(!op->elementwise || (f32 && same(f32, a, n * 4)), "%s: fp32 stream in memory", op->name);
    }
    /* Round trip: into a fresh state (Adafactor's factored rows/columns are
     * read whole, so only a whole-unit range holds all of them). */
    if (!op->whole_tensors || (b == 0 && e == u.numel)) {
        mt_opt_state *s2 = op->init(c, &u, b, e, len, &mem);
        for (int k = 0; k < op->n_streams; k++) {
            op->get_stream(s, &u, k, a);
            memset(full, 0, u.numel * 4);
            memcpy(full + b, a, n * 4);
            op->set_stream(s2, &u, k, full);
            op->get_stream(s2, &u, k, a2);
            CHECK(same(a, a2, n * 4), "%s [%zu, %zu) %s: stream %s fp32 -> state -> fp32 is the same bytes", op->name,
                  b, e, tag, op->streams[k].name);
        }
        memcpy(y.p, x.p, n * 4);
        memcpy(y.p16, x.p16, n * 2);
        ok = 1;
        for (int t = 4; t <= 5; t++) {
            mt_opt_target tx = target_of(&x), ty = target_of(&y);
            op->step(s, c, &u, &tx, 1e-2f, t, 1.0f);
            op->step(s2, c, &u, &ty, 1e-2f, t, 1.0f);
            ok = ok && same(x.p, y.p, n * 4);
        }
        CHECK(ok, "%s [%zu, %zu) %s: restored state steps on bitwise", op->name, b, e, tag);
        op->free(s2, &mem);
    }
    /* elementwise: three uneven chunks with the state's own streams */
    if (op->elementwise) {
        /* a fresh pair of states, stepped once whole and once in chunks */
        mt_opt_state *w = op->init(c, &u, b, e, len, &mem), *ch = op->init(c, &u, b, e, len, &mem);
        fill(&x, n, dt, 8);
        fill(&y, n, dt, 8);
        mt_opt_target tx = target_of(&x), ty = target_of(&y);
        op->step(w, c, &u, &tx, 1e-2f, 1, 1.0f);
        size_t cut[4] = {0, n / 3, n / 3 + 1, n};
        for (int i = 0; i < 3; i++) {
            float *st[MT_OPT_MAX_STREAMS] = {NULL, NULL};
            for (int k = 0; k < op->n_streams; k++) st[k] = op->fp32_stream(ch, k) + cut[i];
            op->step_streams(c, &u, b, cut[i], cut[i + 1] - cut[i], &ty, y.p + cut[i], st, 1e-2f, 1, 1.0f);
        }
        ok = same(x.p, y.p, n * 4) && (dt == MT_FP32 || same(x.p16, y.p16, n * 2));
        for (int k = 0; k < op->n_streams; k++) ok = ok && same(op->fp32_stream(w, k), op->fp32_stream(ch, k), n * 4);
        CHECK(ok, "%s [%zu, %zu) %s: a step in chunks equals the whole-range step", op->name, b, e, tag);
        op->free(w, &mem);
        op->free(ch, &mem);
    }
    op->free(s, &mem);
    ref_free(&r, c, &mem);
    CHECK(mem.cur[MT_MEM_OPTIM] == 0 && mem.cur[MT_MEM_SCRATCH] == 0, "%s: all state freed (%zu bytes left)", op->name,
          mem.cur[MT_MEM_OPTIM]);
    free(a);
    free(a2);
    free(full);
    free_buffers(&x);
    free_buffers(&y);
}

/* ---- the rank state: two units (the test unit twice), in memory and
 * offloaded to a file, stepped through the same targets */
typedef struct {
    buffers x[2];
    size_t b[2];
} two_units;
static void two_target(void *ctx, int u, mt_opt_target *tg) {
    two_units *t = ctx;
    *tg = target_of(&t->x[u]);
}

static void test_rank_state(mt_opt_kind kind, mt_dtype dt, const char *dir) {
    mt_unit_layout units[2] = {test_unit(), test_unit()};
    size_t numel = units[0].numel, begin[2] = {100, 0}, end[2] = {900, numel}, len[2] = {900, numel};
    mt_opt_config c = config_of(kind, 0.0f);
    mt_mem mem;
    memset(&mem, 0, sizeof mem);
    mt_error err;
    mt_opt_states mine, disk;
    CHECK(mt_opt_states_init(&mine, &c, units, 2, begin, end, len, NULL, &mem, &err) == 0, "in memory: %s", err.msg);
    mt_opt_offload_cfg off = {dir, 0, 4096 * 4, dt != MT_FP32};
    int rc = mt_opt_states_init(&disk, &c, units, 2, begin, end, len, &off, &mem, &err);
    const mt_optimizer *op = mt_optimizer_get(kind);
    /* the elementwise entries stream the master with their state; the others page their state and keep it */
    int master = mt_opt_states_has_master(&disk);
    CHECK(rc != 0 || master == (op->elementwise && dt != MT_FP32), "%s: master offloaded %d", op->name, master);
    CHECK(rc == 0, "offload: %s", err.msg);
    if (rc) return;
    two_units a, d;
    for (int u = 0; u < 2; u++) {
        size_t n = end[u] - begin[u];
        alloc_buffers(&a.x[u], n);
        alloc_buffers(&d.x[u], n);
        fill(&a.x[u], n, dt, 40 + (uint64_t)u);
        fill(&d.x[u], n, dt, 40 + (uint64_t)u);
        if (master) { /* the master goes to the file; the target then has none */
            CHECK(mt_opt_states_put_master(&disk, u, d.x[u].p, &err) == 0, "master: %s", err.msg);
            memset(d.x[u].p, 0, n * 4);
        }
    }
    int ok = 1;
    for (int t = 1; t <= 3; t++) {
        for (int u = 0; u < 2; u++) { /* fresh gradients each step */
            size_t n = end[u] - begin[u];
            uint64_t s = 77 + (uint64_t)(10 * t + u);
            for (size_t i = 0; i < n; i++) a.x[u].g[i] = d.x[u].g[i] = rng_sym(&s);
            if (dt != MT_FP32) {
                mt_convert_to_16(dt, a.x[u].g16, a.x[u].g, n);
                mt_convert_to_16(dt, d.x[u].g16, d.x[u].g, n);
            }
        }
        float *held[2] = {d.x[0].p, d.x[1].p};
        if (master) d.x[0].p = d.x[1].p = NULL;
        ok = ok && mt_opt_states_step(&mine, two_target, &a, 1e-2f, t, 1.0f, &err) == 0;
        ok = ok && mt_opt_states_step(&disk, two_target, &d, 1e-2f, t, 1.0f, &err) == 0;
        d.x[0].p = held[0];
        d.x[1].p = held[1];
    }
    CHECK(ok, "steps: %s", err.msg);
    float *b1 = calloc(numel, 4), *b2 = calloc(numel, 4), *full = calloc(numel, 4);
    for (int u = 0; u < 2; u++) {
        size_t n = end[u] - begin[u];
        if (master) {
            const float *m = mt_opt_states_get(&disk, u, MT_OPT_STREAM_MASTER, b2, &err);
            CHECK(m && same(m, a.x[u].p, n * 4), "%s %s unit %d: offloaded master equals in memory", op->name,
                  mt_dtype_name(dt), u);
            CHECK(same(a.x[u].p16, d.x[u].p16, n * 2), "%s unit %d: 16-bit params equal", op->name, u);
        } else {
            CHECK(same(a.x[u].p, d.x[u].p, n * 4) && same(a.x[u].p16, d.x[u].p16, n * 2), "%s %s unit %d: params equal",
                  op->name, mt_dtype_name(dt), u);
        }
        for (int k = 0; k < mt_opt_states_count(&mine); k++) {
            const float *s1 = mt_opt_states_get(&mine, u, k, b1, &err), *s2 = mt_opt_states_get(&disk, u, k, b2, &err);
            int pad0 = 1;
            for (size_t i = n; i < len[u]; i++) pad0 = pad0 && s2[i] == 0.0f && s1[i] == 0.0f;
            CHECK(s1 && s2 && same(s1, s2, n * 4) && pad0, "%s %s unit %d stream %s: offloaded equals in memory",
                  op->name, mt_dtype_name(dt), u, mt_opt_states_name(&mine, k));
            /* the same full stream set into both, read back: through the file as in memory */
            memset(full, 0, numel * 4);
            memcpy(full + begin[u], s1, n * 4);
            full[begin[u]] += 1.0f;
            CHECK(mt_opt_states_set(&disk, u, k, full, &err) == 0 && mt_opt_states_set(&mine, u, k, full, &err) == 0,
                  "set: %s", err.msg);
            s1 = mt_opt_states_get(&mine, u, k, b1, &err);
            s2 = mt_opt_states_get(&disk, u, k, b2, &err);
            CHECK(s1 && s2 && same(s1, s2, n * 4) && (!op->elementwise || same(s2, full + begin[u], n * 4)),
                  "%s unit %d stream %d: set then get through the file", op->name, u, k);
        }
    }
    CHECK(mt_opt_states_get(&mine, 0, MT_OPT_STREAM_MASTER, b1, &err) == NULL && strstr(err.msg, "master"),
          "no master stream in memory: %s", err.msg);
    free(b1);
    free(b2);
    free(full);
    for (int u = 0; u < 2; u++) {
        free_buffers(&a.x[u]);
        free_buffers(&d.x[u]);
    }
    mt_opt_states_free(&disk);
    mt_opt_states_free(&mine);
    CHECK(mem.cur[MT_MEM_OPTIM] == 0, "%s: rank state freed (%zu bytes left)", op->name, mem.cur[MT_MEM_OPTIM]);
}

int main(void) {
    test_entries();
    size_t numel = test_unit().numel;
    for (int k = 0; k < MT_OPT_N_KINDS; k++)
        for (int momentum = 0; momentum < 1 + (k == MT_OPT_ADAFACTOR); momentum++) {
            mt_opt_config c = config_of((mt_opt_kind)k, momentum ? 0.9f : 0.0f);
            test_entry_range(&c, 0, numel, MT_FP32);
            test_entry_range(&c, 300, 1000, MT_FP32); /* starts and ends inside w1's rows / in w2 */
            test_entry_range(&c, 0, numel, MT_BF16);
            test_entry_range(&c, 300, 1000, MT_BF16);
        }
    char dir[] = "/tmp/mt-optim-table-XXXXXX";
    tl_mkdtemp(dir);
    for (int k = 0; k < MT_OPT_N_KINDS; k++) {
        test_rank_state((mt_opt_kind)k, MT_FP32, dir);
        test_rank_state((mt_opt_kind)k, MT_BF16, dir);
    }
    rmdir(dir);
    TEST_MAIN_END("test_optimizer_table");
}
