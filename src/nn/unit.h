/* Tensors and units: what the layers above the model see of it.
 *
 * A model is an ordered list of units (FSDP's flat parameters): an input
 * unit, n_layer block units, an output unit that ends in the loss. Each unit
 * owns one flat fp32 parameter buffer (and a gradient buffer of the same
 * shape) holding its tensors at fixed offsets. A tensor declares everything
 * ZeRO, the pipeline, the optimizers and the checkpoints need to know: its
 * name (the family's Hugging Face name), shape, how tensor parallelism cuts
 * it, weight decay, whether it is trained, and how it is initialised. A
 * tensor that another unit's tensor stands for (a head tied to the
 * embedding) is declared on the reading unit as a shared tensor, so nothing
 * above the model special-cases "the tied head". */
#ifndef MT_NN_UNIT_H
#define MT_NN_UNIT_H
#include <stddef.h>
#include <stdint.h>

/* Megatron tensor parallelism cuts a tensor one of three ways:
 *   REPLICATED  every tp rank holds all of it (norms, position tables, the
 *               biases of row-parallel layers);
 *   ROWS        output rows split (column-parallel linears, their biases, the
 *               vocabulary rows of an embedding). A tensor may stack blocks of
 *               rows that are cut separately -- GPT-2's c_attn holds q, k and
 *               v -- so a rank holds whole heads of each; the blocks may have
 *               unequal sizes (grouped-query attention);
 *   COLS        input columns split (row-parallel linears), matching the ROWS
 *               cut of the layer before. */
typedef enum { MT_TP_REPLICATED = 0, MT_TP_ROWS, MT_TP_COLS } mt_tp_split;
#define MT_TENSOR_NAME_LEN 64
#define MT_TP_MAX_PARTS 4

typedef struct {
    char name[MT_TENSOR_NAME_LEN]; /* e.g. "h.3.attn.c_attn.weight" */
    int ndim;                      /* 1 or 2 */
    int64_t shape[2];              /* our layout ([out, in] for linears); shape[1] = 1 for 1-D */
    size_t offset;                 /* element offset in the unit's flat buffer */
    size_t numel;
    int weight_decay;              /* 1 for 2-D weights (embeddings included) */
    int trainable;                 /* 1: gets a gradient and optimizer state; 0: frozen (nn/unit.h's
                                      frozen list: no gradient, no optimizer state, no collective) */
    int read_16bit_only;           /* under {precision} bf16/fp16 the model reads only the tensor's
                                      16-bit form (GEMM weights; an embedding whose lookup widens just
                                      the rows it needs) */
    int grad_by_one_gemm;          /* its gradient is written whole by one weight-gradient GEMM per
                                      backward (before any other contribution is added): with a fresh
                                      gradient buffer (mt_model.grad_fresh) it needs no clearing */
    float init_std;                /* > 0: N(0, std); 0: zeros; -1: ones (init_bound 0) */
    float init_bound;              /* > 0: U(-bound, bound) instead (LoRA's A) */
    /* Adapters attached to this (linear weight) tensor, as declared indices
     * + 1 in the same unit (0: none): LoRA's A [r, in] and B [out, r], or
     * IA3's vector. */
    int lora_a, lora_b, ia3;
    int ia3_input;                 /* IA3 scales this target's input (a feedforward module), not its output */
    int bias_of;                   /* IA3 target: its bias's declared index + 1 (0: none) */
    int quant;                     /* frozen and stored quantized (mt_quant_kind; no room in the fp32 frozen store) */
    int adapter;                   /* 1: an adapter tensor (not in a base checkpoint: {init-from} keeps its init) */
    int expert;                    /* expert e's tensor (a mixture-of-experts block): e + 1; 0: dense. Under
                                      expert parallelism (mt_layout_shard_experts) only the rank's own
                                      experts hold elements; the others keep their full shape (gshape,
                                      checkpoints) with shape[0] = numel = 0 here */
    int64_t init_rows;             /* rows drawn from the RNG (an embedding's padding rows stay 0) */
    int64_t ckpt_rows;             /* full rows a checkpoint holds (<= gshape[0]: a vocabulary padded
                                      further for this layout's tp keeps the tp-1 rows there) */
    /* Tensor parallelism: how this tensor is cut over the tp ranks, and
     * where the local slice sits in the full tensor. A local row is always
     * one contiguous run of the full tensor (mt_tensor_row_origin). */
    mt_tp_split split;
    int tp_replicas;                       /* tp ranks holding each slice: tp (REPLICATED), 1 (a plain cut),
                                              or between: a ROWS tensor with fewer row pieces than tp ranks
                                              (kv heads when tp > kv heads), each piece on tp_replicas
                                              consecutive ranks, whose gradient they sum */
    int split_parts;                       /* MT_TP_ROWS: blocks of rows cut separately */
    int64_t part_rows[MT_TP_MAX_PARTS];    /* full rows of each block (they sum to gshape[0]) */
    int64_t gshape[2];             /* full shape */
    size_t goffset, gnumel;        /* in the full (tp = 1) unit buffer */
} mt_tensor;

