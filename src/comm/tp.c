#include "comm/tp.h"
#include <string.h>

const float *mt_tp_gather(const mt_tp *tp, const float *local, float *full_buf, size_t local_floats) {
    if (!mt_tp_sp(tp)) return local;
    mt_comm_allgather(tp->comm, local, full_buf, local_floats * sizeof(float));
    return full_buf;
}

void mt_tp_scatter(const mt_tp *tp, float *full, size_t full_floats) {
    if (mt_tp_size(tp) == 1) return;
    if (tp->sequence_parallel) mt_comm_reduce_scatter(tp->comm, full, full, full_floats / (size_t)tp->size);
    else mt_comm_allreduce(tp->comm, full, full, full_floats);
}

void mt_tp_allgather(const mt_tp *tp, const float *send, float *recv, size_t count) {
    if (mt_tp_size(tp) == 1) {
        if (recv != send) memcpy(recv, send, count * sizeof(float));
        return;
    }
    mt_comm_allgather(tp->comm, send, recv, count * sizeof(float));
}

void mt_tp_allreduce(const mt_tp *tp, float *x, size_t count) {
    if (mt_tp_size(tp) > 1) mt_comm_allreduce(tp->comm, x, x, count);
}

int mt_tp_init_pieces(mt_tp *tp, int replicas, mt_error *err) {
    tp->piece_replicas = 1;
    if (mt_tp_size(tp) == 1 || replicas <= 1) return 0;
    if (tp->size % replicas) return mt_errorf(err, "tp %d cannot hold pieces on groups of %d ranks", tp->size, replicas);
    if (mt_comm_split(tp->comm, tp->rank / replicas, tp->rank, "tp pieces", &tp->pieces, err)) return -1;
    tp->piece_replicas = replicas;
    return 0;
}

void mt_tp_pieces_allreduce(const mt_tp *tp, float *x, size_t count) {
    if (tp && tp->pieces) mt_comm_allreduce(tp->pieces, x, x, count);
}

void mt_tp_free_pieces(mt_tp *tp) {
    mt_comm_free(tp->pieces);
    tp->pieces = NULL;
    tp->piece_replicas = 1;
}
