/* All-to-all attention over a context-parallel group (DeepSpeed Ulysses;
 * {cp-mode} alltoall, issue 33). The rows of each sample are laid out as
 * ring attention's (models/ring_attention.h: chunks r and 2N-1-r of the 2N
 * on rank r). One all-to-all turns the rank's rows of every head into every
 * row of its N-th of the heads (query heads [r NH/N, (r+1) NH/N) and kv
 * heads [r NKV/N, ...), so NH and NKV must be multiples of N); the
 * one-process kernel runs on the whole sequence of those heads (causal,
 * GQA, dropout keyed by the global head, packed documents); a second
 * all-to-all brings the output back to the rank's rows. lse stays head-
 * sharded ([B][NH/N][T], the same floats as [B][NH][2c]). Backward moves
 * q|k|v, out and dout to heads again and dq|dk|dv back: 4 all-to-alls,
 * 2 in forward. */
#ifndef MT_MODELS_ALLTOALL_ATTENTION_H
#define MT_MODELS_ALLTOALL_ATTENTION_H
#include "models/ring_attention.h"

size_t mt_alltoall_attention_scratch_floats(mt_backend *be, const mt_cp *cp, int B, int c, int NH, int NKV, int HS);
void mt_alltoall_attention_forward(mt_backend *be, const mt_cp *cp, float *out, float *lse, const float *qkv, int B, int c,
                                   int NH, int NKV, int HS, const mt_attn_dropout *drop, float *scratch);
void mt_alltoall_attention_backward(mt_backend *be, const mt_cp *cp, float *dqkv, const float *dout, const float *qkv,
                                    const float *out, const float *lse, int B, int c, int NH, int NKV, int HS,
                                    const mt_attn_dropout *drop, float *scratch);

/* Context parallelism's attention in cp->mode (ring or all-to-all): what the families call. */
size_t mt_cp_attention_scratch_floats(mt_backend *be, const mt_cp *cp, int B, int c, int NH, int NKV, int HS);
void mt_cp_attention_forward(mt_backend *be, const mt_cp *cp, float *out, float *lse, const float *qkv, int B, int c,
                             int NH, int NKV, int HS, const mt_attn_dropout *drop, float *scratch);
void mt_cp_attention_backward(mt_backend *be, const mt_cp *cp, float *dqkv, const float *dout, const float *qkv,
                              const float *out, const float *lse, int B, int c, int NH, int NKV, int HS,
                              const mt_attn_dropout *drop, float *scratch);

#endif