typedef enum { MT_UNIT_INPUT = 0, MT_UNIT_BLOCK = 1, MT_UNIT_OUTPUT = 2 } mt_unit_role;

/* A tensor of another unit that this unit's forward and backward also use:
 * they read its parameters and add into its gradient. */
typedef struct {
    char name[MT_TENSOR_NAME_LEN]; /* the name it has here (e.g. "lm_head.weight") */
    int unit, tensor;              /* where it lives */
} mt_shared_tensor;
#define MT_MAX_SHARED 2

typedef struct {
    mt_unit_role role;
    int layer;      /* block index for MT_UNIT_BLOCK, -1 otherwise */
    int n_tensors, cap;
    mt_tensor *t;   /* [n_tensors] */
    int n_shared;
    mt_shared_tensor shared[MT_MAX_SHARED];
    int shared_unit; /* the unit whose tensors shared[] names (-1: none) */
    int sp_partial; /* 1: under sequence parallelism the replicated tensors' gradients are this tp
                       rank's rows only (summed over tp by mt_model_tp_reduce_grads) */
    size_t numel;   /* elements in the flat buffer (this tp rank's slices) */
    size_t gnumel;  /* elements of the full unit (tp = 1) */
    size_t dense_numel; /* the first elements, before any expert's tensor: what every expert-parallel rank
                           holds alike (numel when the unit has no experts) */
    /* Frozen tensors (trainable 0) live in a second store of their own
     * (mt_model.frozen): t[] holds only the trainable ones, so everything
     * that walks a unit's tensors (ZeRO, optimizers, gradient collectives,
     * checkpoints) sees what it trains and nothing else. The families
     * address tensors by the index they declared them with, through
     * mt_unit_tensor (ref maps it to t[] or ft[]). */
    int n_frozen, fcap;
    mt_tensor *ft;        /* [n_frozen]; offsets into the frozen store */
    size_t frozen_numel;  /* elements of the frozen store (this tp rank's slices) */
    size_t gfrozen_numel;
    int n_decl;           /* tensors declared (trainable and frozen) */
    int *ref;             /* [n_decl] >= 0: index in t[]; < 0: -(index in ft[]) - 1; NULL: identity */
} mt_unit_layout;

/* Whether t is another expert-parallel rank's expert's tensor (emptied here
 * by mt_layout_shard_experts: its full shape kept, no elements, and no
 * quantized form either). */
static inline int mt_tensor_elsewhere(const mt_tensor *t) { return t->expert && t->shape[0] == 0; }

/* The tensor unit u declared as its k-th (the family's enumeration), in
 * whichever store it lives. */
static inline const mt_tensor *mt_unit_tensor(const mt_unit_layout *u, int k) {
    if (!u->ref) return &u->t[k];
    int r = u->ref[k];
    return r >= 0 ? &u->t[r] : &u->ft[-r - 1];
}

typedef struct {
    int n_units;
    mt_unit_layout *units;
    size_t total_params;    /* sum of unit numel (shared tensors counted once): the trainable ones */
    size_t total_frozen;    /* sum of unit frozen_numel */
    size_t gtotal_frozen;   /* the same for the full model */
    size_t gtotal_params;   /* the same for the full model */
    int tp, tp_rank;        /* tensor-parallel degree and this rank's index (1, 0: whole model) */
    int ep, ep_rank;        /* expert-parallel degree and this rank's index (1, 0: every expert) */
    int dense_align;        /* expert parallelism: each unit's experts start at a multiple of this (0 or 1: right
                               after the dense tensors; mt_layout_shard_experts) */
} mt_layout;

