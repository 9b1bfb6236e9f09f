/* Mesh coordinates and groups; see mesh.h. */
#include "parallel/mesh.h"
#include <string.h>

static const char *const axis_names[MT_AXIS_N] = {"tp", "pp", "dp", "shard", "replica", "cp"};

const char *mt_mesh_axis_name(mt_mesh_axis a) {
    return (unsigned)a < MT_AXIS_N ? axis_names[a] : "?";
}

int mt_mesh_cp_size(const mt_mesh_shape *s) { return s->cp > 0 ? s->cp : 1; }
/* D: the replicas of the parameters (dp x cp), and a coordinate's index d among them */
static int replicas(const mt_mesh_shape *s) { return s->dp * mt_mesh_cp_size(s); }
static int replica_index(const mt_mesh_shape *s, mt_mesh_coord c) { return c.dp * mt_mesh_cp_size(s) + c.cp; }
int mt_mesh_shard_size(const mt_mesh_shape *s) {
    if (s->ep > 1) return s->dp / s->ep; /* ep > 1 implies cp 1 (mt_mesh_check) */
    return s->shard > 0 ? s->shard : replicas(s);
}

int mt_mesh_check(const mt_mesh_shape *s, int world_size, mt_error *err) {
    if (s->dp < 1 || s->pp < 1 || s->tp < 1 || s->cp < 0)
        return mt_errorf(err, "bad mesh {dp} %d {pp} %d {tp} %d {cp} %d: every size must be >= 1", s->dp,
                         s->pp, s->tp, s->cp);
    if (s->shard < 0)
        return mt_errorf(err, "bad {shard-group} %d: must be >= 1 (or 0 for no hybrid sharding)",
                         s->shard);
    if (s->ep < 0) return mt_errorf(err, "bad {ep} %d: must be >= 1", s->ep);
    if (s->ep > 1 && mt_mesh_cp_size(s) > 1)
        return mt_errorf(err, "{ep} %d with {cp} %d: expert and context parallelism do not combine "
                              "(context parallelism trains no MoE models); drop one of them", s->ep, s->cp);
    if (s->ep > 1 && s->dp % s->ep)
        return mt_errorf(err, "{ep} %d does not divide the data-parallel size {dp} %d: the expert-parallel ranks are "
                              "carved out of the data-parallel ones; choose an ep that divides dp", s->ep, s->dp);
    if (s->ep > 1 && s->shard > 0 && s->shard != s->dp / s->ep)
        return mt_errorf(err, "{shard-group} %d with {ep} %d: expert parallelism shards ZeRO over the "
                              "expert-data-parallel group of {dp} / {ep} = %d ranks; drop {shard-group}",
                         s->shard, s->ep, s->dp / s->ep);
    long long prod = (long long)s->dp * s->pp * s->tp * mt_mesh_cp_size(s);
    if (prod != world_size && s->cp > 1)
        return mt_errorf(err,
                         "mesh dp %d x cp %d x pp %d x tp %d = %lld processes, but the job has %d; "
                         "choose sizes whose product is %d or run with mpirun -np %lld",
                         s->dp, s->cp, s->pp, s->tp, prod, world_size, world_size, prod);
    if (prod != world_size)
        return mt_errorf(err,
                         "mesh dp %d x pp %d x tp %d = %lld processes, but the job has %d; "
                         "choose sizes whose product is %d or run with mpirun -np %lld",
                         s->dp, s->pp, s->tp, prod, world_size, world_size, prod);
    int g = mt_mesh_shard_size(s), D = replicas(s);
    if (D % g)
        return mt_errorf(err,
                         "{shard-group} %d does not divide the data-parallel size %d%s; pick a "
                         "divisor of %d",
                         g, D, mt_mesh_cp_size(s) > 1 ? " ({dp} x {cp})" : "", D);
    return 0;
}

