/* core/mem placements: bytes are counted per placement and category (and
 * in the category totals as before); without an allocator every placement
 * is host memory, aligned and zeroed; a backend's allocator (installed with
 * mt_backend_attach_mem) gets the device and pinned buffers, never the host
 * ones; freeing with another placement than the allocation's dies with one
 * line (in a child process). */
#include <stdint.h>
#include <sys/wait.h>
#include "core/mem.h"
#include "testlib.h"

static int fake_allocs[MT_PLACE_N], fake_frees[MT_PLACE_N];
static void *fake_alloc(void *ctx, mt_mem_place pl, size_t bytes) {
    (void)ctx;
    fake_allocs[pl]++;
    return calloc(1, bytes);
}
static void fake_free(void *ctx, mt_mem_place pl, void *p) {
    (void)ctx;
    fake_frees[pl]++;
    free(p);
}

int main(void) {
    mt_mem mem;
    memset(&mem, 0, sizeof mem);
    float *h = mt_mem_alloc(&mem, MT_MEM_ACTS, 100, "host");
    float *d = mt_mem_alloc_at(&mem, MT_PLACE_DEVICE, MT_MEM_PARAMS, 200, "device");
    float *pn = mt_mem_alloc_at(&mem, MT_PLACE_PINNED, MT_MEM_COMM, 300, "pinned");
    CHECK(((uintptr_t)d & 63) == 0 && d[49] == 0.0f, "CPU device memory is aligned, zeroed host memory");
    CHECK(mem.placed[MT_PLACE_HOST][MT_MEM_ACTS] == 100 && mem.placed[MT_PLACE_DEVICE][MT_MEM_PARAMS] == 200 &&
              mem.placed[MT_PLACE_PINNED][MT_MEM_COMM] == 300,
          "bytes per placement and category");
    CHECK(mem.cur[MT_MEM_PARAMS] == 200 && mt_mem_total(&mem) == 600, "category totals count every placement");
    CHECK(mt_mem_placed_total(&mem, MT_PLACE_DEVICE) == 200 && mem.placed_peak[MT_PLACE_DEVICE] == 200, "device total");
    mt_mem_free_at(&mem, MT_PLACE_DEVICE, MT_MEM_PARAMS, d, 200);
    CHECK(mt_mem_placed_total(&mem, MT_PLACE_DEVICE) == 0 && mem.placed_peak[MT_PLACE_DEVICE] == 200,
          "freed, the peak stays");
    mt_mem_free(&mem, MT_MEM_ACTS, h, 100);
    mt_mem_free_at(&mem, MT_PLACE_PINNED, MT_MEM_COMM, pn, 300);
    CHECK(mt_mem_total(&mem) == 0, "all freed");

    /* a device backend's allocator */
    mt_mem_allocator fake = {fake_alloc, fake_free, NULL};
    mt_backend be = mt_backend_cpu(MT_GEMM_DEFAULT);
    be.allocator = &fake;
    mt_backend_attach_mem(&be, &mem);
    d = mt_mem_alloc_at(&mem, MT_PLACE_DEVICE, MT_MEM_GRADS, 64, "device");
    pn = mt_mem_alloc_at(&mem, MT_PLACE_PINNED, MT_MEM_COMM, 64, "pinned");
    h = mt_mem_alloc(&mem, MT_MEM_SCRATCH, 64, "host");
    CHECK(fake_allocs[MT_PLACE_DEVICE] == 1 && fake_allocs[MT_PLACE_PINNED] == 1 && fake_allocs[MT_PLACE_HOST] == 0,
          "the allocator gets device and pinned buffers only");
    mt_mem_free_at(&mem, MT_PLACE_DEVICE, MT_MEM_GRADS, d, 64);
    mt_mem_free_at(&mem, MT_PLACE_PINNED, MT_MEM_COMM, pn, 64);
    mt_mem_free(&mem, MT_MEM_SCRATCH, h, 64);
    CHECK(fake_frees[MT_PLACE_DEVICE] == 1 && fake_frees[MT_PLACE_PINNED] == 1 && mt_mem_total(&mem) == 0,
          "and frees them");

    /* a free with the wrong placement */
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        freopen("/dev/null", "w", stderr);
        mt_mem m2;
        memset(&m2, 0, sizeof m2);
        void *p = mt_mem_alloc_at(&m2, MT_PLACE_DEVICE, MT_MEM_PARAMS, 128, "device");
        mt_mem_free(&m2, MT_MEM_PARAMS, p, 128);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(!(WIFEXITED(status) && WEXITSTATUS(status) == 0), "a free with another placement is refused");
    TEST_MAIN_END("test_mem_placement");
}
