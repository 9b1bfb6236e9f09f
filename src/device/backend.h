/* The backend context every kernel takes (ops/ and, later, the CUDA
 * kernels): which device runs it and that device's handles. One per process,
 * made by the trainer (or a test) and passed down as `be`; nothing in it is
 * global. The CPU backend wraps today's ops/: the fp32 GEMM library, the
 * thread count its OpenMP kernels and their per-thread scratch are sized
 * for, and the scalars its reductions accumulate. A CUDA backend fills
 * `stream` and `gemm_handle` (cudaStream_t, cublasHandle_t) and a kernel
 * table (ops/kernel_table.h) behind the same op_* names. */
#ifndef MT_DEVICE_BACKEND_H
#define MT_DEVICE_BACKEND_H
#include <stddef.h>
#include "core/error.h"
#include "core/mem.h"

typedef enum { MT_DEVICE_CPU = 0, MT_DEVICE_CUDA } mt_device_kind;

/* The fp32 GEMM library of the CPU backend ({gemm}): oneDNN's sgemm by
 * default, measured 5-14% faster than OpenBLAS's on every linear shape of
 * the model on this CPU (docs/usage.md, "The fp32 GEMM library"). The two
 * round differently, so results are reproducible per library. */
typedef enum { MT_GEMM_ONEDNN = 0, MT_GEMM_OPENBLAS } mt_gemm_lib;
#define MT_GEMM_DEFAULT MT_GEMM_ONEDNN
/* "onednn" | "openblas"; 0, or -1 for any other name. */
int mt_gemm_lib_parse(const char *name, mt_gemm_lib *out);
const char *mt_gemm_lib_name(mt_gemm_lib lib);

/* The scalars a step's reductions accumulate in the backend (on a GPU:
 * device memory, read by the host at a sync point, mt_backend_read_scalars).
 * Each is a double, summed in the order the kernels run, so the CPU values
 * are the ones the host loops computed before. */
typedef enum {
    MT_SCALAR_LOSS_SUM = 0,     /* sum of per-token losses of the step's microbatches */
    MT_SCALAR_GRAD_SUMSQ,       /* sum of squares of the gradients this rank counts */
    MT_SCALAR_NONFINITE,        /* != 0: a gradient element was Inf or NaN */
    MT_SCALAR_PARAMS_NONFINITE, /* != 0: an updated parameter is Inf or NaN */
    MT_SCALAR_COUNT
} mt_scalar;

struct mt_kernel_table; /* ops/kernel_table.h */
struct mt_comm_device;  /* comm/comm.h: a device's hooks for staged collectives */

typedef struct mt_backend {
    mt_device_kind kind;
    mt_gemm_lib gemm;  /* CPU: the fp32 GEMM library */
    int nthreads;      /* CPU: OpenMP threads of the kernels; per-thread scratch is sized for this many */
    void *stream;      /* CUDA: the cudaStream_t kernels and copies are queued on (NULL on the CPU) */
    void *gemm_handle; /* CUDA: the cublasHandle_t bound to stream (NULL on the CPU) */
    /* NULL: the CPU kernels of ops/; else the table of another device's
     * kernels, which each op_* hands its call to (ops/kernel_table.h). */
    const struct mt_kernel_table *kernels;
    /* How this device allocates MT_PLACE_DEVICE / MT_PLACE_PINNED memory
     * (cudaMalloc, cudaMallocHost); NULL: host memory (the CPU backend). */
    const mt_mem_allocator *allocator;
    double scalars[MT_SCALAR_COUNT]; /* accumulated by ops (op_scalar_*); host-readable on the CPU */
    /* CUDA: the copy and event hooks comm/ stages collectives of device buffers with (installed by the
       trainer, mt_comm_set_device); NULL on the CPU */
    const struct mt_comm_device *comm_device;
    int device_index; /* CUDA: the GPU this process drives (cudaSetDevice); -1 on the CPU */
    /* CUDA: attention may multiply 16-bit operands -- the tensor-core flash kernels (bf16 q, k, v, p; fp32
       softmax and sums) where the head size allows (a multiple of 16 up to 128), else TF32 score and value
       GEMMs -- finer than or as fine as the bf16 GEMMs around it; the trainer sets it under {precision}
       bf16. 0: full fp32 (fp32 runs keep the CPU engine's numerics). Ignored on the CPU. */
    int attention_mixed;
    int device_count; /* CUDA: the GPUs this process sees */
} mt_backend;

/* The CPU backend on library gemm with the current OpenMP thread count. */
mt_backend mt_backend_cpu(mt_gemm_lib gemm);
/* The backend of device kind ({device} cpu | cuda): the CPU's, or the CUDA
 * backend (src/cuda/backend.cu: a stream, a GEMM handle, its kernel table
 * and allocator) in a build that has one (`make gpu`, `make gpu-emu`);
 * elsewhere {device} cuda is refused with one line. 0 or -1 with err set. */
int mt_backend_open(mt_backend *be, mt_device_kind kind, mt_gemm_lib gemm, mt_error *err);
/* The same for rank local_rank of its node: a CUDA backend drives GPU
 * local_rank % gpus_per_node (gpus_per_node 0: the GPUs it sees; more
 * than it sees is refused), so the ranks of a node spread over its GPUs and
 * share them when there are more ranks than GPUs. */
int mt_backend_open_local(mt_backend *be, mt_device_kind kind, mt_gemm_lib gemm, int local_rank, int gpus_per_node,
                          mt_error *err);
/* Releases a device backend (after every buffer of its memory was freed). */
void mt_backend_close(mt_backend *be);
/* Waits for the work queued on the device: the host is about to write or
 * read memory its kernels use (a no-op on the CPU). */
void mt_backend_sync(mt_backend *be);
/* The device memory in use on this process's GPU (cudaMemGetInfo's total
 * less free: every allocation on that GPU, the CUDA context's own too),
 * after the queued work: 0 and *used, or -1 on the CPU. Not for the hot path. */
int mt_backend_device_used(mt_backend *be, size_t *used);
/* "cpu" | "cuda": 0, or -1 for any other name. */
int mt_device_kind_parse(const char *name, mt_device_kind *out);
const char *mt_device_kind_name(mt_device_kind k);
/* Makes mem allocate through the backend's allocator (every later
 * mt_mem_alloc_at of a device or pinned buffer). */
void mt_backend_attach_mem(const mt_backend *be, mt_mem *mem);
/* Sets the scalars to 0 (the start of a step); one of them. */
void mt_backend_clear_scalars(mt_backend *be);
void mt_backend_clear_scalar(mt_backend *be, mt_scalar k);
/* The sync point: waits for the kernels queued so far and copies the
 * scalars to out[MT_SCALAR_COUNT] (the CPU's are already there). */
void mt_backend_read_scalars(mt_backend *be, double *out);

#endif
