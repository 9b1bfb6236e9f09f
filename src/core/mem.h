/* Accounted allocation. Every long-lived buffer of the trainer is allocated
 * through mt_mem_alloc under a category, so each rank can report the bytes it
 * holds per category and tests can compare them with the ZeRO formulas.
 * Buffers are 64-byte aligned, zeroed and pre-touched (first touch of fresh
 * pages is several times slower than reuse, so it must not happen in a step). */
#ifndef MT_CORE_MEM_H
#define MT_CORE_MEM_H
#include <stddef.h>

#define MT_MEM_PLACE_SLOTS 3 /* MT_PLACE_N */
typedef enum {
    MT_MEM_PARAMS = 0, /* parameters used in compute (and fp32 masters in fp32 mode) */
    MT_MEM_GRADS,      /* gradient buffers */
    MT_MEM_OPTIM,      /* optimizer state: moments, fp32 master copies */
    MT_MEM_ACTS,       /* activations kept for backward */
    MT_MEM_COMM,       /* communication buffers */
    MT_MEM_SCRATCH,    /* per-op workspaces, gathered-parameter buffers */
    MT_MEM_FROZEN,     /* frozen tensors at their storage precision (PEFT bases, {freeze}) */
    MT_MEM_NCAT
} mt_mem_cat;

/* Where a buffer lives. The CPU backend has one memory: every placement is
 * host memory, recorded under the placement it was asked for, so the
 * accounting a device backend will show (its device bytes, its pinned
 * staging buffers) is already visible and tested on the CPU. */
typedef enum {
    MT_PLACE_HOST = 0, /* host memory the CPU reads (data, checkpoints, host staging) */
    MT_PLACE_PINNED,   /* page-locked host memory a device copies from and to asynchronously */
    MT_PLACE_DEVICE,   /* the kernels' memory: tensors, their gradients, optimizer state, scratch */
    MT_PLACE_N
} mt_mem_place;

/* How a device backend allocates the placements it owns (device/backend.h
 * installs it); NULL in mt_mem: host memory for every placement. alloc
 * returns zeroed memory or NULL. */
typedef struct {
    void *(*alloc)(void *ctx, mt_mem_place pl, size_t bytes);
    void (*free)(void *ctx, mt_mem_place pl, void *p);
    void *ctx;
} mt_mem_allocator;

typedef struct {
    size_t cur[MT_MEM_NCAT]; /* bytes held per category, every placement together */
    size_t peak[MT_MEM_NCAT];
    size_t peak_total;
    size_t placed[MT_MEM_PLACE_SLOTS][MT_MEM_NCAT]; /* bytes held per placement and category */
    size_t placed_peak[MT_MEM_PLACE_SLOTS];         /* peak bytes per placement */
    const mt_mem_allocator *allocator;              /* a device backend's; NULL: host memory */
    struct {                                        /* per category, the arenas opened (mt_mem_arena) */
        size_t count, bytes, buffers;               /* allocations, their bytes, buffers carved from them */
    } arena[MT_MEM_NCAT];
} mt_mem;

const char *mt_mem_cat_name(mt_mem_cat c);
const char *mt_mem_place_name(mt_mem_place pl);
/* Host memory (MT_PLACE_HOST). */
void *mt_mem_alloc(mt_mem *m, mt_mem_cat cat, size_t bytes, const char *what);
void mt_mem_free(mt_mem *m, mt_mem_cat cat, void *p, size_t bytes);
/* Memory at placement pl, through m->allocator when it has one (else host
 * memory, aligned, zeroed and pre-touched as mt_mem_alloc's); freed with the
 * placement and category it was allocated with (a mismatch dies). */
void *mt_mem_alloc_at(mt_mem *m, mt_mem_place pl, mt_mem_cat cat, size_t bytes, const char *what);
void mt_mem_free_at(mt_mem *m, mt_mem_place pl, mt_mem_cat cat, void *p, size_t bytes);
/* Frees p of placement pl without touching the accounting (through the
 * allocator that made it: free() is wrong for device memory): the wholesale
 * release of a model's activations and scratch, whose counts are reset. */
void mt_mem_drop_at(mt_mem *m, mt_mem_place pl, void *p);
/* Bytes held at placement pl, every category together. */
size_t mt_mem_placed_total(const mt_mem *m, mt_mem_place pl);
size_t mt_mem_total(const mt_mem *m);
/* An arena: buffers carved one after another, each 64-byte aligned, from
 * one allocation made once -- no fragmentation, one free, and a layout the
 * accounting can show (mt_mem.arena). Sized by a first pass over the same
 * takes with base NULL (take only adds the aligned size to cap and returns
 * NULL); open then allocates cap bytes and the second pass carves in the same
 * order. Each take accounts its bytes under the arena's category, as a
 * buffer of its own would be; the alignment gaps between buffers are held
 * too and are accounted as MT_MEM_SCRATCH at open. */
typedef struct {
    char *base;              /* NULL: measuring */
    size_t cap, used, taken; /* bytes: allocated (aligned sizes), carved so far, asked for (measured) */
    size_t buffers;
    mt_mem_place pl;
    mt_mem_cat cat;
    mt_mem *mem;
} mt_mem_arena;
void *mt_mem_arena_take(mt_mem_arena *a, size_t bytes, const char *what);
/* Allocates the measured cap (the takes of the first pass) and rewinds. */
void mt_mem_arena_open(mt_mem *m, mt_mem_arena *a, mt_mem_place pl, mt_mem_cat cat, const char *what);
/* Frees the arena without touching the category counts, as mt_mem_drop_at
 * (the wholesale release of a model's activations, whose counts are reset);
 * its entry in mt_mem.arena goes. A no-op on an arena never opened. */
void mt_mem_arena_drop(mt_mem_arena *a);
/* Accounts bytes a library allocated itself (held 1) or released (held 0). */
void mt_mem_note(mt_mem *m, mt_mem_cat cat, size_t bytes, int held);

#endif
