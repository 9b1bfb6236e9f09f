#include "device/backend.h"
#include <omp.h>
#include <string.h>

int mt_gemm_lib_parse(const char *name, mt_gemm_lib *out) {
    if (!strcmp(name, "onednn")) *out = MT_GEMM_ONEDNN;
    else if (!strcmp(name, "openblas")) *out = MT_GEMM_OPENBLAS;
    else return -1;
    return 0;
}

const char *mt_gemm_lib_name(mt_gemm_lib lib) { return lib == MT_GEMM_OPENBLAS ? "openblas" : "onednn"; }

const char *mt_device_kind_name(mt_device_kind k) { return k == MT_DEVICE_CUDA ? "cuda" : "cpu"; }

mt_backend mt_backend_cpu(mt_gemm_lib gemm) {
    mt_backend be = {.kind = MT_DEVICE_CPU, .gemm = gemm, .nthreads = omp_get_max_threads()};
    return be;
}

void mt_backend_attach_mem(const mt_backend *be, mt_mem *mem) { mem->allocator = be->allocator; }

void mt_backend_clear_scalars(mt_backend *be) {
    for (int i = 0; i < MT_SCALAR_COUNT; i++) be->scalars[i] = 0.0;
}

void mt_backend_clear_scalar(mt_backend *be, mt_scalar k) { be->scalars[k] = 0.0; }

void mt_backend_read_scalars(mt_backend *be, double *out) {
    /* The CPU kernels have run when they return; a device backend waits
     * for its stream and copies here. */
    for (int i = 0; i < MT_SCALAR_COUNT; i++) out[i] = be->scalars[i];
}
