/* The device mesh: world = dp x cp x pp x tp processes, tp varying fastest,
 * then pp, then cp, then dp. The data-parallel and context-parallel
 * coordinates form one replica index d = dp_idx * cp + cp_idx (D = dp x cp
 * of them): every rank of the same (pp, tp) holds the same parameters, so
 * gradients are reduced (and ZeRO shards) over all D of them; the cp ranks
 * of one d / cp see the same samples, each its chunks of the sequence.
 *     rank = (d * pp + pp_idx) * tp + tp_idx
 * so tensor-parallel partners are neighbouring ranks (same node first),
 * pipeline stages next, data-parallel replicas farthest apart. With cp = 1
 * d is the dp index and everything below is the dp x pp x tp mesh.
 *
 * Groups of a rank (each ordered by the varying coordinate, which is the
 * rank's index inside the group):
 *   tp:      same (d, pp), tp = 0..tp-1
 *   pp:      same (d, tp), pp = 0..pp-1
 *   dp:      same (pp, tp), d = 0..D-1 (the gradient-reduction group: dp x cp)
 *   shard:   hybrid sharding with shard_group G (G divides D): same (pp, tp)
 *            and the same block of G consecutive d indices d/G; index d%G
 *   replica: same (pp, tp) and the same d%G; index d/G (D/G members)
 *   cp:      same (dp, pp, tp), cp = 0..cp-1 (context parallelism's ring)
 * With G = D (the default) shard = dp and replica has size 1; with G = 1
 * shard has size 1 and replica = dp.
 *
 * The coordinate math (mt_mesh_check .. mt_mesh_group_ranks) is pure and
 * needs no MPI; mt_mesh_init creates the communicators. */
#ifndef MT_PARALLEL_MESH_H
#define MT_PARALLEL_MESH_H
#include <stdio.h>
#include "comm/comm.h"
#include "core/error.h"

typedef struct {
    int dp, pp, tp;
    int shard; /* hybrid shard group size G; 0 means dp x cp (no hybrid sharding) */
    int cp;    /* context-parallel size; 0 means 1 */
    int ep;    /* expert parallelism (0 or 1: none): carved out of dp as Megatron and DeepSpeed do --
                  the shard group is the expert-data-parallel group of dp / ep ranks (G = dp / ep)
                  and the replica group of ep ranks is the ep group the experts are spread over;
                  not combined with cp > 1 (context parallelism refuses MoE models) */
} mt_mesh_shape;

typedef struct {
    int dp, pp, tp, cp;
} mt_mesh_coord;

typedef enum {
    MT_AXIS_TP = 0,
    MT_AXIS_PP,
    MT_AXIS_DP,
    MT_AXIS_SHARD,
    MT_AXIS_REPLICA,
    MT_AXIS_CP,
    MT_AXIS_N
} mt_mesh_axis;

const char *mt_mesh_axis_name(mt_mesh_axis a); /* "tp", "pp", "dp", "shard", "replica", "cp" */

/* Checks that every size is >= 1, dp*cp*pp*tp == world_size, and G divides dp*cp.
 * On failure returns -1 with a message that says what to change. */
int mt_mesh_check(const mt_mesh_shape *s, int world_size, mt_error *err);
/* G with the default applied (shard == 0 -> dp x cp; expert parallelism: dp / ep). */
int mt_mesh_shard_size(const mt_mesh_shape *s);
/* cp with the default applied (0 -> 1). */
int mt_mesh_cp_size(const mt_mesh_shape *s);
int mt_mesh_rank_of(const mt_mesh_shape *s, mt_mesh_coord c);
mt_mesh_coord mt_mesh_coord_of(const mt_mesh_shape *s, int rank);
/* Size of the group along axis a, and the rank's index inside it. */
int mt_mesh_group_size(const mt_mesh_shape *s, mt_mesh_axis a);
int mt_mesh_group_index(const mt_mesh_shape *s, mt_mesh_axis a, int rank);
/* A number identifying the rank's group along a (equal for exactly the
 * members of one group; 0 .. world/size-1). */
int mt_mesh_group_id(const mt_mesh_shape *s, mt_mesh_axis a, int rank);
/* Writes the world ranks of the rank's group along a, in group order, into
 * out (mt_mesh_group_size entries); returns the count. */
int mt_mesh_group_ranks(const mt_mesh_shape *s, mt_mesh_axis a, int rank, int *out);

typedef struct {
    mt_mesh_shape shape; /* shard and cp filled in (never 0) */
    int rank, world_size;
    mt_mesh_coord coord;
    mt_comm *world;           /* borrowed from the context */
    mt_comm *group[MT_AXIS_N]; /* owned; index by mt_mesh_axis */
} mt_mesh;

/* Collective over world. Validates the shape (the same -1 + message on every
 * rank, before any communication, so the caller can print it on rank 0 and
 * return cleanly everywhere) and creates the six group communicators,
 * named e.g. "dp(pp0,tp1)". */
int mt_mesh_init(mt_mesh *m, mt_comm *world, const mt_mesh_shape *shape, mt_error *err);
void mt_mesh_free(mt_mesh *m);
static inline mt_comm *mt_mesh_comm(const mt_mesh *m, mt_mesh_axis a) { return m->group[a]; }
/* Layout table: one line per world rank with its coordinates and group
 * indices (call on one rank). */
void mt_mesh_print_layout(const mt_mesh_shape *s, int world_size, FILE *f);

#endif