int mt_mesh_rank_of(const mt_mesh_shape *s, mt_mesh_coord c) {
    return (replica_index(s, c) * s->pp + c.pp) * s->tp + c.tp;
}

mt_mesh_coord mt_mesh_coord_of(const mt_mesh_shape *s, int rank) {
    mt_mesh_coord c;
    int d = rank / (s->tp * s->pp), cp = mt_mesh_cp_size(s);
    c.tp = rank % s->tp;
    c.pp = (rank / s->tp) % s->pp;
    c.dp = d / cp;
    c.cp = d % cp;
    return c;
}

/* the coordinate with replica index d */
static mt_mesh_coord with_replica(const mt_mesh_shape *s, mt_mesh_coord c, int d) {
    c.dp = d / mt_mesh_cp_size(s);
    c.cp = d % mt_mesh_cp_size(s);
    return c;
}

int mt_mesh_group_size(const mt_mesh_shape *s, mt_mesh_axis a) {
    int g = mt_mesh_shard_size(s);
    switch (a) {
    case MT_AXIS_TP: return s->tp;
    case MT_AXIS_PP: return s->pp;
    case MT_AXIS_DP: return replicas(s);
    case MT_AXIS_SHARD: return g;
    case MT_AXIS_REPLICA: return replicas(s) / g;
    case MT_AXIS_CP: return mt_mesh_cp_size(s);
    default: return 0;
    }
}

int mt_mesh_group_index(const mt_mesh_shape *s, mt_mesh_axis a, int rank) {
    mt_mesh_coord c = mt_mesh_coord_of(s, rank);
    int g = mt_mesh_shard_size(s), d = replica_index(s, c);
    switch (a) {
    case MT_AXIS_TP: return c.tp;
    case MT_AXIS_PP: return c.pp;
    case MT_AXIS_DP: return d;
    case MT_AXIS_SHARD: return d % g;
    case MT_AXIS_REPLICA: return d / g;
    case MT_AXIS_CP: return c.cp;
    default: return -1;
    }
}

int mt_mesh_group_id(const mt_mesh_shape *s, mt_mesh_axis a, int rank) {
    mt_mesh_coord c = mt_mesh_coord_of(s, rank);
    int g = mt_mesh_shard_size(s), pt = c.pp * s->tp + c.tp, d = replica_index(s, c); /* (pp, tp) pair */
    switch (a) {
    case MT_AXIS_TP: return d * s->pp + c.pp;
    case MT_AXIS_PP: return d * s->tp + c.tp;
    case MT_AXIS_DP: return pt;
    case MT_AXIS_SHARD: return (d / g) * s->pp * s->tp + pt;
    case MT_AXIS_REPLICA: return (d % g) * s->pp * s->tp + pt;
    case MT_AXIS_CP: return c.dp * s->pp * s->tp + pt;
    default: return -1;
    }
}

int mt_mesh_group_ranks(const mt_mesh_shape *s, mt_mesh_axis a, int rank, int *out) {
    mt_mesh_coord c = mt_mesh_coord_of(s, rank);
    int n = mt_mesh_group_size(s, a), g = mt_mesh_shard_size(s), d = replica_index(s, c);
    for (int i = 0; i < n; i++) {
        mt_mesh_coord q = c;
        switch (a) {
        case MT_AXIS_TP: q.tp = i; break;
        case MT_AXIS_PP: q.pp = i; break;
        case MT_AXIS_DP: q = with_replica(s, c, i); break;
        case MT_AXIS_SHARD: q = with_replica(s, c, (d / g) * g + i); break;
        case MT_AXIS_REPLICA: q = with_replica(s, c, i * g + d % g); break;
        case MT_AXIS_CP: q.cp = i; break;
        default: return 0;
        }
        out[i] = mt_mesh_rank_of(s, q);
    }
    return n;
}

