/* Accounted allocation. Every long-lived buffer of the trainer is allocated
 * through mt_mem_alloc under a category, so each rank can report the bytes it
 * holds per category and tests can compare them with the ZeRO formulas.
 * Buffers are 64-byte aligned, zeroed and pre-touched (first touch of fresh
 * pages is several times slower than reuse, so it must not happen in a step). */
#ifndef MT_CORE_MEM_H
#define MT_CORE_MEM_H
#include <stddef.h>

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

typedef struct {
    size_t cur[MT_MEM_NCAT];
    size_t peak[MT_MEM_NCAT];
    size_t peak_total;
} mt_mem;

const char *mt_mem_cat_name(mt_mem_cat c);
void *mt_mem_alloc(mt_mem *m, mt_mem_cat cat, size_t bytes, const char *what);
void mt_mem_free(mt_mem *m, mt_mem_cat cat, void *p, size_t bytes);
size_t mt_mem_total(const mt_mem *m);
/* Accounts bytes a library allocated itself (held 1) or released (held 0). */
void mt_mem_note(mt_mem *m, mt_mem_cat cat, size_t bytes, int held);

#endif
