/* Family-neutral pieces the families' unit forwards and backwards share
 * (models/unit_ops.c): GEMMs at the run's precision through the profile,
 * the tensor-parallel f/g operators on the residual stream, and the output
 * layer (logits, fused softmax + cross-entropy, vocabulary-parallel under
 * tp). */
#ifndef MT_MODELS_UNIT_OPS_H
#define MT_MODELS_UNIT_OPS_H
#include "models/model.h"

/* mt_linear_forward / _backward (models/linear.c) with GEMM time and FLOPs. */
void mt_unit_linear_forward(mt_model *m, float *out, const float *inp, const float *w, const float *bias, int N, int C,
                            int OC);
void mt_unit_linear_backward(mt_model *m, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                             const float *w, int N, int C, int OC, int flags);
void mt_unit_linear_backward_dout_bf16(mt_model *m, float *dinp, float *dw, const mt_bf16 *dout, const float *inp,
                                       const float *w, int N, int C, int OC, int flags);
/* The bf16 copy that linear layer (u, k)'s training forward will multiply as its input inp (N x C), kept for
 * its backward (models/act_compress.c), for the kernel producing inp to write instead of inp; NULL: write inp. */
uint16_t *mt_unit_linear_input16(mt_model *m, int u, int k, const mt_fwd_ctx *fc, const float *inp, int N, int C);
void mt_unit_linear_backward_kept16(mt_model *m, float *dinp, float *dw, float *dbias, const float *dout,
                                    const uint16_t *inp16, const float *w, int N, int C, int OC, int flags);
/* The linear layer whose weight is declared tensor k of unit u (OC output
 * rows: tensor k and, for a fused GEMM such as Llama's q|k|v, the tensors
 * declared after it whose rows follow), with the adapters attached to each
 * of them (models/lora.h). A frozen weight gets no weight gradient: its
 * backward computes the input gradient only. fc: dropout of the adapters. */
void mt_unit_linear_fwd(mt_model *m, int u, int k, const mt_fwd_ctx *fc, float *out, const float *inp, const float *bias,
                        int N, int C, int OC);
void mt_unit_linear_bwd(mt_model *m, int u, int k, const mt_fwd_ctx *fc, float *dinp, float *dbias, const float *dout,
                        const float *inp, int N, int C, int OC, int flags);
/* Residual-stream rows held here (N, or N/tp under sequence parallelism),
 * and the first one's row index in the microbatch. */
int mt_unit_resid_n(const mt_model *m);
size_t mt_unit_resid_row0(const mt_model *m);
/* Context parallelism: 1 if the rows' positions come from acts.pos (packed
 * documents, or a cp rank's chunks of the sequence) rather than row % T;
 * the sequence length (acts.T x cp); and the residual-stream dropout of
 * (layer, site) on the rows held here, keyed by each row's (sample,
 * position in the sequence) whatever rows the rank holds. */
int mt_unit_positions_at(const mt_model *m);
int mt_unit_seq_len(const mt_model *m);
void mt_unit_dropout_rows(const mt_model *m, float *x, const mt_dropout *d);
/* f/g (comm/tp.h) through the profile: the rows of all tp ranks
 * (sequence parallelism; else `local` itself), and the sum of the ranks'
 * partial outputs (reduce-scattered to this rank's rows under sequence
 * parallelism). */
const float *mt_unit_tp_gather(mt_model *m, const float *local, float *buf);
void mt_unit_tp_scatter(mt_model *m, float *full);
/* The output layer's weight: a tensor of the output unit, or the tensor it
 * declares shared (a head tied to the embedding); *unit receives the unit
 * whose parameters and gradient hold it, *decl its declared index there
 * (mt_model_tensor_data / _grad). `own` is the output unit's own
 * head tensor (used when nothing is shared; GPT-2 always shares: -1). */
const mt_tensor *mt_unit_output_weight(const mt_model *m, int own, int *unit, int *decl);
/* The output layer on x (the final norm's output, this rank's rows): logits
 * over this rank's Vl vocabulary rows of w, the per-row losses, and with
 * dlogits_scale != 0 dL/dlogits for mt_unit_logits_backward. Returns the
 * loss sum. */
double mt_unit_logits_loss(mt_model *m, const float *x, const float *w, int Vl, float dlogits_scale);
/* Its backward: dw (+)= (flags as mt_linear_backward) and gs.dln = dL/dx of
 * this rank's rows (summed over tp). */
void mt_unit_logits_backward(mt_model *m, const float *x, const float *w, float *dw, int Vl, int flags);

#endif