int mt_mesh_init(mt_mesh *m, mt_comm *world, const mt_mesh_shape *shape, mt_error *err) {
    memset(m, 0, sizeof *m);
    int ws = mt_comm_size(world);
    if (mt_mesh_check(shape, ws, err)) return -1;
    m->shape = *shape;
    m->shape.shard = mt_mesh_shard_size(shape);
    m->shape.cp = mt_mesh_cp_size(shape);
    m->rank = mt_comm_rank(world);
    m->world_size = ws;
    m->coord = mt_mesh_coord_of(&m->shape, m->rank);
    m->world = world;
    const mt_mesh_shape *s = &m->shape;
    mt_mesh_coord c = m->coord;
    int d = replica_index(s, c);
    for (int a = 0; a < MT_AXIS_N; a++) {
        char name[MT_COMM_NAME_LEN];
        switch (a) {
        case MT_AXIS_TP: snprintf(name, sizeof name, "tp(dp%d,pp%d)", d, c.pp); break;
        case MT_AXIS_PP: snprintf(name, sizeof name, "pp(dp%d,tp%d)", d, c.tp); break;
        case MT_AXIS_DP: snprintf(name, sizeof name, "dp(pp%d,tp%d)", c.pp, c.tp); break;
        case MT_AXIS_SHARD:
            snprintf(name, sizeof name, "shard%d(pp%d,tp%d)", d / s->shard, c.pp, c.tp);
            break;
        case MT_AXIS_CP: snprintf(name, sizeof name, "cp(dp%d,pp%d,tp%d)", c.dp, c.pp, c.tp); break;
        default:
            snprintf(name, sizeof name, "replica%d(pp%d,tp%d)", d % s->shard, c.pp, c.tp);
            break;
        }
        if (mt_comm_split(world, mt_mesh_group_id(s, a, m->rank),
                          mt_mesh_group_index(s, a, m->rank), name, &m->group[a], err)) {
            mt_mesh_free(m);
            return -1;
        }
    }
    return 0;
}

void mt_mesh_free(mt_mesh *m) {
    for (int a = MT_AXIS_N - 1; a >= 0; a--) {
        mt_comm_free(m->group[a]);
        m->group[a] = NULL;
    }
}

void mt_mesh_print_layout(const mt_mesh_shape *shape, int world_size, FILE *f) {
    mt_mesh_shape s = *shape;
    s.shard = mt_mesh_shard_size(shape);
    int cp = mt_mesh_cp_size(&s), D = replicas(&s);
    if (cp > 1)
        fprintf(f, "mesh: dp %d x cp %d x pp %d x tp %d = %d ranks (tp fastest); hybrid shard group %d, "
                   "%d replicas\n",
                s.dp, cp, s.pp, s.tp, world_size, s.shard, D / s.shard);
    else
        fprintf(f, "mesh: dp %d x pp %d x tp %d = %d ranks (tp fastest); hybrid shard group %d, "
                   "%d replicas\n",
                s.dp, s.pp, s.tp, world_size, s.shard, D / s.shard);
    fprintf(f, cp > 1 ? "  rank    dp  cp  pp  tp   shard(grp:idx)  replica(grp:idx)\n"
                      : "  rank    dp  pp  tp   shard(grp:idx)  replica(grp:idx)\n");
    for (int r = 0; r < world_size; r++) {
        mt_mesh_coord c = mt_mesh_coord_of(&s, r);
        int d = replica_index(&s, c);
        if (cp > 1) fprintf(f, "  %4d  %4d %3d %3d %3d   %6d:%-6d    %6d:%-6d\n", r, c.dp, c.cp, c.pp, c.tp,
                            d / s.shard, d % s.shard, d % s.shard, d / s.shard);
        else fprintf(f, "  %4d  %4d %3d %3d   %6d:%-6d    %6d:%-6d\n", r, c.dp, c.pp, c.tp,
                     d / s.shard, d % s.shard, d % s.shard, d / s.shard);
    }
}
