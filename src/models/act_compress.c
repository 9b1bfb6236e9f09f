/* Activation compression ({compress-activations}, see mt_act_compress in
 * models/model.h): which block buffers are stored compressed, their sizes,
 * and the encode after a block's forward / decode before its backward.
 * The family says per buffer whether it may be compressed
 * (mt_act_buf.comp) and the scale groups of int8 (block_buf_group); the
 * kernels are ops' (op_to_16 / op_from_16, op_act_int8_encode/decode). */
#include "models/model.h"
#include "ops/ops.h"
#include <string.h>

static const char *const compress_names[] = {"off", "lossless", "bf16", "int8"};

const char *mt_act_compress_name(mt_act_compress c) { return (unsigned)c < 4 ? compress_names[c] : "?"; }

int mt_act_compress_parse(const char *s, mt_act_compress *out, mt_error *err) {
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, compress_names[i])) {
            *out = (mt_act_compress)i;
            return 0;
        }
    return mt_errorf(err, "{compress-activations} must be off, lossless, bf16 or int8, got '%s'", s);
}

size_t mt_act_compress_bytes(mt_zenc e, size_t n, size_t g) {
    switch (e) {
    case MT_ZENC_BF16: case MT_ZENC_FP16: return 2 * n;
    case MT_ZENC_INT8: return n + (g ? n / g : 0) * sizeof(float); /* g 0: the codes alone */
    default: return n * sizeof(float);
    }
}

/* Every compressed buffer of the block: encoded from its fp32 working copy, or decoded into it; those the
 * linear layers read and write in bf16 themselves (zdirect) neither. */
static void code_block(mt_model *m, int layer, int decode) {
    const mt_family *f = m->fam;
    size_t N = (size_t)m->acts.B * (size_t)m->acts.T;
    mt_block_acts *ba = &m->acts.blocks[layer];
    for (int k = 0; k < f->n_block_bufs; k++) {
        if (!m->zenc[k] || ba->zdirect >> k & 1) continue;
        size_t n = f->block_buf_floats(m, k, N);
        mt_dtype d16 = m->zenc[k] == MT_ZENC_BF16 ? MT_BF16 : MT_FP16;
        if (m->zenc[k] == MT_ZENC_INT8) {
            size_t g = f->block_buf_group(m, k);
            if (decode)
                MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_act_int8_decode(m->be, ba->b[k], ba->z[k], ba->zscale[k], n / g, g));
            else
                MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_act_int8_encode(m->be, ba->z[k], ba->zscale[k], ba->b[k], n / g, g));
        } else if (decode)
            MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_from_16(m->be, d16, ba->b[k], ba->z[k], n));
        else
            MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_to_16(m->be, d16, ba->z[k], ba->b[k], n));
    }
}

/* A linear layer's input at {precision} bf16 is rounded to bf16 for its GEMMs, forward and backward: when it is
 * a whole kept buffer stored in bf16 (lossless, or bf16 compression), the forward rounds it straight into the
 * kept copy z[k] and the backward multiplies that copy -- the bits the encode and the backward's own rounding
 * give, one pass instead of three (the encode, the decode, the backward's rounding). The kernel producing the
 * input may even round into z[k] itself (MT_KEPT16_PRODUCER): the fp32 input is then never written. That
 * holds while the buffer's backward readers are all linear layers (mt_act_buf: MT_ACT_GEMM_INPUT); a mixture
 * of experts' gather also reads the router's input, so its models keep the encode and decode. */
uint16_t *mt_act_compress_kept16(mt_model *m, int u, const float *inp, size_t n, mt_kept16_use use, int *rounded) {
    const mt_family *f = m->fam;
    if (!m->compress || m->precision != MT_BF16 || m->cfg.num_experts || u < 1 || u > m->cfg.n_layer ||
        !m->acts.blocks)
        return NULL;
    mt_block_acts *ba = &m->acts.blocks[u - 1];
    size_t N = (size_t)m->acts.B * (size_t)m->acts.T;
    for (int k = 0; k < f->n_block_bufs; k++) {
        if (m->zenc[k] != MT_ZENC_BF16 || f->block_bufs[k].comp != MT_ACT_GEMM_INPUT || ba->b[k] != inp ||
            !ba->z[k] || f->block_buf_floats(m, k, N) != n)
            continue;
        if (use != MT_KEPT16_BACKWARD) ba->zdirect |= 1u << k;
        if (use == MT_KEPT16_PRODUCER) ba->zrounded |= 1u << k;
        if (rounded) *rounded = ba->zrounded >> k & 1;
        return ba->zdirect >> k & 1 ? (uint16_t *)ba->z[k] : NULL;
    }
    return NULL;
}

void mt_act_compress_forward_begins(mt_model *m, int layer) {
    m->acts.blocks[layer].zdirect = m->acts.blocks[layer].zrounded = 0;
}

void mt_act_compress_encode(mt_model *m, int layer) {
    code_block(m, layer, 0);
    m->zdecoded = -1; /* the working buffers now belong to this block's forward, not to a decoded backward */
}

void mt_act_compress_decode(mt_model *m, int layer) {
    code_block(m, layer, 1);
    m->zdecoded = layer;
}

void mt_act_compress_choose(mt_model *m) {
    const mt_family *f = m->fam;
    memset(m->zenc, 0, sizeof m->zenc);
    m->zdecoded = -1;
    if (m->compress == MT_ACT_COMPRESS_OFF || !f->block_buf_group) return;
    for (int k = 0; k < f->n_block_bufs; k++) {
        int comp = f->block_bufs[k].comp;
        if (!(f->block_bufs[k].own >> m->recompute & 1) || comp == MT_ACT_KEEP) continue; /* compress only what is kept */
        switch (m->compress) {
        case MT_ACT_COMPRESS_LOSSLESS:
            if (comp == MT_ACT_GEMM_INPUT && m->precision != MT_FP32)
                m->zenc[k] = m->precision == MT_BF16 ? MT_ZENC_BF16 : MT_ZENC_FP16;
            break;
        case MT_ACT_COMPRESS_BF16: m->zenc[k] = MT_ZENC_BF16; break;
        case MT_ACT_COMPRESS_INT8: m->zenc[k] = MT_ZENC_INT8; break;
        default: break;
        }
    }
}
