/* core/mem arenas (the model's activations, models/model.c): a measuring
 * pass sums the 64-byte-aligned sizes, open makes one allocation of that
 * size through the placement's allocator, the carving pass hands out
 * aligned, zeroed, non-overlapping buffers in the same order; the category
 * counts the bytes asked for, scratch the alignment gaps, mt_mem.arena shows
 * one allocation; a take beyond the measured size dies (in a child); drop
 * frees it through the allocator. */
#include <stdint.h>
#include <sys/wait.h>
#include "core/mem.h"
#include "testlib.h"

static int allocs, frees;
static void *fake_alloc(void *ctx, mt_mem_place pl, size_t bytes) {
    (void)ctx, (void)pl;
    allocs++;
    void *p = aligned_alloc(256, (bytes + 255) / 256 * 256); /* as cudaMalloc: 256-byte aligned, here zeroed */
    if (p) memset(p, 0, bytes);
    return p;
}
static void fake_free(void *ctx, mt_mem_place pl, void *p) {
    (void)ctx, (void)pl;
    frees++;
    free(p);
}

static const size_t sizes[] = {100, 64, 24, 4096, 1};

static void carve(mt_mem_arena *a, char **out) {
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) out[i] = mt_mem_arena_take(a, sizes[i], "buffer");
}

int main(void) {
    mt_mem mem;
    memset(&mem, 0, sizeof mem);
    mt_mem_allocator fake = {fake_alloc, fake_free, NULL};
    mem.allocator = &fake;
    mt_mem_arena a = {0};
    char *p[5];
    carve(&a, p);
    CHECK(!p[0] && a.cap == 128 + 64 + 64 + 4096 + 64 && a.taken == 100 + 64 + 24 + 4096 + 1 && a.buffers == 5,
          "measuring: aligned sizes summed, nothing allocated (cap %zu)", a.cap);
    CHECK(allocs == 0 && mt_mem_total(&mem) == 0, "no allocation while measuring");
    mt_mem_arena_open(&mem, &a, MT_PLACE_DEVICE, MT_MEM_ACTS, "test arena");
    carve(&a, p);
    CHECK(allocs == 1, "one allocation through the device allocator");
    int ok = 1;
    for (int i = 0; i < 5; i++) {
        ok &= ((uintptr_t)p[i] & 63) == 0;
        for (size_t k = 0; k < sizes[i]; k++) ok &= p[i][k] == 0;
        memset(p[i], 0x5a, sizes[i]);
        if (i) ok &= p[i] >= p[i - 1] + sizes[i - 1];
    }
    CHECK(ok, "buffers aligned, zeroed, in order, not overlapping");
    CHECK(mem.cur[MT_MEM_ACTS] == a.taken && mem.cur[MT_MEM_SCRATCH] == a.cap - a.taken &&
              mt_mem_placed_total(&mem, MT_PLACE_DEVICE) == a.cap,
          "the category holds the bytes asked for, scratch the gaps: %zu + %zu", mem.cur[MT_MEM_ACTS],
          mem.cur[MT_MEM_SCRATCH]);
    CHECK(mem.arena[MT_MEM_ACTS].count == 1 && mem.arena[MT_MEM_ACTS].bytes == a.cap &&
              mem.arena[MT_MEM_ACTS].buffers == 5,
          "the accounting shows the arena");

    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) { /* one take more than measured */
        freopen("/dev/null", "w", stderr);
        mt_mem_arena_take(&a, 1, "one too many");
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(!(WIFEXITED(status) && WEXITSTATUS(status) == 0), "a take beyond the measured size is refused");

    mt_mem_arena_drop(&a);
    CHECK(frees == 1 && !a.base && mem.arena[MT_MEM_ACTS].count == 0 && mem.arena[MT_MEM_ACTS].bytes == 0,
          "dropped through the allocator");
    mt_mem_arena_drop(&a); /* a no-op now */
    CHECK(frees == 1, "dropping twice frees once");
    TEST_MAIN_END("test_mem_arena");
}
