/* The model's linear layers at the run's precision ({precision}):
 *   fp32  sgemm (oneDNN or OpenBLAS, {gemm}) on the fp32 parameters and activations;
 *   bf16  the GEMM operands -- weights, the activations entering a layer and
 *         the gradients entering its backward -- are bf16 and the GEMMs run
 *         on the AVX512_BF16 units (ops/matmul_lowp.h), accumulating and
 *         returning fp32;
 *   fp16  the same operands rounded to fp16; this CPU has no fp16 dot
 *         product, so the GEMM runs in fp32 on the rounded values (products
 *         of two fp16 values are exact in fp32: the result is what an
 *         fp16-input, fp32-accumulate GEMM gives). Gradients scaled by the
 *         loss scale overflow fp16 exactly where they would on a GPU.
 * The parameters themselves stay fp32 (the optimizer's master copy); each
 * unit keeps a 16-bit copy, made on first use after the parameters change
 * (mt_model_params_changed). Bias gradients are summed from the fp32
 * output gradient. */
#include "models/model.h"
#include "ops/matmul_lowp.h"
#include "ops/ops.h"

void mt_model_params_changed(mt_model *m) { m->param_version++; }

/* The unit whose parameter buffer (or, *frozen set, frozen store) holds w. */
static int unit_of(const mt_model *m, const float *w, int *frozen) {
    for (int u = 0; u < m->layout.n_units; u++) {
        if (m->params[u] && w >= m->params[u] && w < m->params[u] + m->layout.units[u].numel) return *frozen = 0, u;
        if (m->frozen && m->frozen[u] && w >= m->frozen[u] && w < m->frozen[u] + m->layout.units[u].frozen_numel)
            return *frozen = 1, u;
    }
    mt_die("linear layer: weight pointer %p is in no unit's parameters", (const void *)w);
    return -1;
}

/* The 16-bit copy is refreshed if the parameters changed since it was made
 * (under ZeRO's mixed precision it is the 16-bit storage itself, current);
 * a frozen store's copy when the store was loaded. */
const uint16_t *mt_model_weight16(mt_model *m, const float *w) {
    int frozen;
    int u = unit_of(m, w, &frozen);
    if (frozen) {
        if (m->frozen16_version[u] != m->frozen_version) {
            size_t nf = m->layout.units[u].frozen_numel;
            if (m->precision == MT_BF16) op_to_16(m->be, MT_BF16, m->frozen16[u], m->frozen[u], nf);
            else op_to_16(m->be, MT_FP16, m->frozen16[u], m->frozen[u], nf);
            m->frozen16_version[u] = m->frozen_version;
        }
        return m->frozen16[u] + (w - m->frozen[u]);
    }
    size_t n = m->layout.units[u].numel;
    if (m->w16_version[u] != m->param_version) {
        if (m->precision == MT_BF16) op_to_16(m->be, MT_BF16, m->w16[u], m->params[u], n);
        else op_to_16(m->be, MT_FP16, m->w16[u], m->params[u], n);
        m->w16_version[u] = m->param_version;
    }
    return m->w16[u] + (w - m->params[u]);
}

/* fp16: x rounded to fp16 and back, into dst (fp32). */
static const float *fp16_rounded(mt_model *m, float *dst, const float *x, size_t n) {
    op_to_16(m->be, MT_FP16, m->op16[0], x, n);
    op_from_16(m->be, MT_FP16, dst, m->op16[0], n);
    return dst;
}

static const float *fp16_weight(mt_model *m, const float *w, size_t n) {
    op_from_16(m->be, MT_FP16, m->wbuf, mt_model_weight16(m, w), n);
    return m->wbuf;
}

