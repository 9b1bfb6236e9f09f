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

int mt_device_kind_parse(const char *name, mt_device_kind *out) {
    if (!strcmp(name, "cpu")) *out = MT_DEVICE_CPU;
    else if (!strcmp(name, "cuda")) *out = MT_DEVICE_CUDA;
    else return -1;
    return 0;
}

/* The CUDA backend's entry points. Weak here so that the CPU build links
 * without CUDA and refuses {device} cuda; src/cuda/backend.cu (linked into
 * the `make gpu` and `make gpu-emu` binaries) defines the real ones. */
__attribute__((weak)) int mt_cuda_backend_open(mt_backend *be, int local_rank, int gpus_per_node, mt_error *err) {
    (void)be, (void)local_rank, (void)gpus_per_node;
    return mt_errorf(err, "{device} cuda: this meshtrain was built without CUDA: build it with `make gpu` (a GPU "
                          "machine) or `make gpu-emu` (the CPU emulation), or use {device} cpu");
}
__attribute__((weak)) void mt_cuda_backend_close(mt_backend *be) { (void)be; }
__attribute__((weak)) void mt_cuda_backend_sync(mt_backend *be) { (void)be; }
__attribute__((weak)) int mt_cuda_backend_used(mt_backend *be, size_t *used) {
    (void)be, (void)used;
    return -1;
}

int mt_backend_device_used(mt_backend *be, size_t *used) {
    return be->kind == MT_DEVICE_CPU ? -1 : mt_cuda_backend_used(be, used);
}

int mt_backend_open_local(mt_backend *be, mt_device_kind kind, mt_gemm_lib gemm, int local_rank, int gpus_per_node,
                          mt_error *err) {
    *be = mt_backend_cpu(gemm);
    if (kind == MT_DEVICE_CPU) return 0;
    return mt_cuda_backend_open(be, local_rank, gpus_per_node, err);
}

int mt_backend_open(mt_backend *be, mt_device_kind kind, mt_gemm_lib gemm, mt_error *err) {
    return mt_backend_open_local(be, kind, gemm, 0, 0, err);
}

void mt_backend_close(mt_backend *be) {
    if (be->kind == MT_DEVICE_CUDA) mt_cuda_backend_close(be);
}

void mt_backend_sync(mt_backend *be) {
    if (be->kind == MT_DEVICE_CUDA) mt_cuda_backend_sync(be);
}

mt_backend mt_backend_cpu(mt_gemm_lib gemm) {
    mt_backend be = {.kind = MT_DEVICE_CPU, .gemm = gemm, .nthreads = omp_get_max_threads(), .device_index = -1};
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