/* Builder: a layout of n units (roles and layers set by the caller), and a
 * tensor of full shape rows x cols appended to unit u, cut over tp as
 * `split` says (one block of rows); returns it for further settings. */
void mt_layout_init(mt_layout *l, int n_units, int tp, int tp_rank);
mt_tensor *mt_unit_add_tensor(mt_layout *l, int u, const char *name, int64_t rows, int64_t cols, int ndim, int decay,
                              float init_std, mt_tp_split split);
/* A ROWS tensor made of n blocks of rows[i] full rows, each cut over tp. */
void mt_tensor_set_parts(mt_tensor *t, int n, const int64_t *rows);
/* The last tensor added to unit u (ROWS) cut into tp / replicas pieces
 * instead of tp, each held by `replicas` consecutive tp ranks. */
void mt_unit_set_tp_replicas(mt_layout *l, int u, int replicas);
/* Declares that unit u also uses tensor `owner_name` (of another unit) as `name`. */
void mt_unit_add_shared(mt_layout *l, int u, const char *name, const char *owner_name);
/* Elements of the frozen 2-D tensors of the block units (full model): their
 * weight-gradient GEMMs are skipped (a third of their training FLOPs). */
double mt_layout_frozen_matrix_params(const mt_layout *l);
/* Expert parallelism: keeps the tensors of this rank's experts, the n_experts / ep
 * experts [ep_rank n / ep, (ep_rank + 1) n / ep), and empties the others'
 * (shape[0] = numel = 0; full shapes and names kept, so checkpoints and
 * declared indices are those of every layout), in both stores after the
 * frozen split (adapters: an expert's adapter is that expert's, expert set);
 * the trainable experts' tensors are moved after the dense ones there (the
 * unit's dense part one prefix, dense_numel), before it they must be the
 * last of their unit. ep must divide n_experts (checked by the caller).
 * dense_align > 1: a unit holding experts leaves zeros (no tensor's) in its
 * trainable store after its dense tensors up to a multiple of dense_align,
 * where its experts start, so its dense part splits evenly over that many
 * ranks (ZeRO's dp sharding of the dense parameters under {ep},
 * parallel/zero.h). */
void mt_layout_shard_experts(mt_layout *l, int n_experts, int ep, int ep_rank, int dense_align);
/* Sums the totals once every unit is built. */
void mt_layout_finish(mt_layout *l);
void mt_layout_free(mt_layout *l);

/* Element index, in the full tensor, of the first element of local row r
 * (the row's shape[1] elements are contiguous there too). */
size_t mt_tensor_row_origin(const mt_layout *l, const mt_tensor *t, int64_t r);
/* Copies unit u between this rank's local buffer (numel) and the full
 * unit buffer (gnumel, full offsets): to_full writes only this rank's
 * slices (replicated tensors included); from_full reads them. */
void mt_unit_to_full(const mt_layout *l, int u, const float *local, float *full);
void mt_unit_from_full(const mt_layout *l, int u, const float *full, float *local);
/* Finds a tensor by name (trainable or frozen); returns NULL if absent, else sets *unit. */
const mt_tensor *mt_layout_find_tensor(const mt_layout *l, const char *name, int *unit);
/* Fills a unit's flat parameter buffer with its initial values (a function
 * of seed, tensor name and full-tensor element index only, so every tp
 * slicing initialises the same model). */
void mt_unit_init_params(const mt_layout *l, int unit, float *params, uint64_t seed);
/* The same for the unit's frozen store (frozen_numel floats). */
void mt_unit_init_frozen(const mt_layout *l, int unit, float *frozen, uint64_t seed);
/* Fills dst (t->numel floats, this rank's slice) with t's initial values. */
void mt_tensor_init_values(const mt_layout *l, const mt_tensor *t, float *dst, uint64_t seed);
/* Moves the tensors whose trainable flag is 0 to the unit's frozen list
 * and renumbers both stores' offsets (declared order kept); sets ref. */
void mt_unit_split_frozen(mt_layout *l, int u);

#endif
