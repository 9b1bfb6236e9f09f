/* Mesh coordinates and groups; see mesh.h. */
#include "parallel/mesh.h"
#include <string.h>

static const char *const axis_names[MT_AXIS_N] = {"tp", "pp", "dp", "shard", "replica"};

const char *mt_mesh_axis_name(mt_mesh_axis a) {
    return (unsigned)a < MT_AXIS_N ? axis_names[a] : "?";
}

int mt_mesh_shard_size(const mt_mesh_shape *s) {
    if (s->ep > 1) return s->dp / s->ep;
    return s->shard > 0 ? s->shard : s->dp;
}

int mt_mesh_check(const mt_mesh_shape *s, int world_size, mt_error *err) {
    if (s->dp < 1 || s->pp < 1 || s->tp < 1)
        return mt_errorf(err, "bad mesh {dp} %d {pp} %d {tp} %d: every size must be >= 1", s->dp,
                         s->pp, s->tp);
    if (s->shard < 0)
        return mt_errorf(err, "bad {shard-group} %d: must be >= 1 (or 0 for no hybrid sharding)",
                         s->shard);
    if (s->ep < 0) return mt_errorf(err, "bad {ep} %d: must be >= 1", s->ep);
    if (s->ep > 1 && s->dp % s->ep)
        return mt_errorf(err, "{ep} %d does not divide the data-parallel size {dp} %d: the expert-parallel ranks are "
                              "carved out of the data-parallel ones; choose an ep that divides dp", s->ep, s->dp);
    if (s->ep > 1 && s->shard > 0 && s->shard != s->dp / s->ep)
        return mt_errorf(err, "{shard-group} %d with {ep} %d: expert parallelism shards ZeRO over the "
                              "expert-data-parallel group of {dp} / {ep} = %d ranks; drop {shard-group}",
                         s->shard, s->ep, s->dp / s->ep);
    long long prod = (long long)s->dp * s->pp * s->tp;
    if (prod != world_size)
        return mt_errorf(err,
                         "mesh dp %d x pp %d x tp %d = %lld processes, but the job has %d; "
                         "choose sizes whose product is %d or run with mpirun -np %lld",
                         s->dp, s->pp, s->tp, prod, world_size, world_size, prod);
    int g = mt_mesh_shard_size(s);
    if (s->dp % g)
        return mt_errorf(err,
                         "{shard-group} %d does not divide the data-parallel size %d; pick a "
                         "divisor of %d",
                         g, s->dp, s->dp);
    return 0;
}

int mt_mesh_rank_of(const mt_mesh_shape *s, mt_mesh_coord c) {
    return (c.dp * s->pp + c.pp) * s->tp + c.tp;
}

mt_mesh_coord mt_mesh_coord_of(const mt_mesh_shape *s, int rank) {
    mt_mesh_coord c;
    c.tp = rank % s->tp;
    c.pp = (rank / s->tp) % s->pp;
    c.dp = rank / (s->tp * s->pp);
    return c;
}

int mt_mesh_group_size(const mt_mesh_shape *s, mt_mesh_axis a) {
    int g = mt_mesh_shard_size(s);
    switch (a) {
    case MT_AXIS_TP: return s->tp;
    case MT_AXIS_PP: return s->pp;
    case MT_AXIS_DP: return s->dp;
    case MT_AXIS_SHARD: return g;
    case MT_AXIS_REPLICA: return s->dp / g;
    default: return 0;
    }
}

int mt_mesh_group_index(const mt_mesh_shape *s, mt_mesh_axis a, int rank) {
    mt_mesh_coord c = mt_mesh_coord_of(s, rank);
    int g = mt_mesh_shard_size(s);
    switch (a) {
    case MT_AXIS_TP: return c.tp;
    case MT_AXIS_PP: return c.pp;
    case MT_AXIS_DP: return c.dp;
    case MT_AXIS_SHARD: return c.dp % g;
    case MT_AXIS_REPLICA: return c.dp / g;
    default: return -1;
    }
}

int mt_mesh_group_id(const mt_mesh_shape *s, mt_mesh_axis a, int rank) {
    mt_mesh_coord c = mt_mesh_coord_of(s, rank);
    int g = mt_mesh_shard_size(s), pt = c.pp * s->tp + c.tp; /* (pp, tp) pair */
    switch (a) {
    case MT_AXIS_TP: return c.dp * s->pp + c.pp;
    case MT_AXIS_PP: return c.dp * s->tp + c.tp;
    case MT_AXIS_DP: return pt;
    case MT_AXIS_SHARD: return (c.dp / g) * s->pp * s->tp + pt;
    case MT_AXIS_REPLICA: return (c.dp % g) * s->pp * s->tp + pt;
    default: return -1;
    }
}

int mt_mesh_group_ranks(const mt_mesh_shape *s, mt_mesh_axis a, int rank, int *out) {
    mt_mesh_coord c = mt_mesh_coord_of(s, rank);
    int n = mt_mesh_group_size(s, a), g = mt_mesh_shard_size(s);
    for (int i = 0; i < n; i++) {
        mt_mesh_coord q = c;
        switch (a) {
        case MT_AXIS_TP: q.tp = i; break;
        case MT_AXIS_PP: q.pp = i; break;
        case MT_AXIS_DP: q.dp = i; break;
        case MT_AXIS_SHARD: q.dp = (c.dp / g) * g + i; break;
        case MT_AXIS_REPLICA: q.dp = i * g + c.dp % g; break;
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
    m->rank = mt_comm_rank(world);
    m->world_size = ws;
    m->coord = mt_mesh_coord_of(&m->shape, m->rank);
    m->world = world;
    const mt_mesh_shape *s = &m->shape;
    mt_mesh_coord c = m->coord;
    for (int a = 0; a < MT_AXIS_N; a++) {
        char name[MT_COMM_NAME_LEN];
        switch (a) {
        case MT_AXIS_TP: snprintf(name, sizeof name, "tp(dp%d,pp%d)", c.dp, c.pp); break;
        case MT_AXIS_PP: snprintf(name, sizeof name, "pp(dp%d,tp%d)", c.dp, c.tp); break;
        case MT_AXIS_DP: snprintf(name, sizeof name, "dp(pp%d,tp%d)", c.pp, c.tp); break;
        case MT_AXIS_SHARD:
            snprintf(name, sizeof name, "shard%d(pp%d,tp%d)", c.dp / s->shard, c.pp, c.tp);
            break;
        default:
            snprintf(name, sizeof name, "replica%d(pp%d,tp%d)", c.dp % s->shard, c.pp, c.tp);
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
    fprintf(f, "mesh: dp %d x pp %d x tp %d = %d ranks (tp fastest); hybrid shard group %d, "
               "%d replicas\n",
            s.dp, s.pp, s.tp, world_size, s.shard, s.dp / s.shard);
    fprintf(f, "  rank    dp  pp  tp   shard(grp:idx)  replica(grp:idx)\n");
    for (int r = 0; r < world_size; r++) {
        mt_mesh_coord c = mt_mesh_coord_of(&s, r);
        fprintf(f, "  %4d  %4d %3d %3d   %6d:%-6d    %6d:%-6d\n", r, c.dp, c.pp, c.tp,
                c.dp / s.shard, c.dp % s.shard, c.dp % s.shard, c.dp / s.shard);
    }
}
