#include "parallel/tp.h"
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