void mt_linear_forward(mt_model *m, float *out, const float *inp, const float *w, const float *bias, int N, int C,
                       int OC) {
    size_t ni = (size_t)N * C, nw = (size_t)OC * C;
    switch (m->precision) {
    case MT_BF16: mt_linear_forward_keep16(m, out, inp, m->op16[0], w, bias, N, C, OC); break;
    case MT_FP16:
        op_matmul_forward(m->be, out, fp16_rounded(m, m->opf[0], inp, ni), fp16_weight(m, w, nw), bias, N, C, OC);
        break;
    default: op_matmul_forward(m->be, out, inp, w, bias, N, C, OC);
    }
}

void mt_linear_forward_keep16(mt_model *m, float *out, const float *inp, uint16_t *inp16, const float *w,
                              const float *bias, int N, int C, int OC) {
    op_to_16(m->be, MT_BF16, inp16, inp, (size_t)N * C);
    mt_linear_forward16(m, out, inp16, w, bias, N, C, OC);
}

void mt_linear_forward16(mt_model *m, float *out, const uint16_t *inp16, const float *w, const float *bias, int N,
                         int C, int OC) {
    if (m->precision != MT_BF16) mt_die("mt_linear_forward16: the model's precision is not bf16");
    op_matmul_forward_bf16(m->be, out, inp16, mt_model_weight16(m, w), bias, N, C, OC);
}

/* bf16: the output gradient dout16 and (for dw) the input inp16 already in bf16. */
static void backward_bf16(mt_model *m, float *dinp, float *dw, const mt_bf16 *dout16, const mt_bf16 *inp16,
                          const float *w, int N, int C, int OC, int flags) {
    op_matmul_backward_bf16(m->be, dinp, dw, NULL, dout16, inp16, dinp ? mt_model_weight16(m, w) : NULL, N, C, OC,
                            flags);
}

void mt_linear_backward_dout_bf16(mt_model *m, float *dinp, float *dw, const mt_bf16 *dout, const float *inp,
                                  const float *w, int N, int C, int OC, int flags) {
    if (m->precision != MT_BF16) mt_die("mt_linear_backward_dout_bf16: the model's precision is not bf16");
    if (dw) op_to_16(m->be, MT_BF16, m->op16[0], inp, (size_t)N * C);
    backward_bf16(m, dinp, dw, dout, m->op16[0], w, N, C, OC, flags);
}

void mt_linear_backward_kept16(mt_model *m, float *dinp, float *dw, float *dbias, const float *dout,
                               const uint16_t *inp16, const float *w, int N, int C, int OC, int flags) {
    if (m->precision != MT_BF16) mt_die("mt_linear_backward_kept16: the model's precision is not bf16");
    if (dinp || dw) {
        op_to_16(m->be, MT_BF16, m->op16[1], dout, (size_t)N * OC);
        backward_bf16(m, dinp, dw, m->op16[1], inp16, w, N, C, OC, flags);
    }
    if (dbias) op_matmul_backward(m->be, NULL, NULL, dbias, dout, NULL, NULL, N, C, OC, 0);
}

void mt_linear_backward(mt_model *m, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                        const float *w, int N, int C, int OC, int flags) {
    if (m->precision == MT_FP32 || (!dinp && !dw)) {
        op_matmul_backward(m->be, dinp, dw, dbias, dout, inp, w, N, C, OC, flags);
        return;
    }
    size_t ni = (size_t)N * C, no = (size_t)N * OC, nw = (size_t)OC * C;
    if (m->precision == MT_BF16) { /* the input rounded here, then as when its bf16 form is kept */
        if (dw) op_to_16(m->be, MT_BF16, m->op16[0], inp, ni);
        mt_linear_backward_kept16(m, dinp, dw, dbias, dout, m->op16[0], w, N, C, OC, flags);
        return;
    }
    const float *d = fp16_rounded(m, m->opf[1], dout, no);
    const float *x = dw ? fp16_rounded(m, m->opf[0], inp, ni) : NULL;
    op_matmul_backward(m->be, dinp, dw, NULL, d, x, dinp ? fp16_weight(m, w, nw) : NULL, N, C, OC, flags);
    if (dbias) op_matmul_backward(m->be, NULL, NULL, dbias, dout, NULL, NULL, N, C, OC, 0);
}
