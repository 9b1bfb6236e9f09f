/* GPTQ over a whole model (`meshtrain quantize --method gptq`): block by
 * block, as the reference implementation runs it,
 *   1. the calibration samples' inputs of block l (the outputs of blocks
 *      0..l-1 already quantized) go through block l at full precision while
 *      the model's linear-input hook sums X^T X of every linear layer's input
 *      (one Hessian per GEMM: a fused q|k|v shares its input);
 *   2. under mpirun each rank takes samples rank, rank + world, ... and the
 *      Hessians are summed over the ranks (double), so every rank quantizes
 *      with the same H and gets the same codes;
 *   3. each linear weight of the block is quantized (quant/gptq.h) and the
 *      block's weights replaced by their dequantized values;
 *   4. the samples go through the quantized block: the next block's inputs.
 * Samples are consecutive windows of the model's seq_len tokens from the
 * start of the calibration shard. Embeddings, norms, biases and the output
 * layer stay fp32. */
#ifndef MT_TRAIN_GPTQ_RUN_H
#define MT_TRAIN_GPTQ_RUN_H
#include <stddef.h>
#include <stdint.h>
#include "comm/comm.h"
#include "interop/weights.h"
#include "quant/gptq.h"

/* Quantizes the blocks' linear weights of w in place (their values become
 * the dequantized ones); res[u][i] gets tensor i of unit u's result (n_units
 * arrays of n_tensors, zeroed where a tensor is not quantized: rows == 0).
 * tokens: the calibration shard (ntok tokens, each < vocab); samples >= 1.
 * Prints one progress line per block on rank 0 when verbose. */
int mt_gptq_run(mt_weights *w, const uint32_t *tokens, size_t ntok, int samples, const mt_gptq_opts *o,
                mt_comm *world, int verbose, mt_gptq_result ***res, mt_error *err);
/* Round-to-nearest on GPTQ's grid, the baseline GPTQ improves on: every 2-D
 * tensor of the blocks quantized with the identity as its Hessian (no error
 * feedback: each weight rounds to its group's grid), results as mt_gptq_run. */
int mt_gptq_rtn(mt_weights *w, const mt_gptq_opts *o, mt_gptq_result ***res, mt_error *err);
void mt_gptq_results_free(const mt_weights *w, mt_gptq_result **res);

#endif
