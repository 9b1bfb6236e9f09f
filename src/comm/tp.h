/* Tensor parallelism's communication, as the model sees it (Megatron-LM's
 * "mappings"). A transformer block runs most of its work on a slice of the
 * heads and of the MLP width; activations cross into and out of that sliced
 * region through two conjugate operators:
 *
 *   enter (Megatron's f):  forward: identity          backward: all-reduce
 *   exit  (Megatron's g):  forward: all-reduce        backward: identity
 *
 * With sequence parallelism the replicated regions around them (LayerNorm,
 * dropout, residual adds) are split along the token rows instead, and the
 * operators become
 *
 *   enter:  forward: all-gather of the rows      backward: reduce-scatter
 *   exit:   forward: reduce-scatter of the rows  backward: all-gather
 *
 * so the backward of each is the forward of the other: mt_tp_gather serves
 * enter-forward and exit-backward, mt_tp_scatter exit-forward and
 * enter-backward. Rank r of the tp group holds token rows [r*n, (r+1)*n) of
 * the microbatch's N = B*T rows (n = N/tp) in the sequence-parallel regions.
 *
 * A NULL mt_tp, or one of size 1, makes every operator the identity. */
#ifndef MT_COMM_TP_H
#define MT_COMM_TP_H
#include <stddef.h>
#include "comm/comm.h"

typedef struct {
    mt_comm *comm;          /* the tp group (borrowed from the mesh) */
    int size, rank;
    int sequence_parallel;  /* {sequence-parallel} */
    mt_comm *pieces;        /* the ranks holding the same piece of a tensor cut into fewer pieces than
                               tp ranks (nn/unit.h tp_replicas; kv heads when tp > kv heads): owned, or NULL */
    int piece_replicas;     /* ranks per piece group (1: none) */
} mt_tp;

static inline int mt_tp_size(const mt_tp *tp) { return tp ? tp->size : 1; }
static inline int mt_tp_sp(const mt_tp *tp) { return tp && tp->size > 1 && tp->sequence_parallel; }

/* Into the sliced region: the full [N, C] rows. Without sequence
 * parallelism the rows are replicated already and `local` itself is
 * returned; with it the ranks' [n, C] pieces are all-gathered into full_buf.
 * local_floats = n*C (N*C without sequence parallelism). */
const float *mt_tp_gather(const mt_tp *tp, const float *local, float *full_buf, size_t local_floats);
/* Out of the sliced region: every rank holds a partial sum of the full
 * [N, C] rows in `full` (full_floats = N*C); afterwards `full` holds the
 * summed rows, all of them (all-reduce) or, with sequence parallelism, this
 * rank's n rows at its start (reduce-scatter). */
void mt_tp_scatter(const mt_tp *tp, float *full, size_t full_floats);
/* The vocabulary-parallel cross-entropy's statistics: every rank's `count`
 * floats into recv (size * count, rank order). */
void mt_tp_allgather(const mt_tp *tp, const float *send, float *recv, size_t count);
/* Sum over tp of a gradient the ranks hold partially (sequence parallelism:
 * LayerNorm and row-parallel bias gradients from each rank's rows). */
void mt_tp_allreduce(const mt_tp *tp, float *x, size_t count);
/* The piece groups of `replicas` consecutive tp ranks (collective over
 * tp), and the sum of a gradient over this rank's group: each rank of a
 * group computed part of its shared piece's gradient. */
int mt_tp_init_pieces(mt_tp *tp, int replicas, mt_error *err);
void mt_tp_pieces_allreduce(const mt_tp *tp, float *x, size_t count);
void mt_tp_free_pieces(mt_tp *tp);

#endif
