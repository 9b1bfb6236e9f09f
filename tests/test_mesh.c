/* Mesh coordinate math (no MPI): rank <-> (dp, cp, pp, tp), group membership
 * for every axis over many shapes, and the errors for bad layouts. With
 * context parallelism the dp-like groups (dp, shard, replica) run over the
 * replica index d = dp * cp + cp_idx. */
#include <stdlib.h>
#include "parallel/mesh.h"
#include "testlib.h"

static void check_shape_cp(int dp, int pp, int tp, int g, int cpn) {
    mt_mesh_shape s = {dp, pp, tp, g, cpn, 0};
    int W = dp * pp * tp * cpn;
    mt_error err = {{0}};
    CHECK(mt_mesh_check(&s, W, &err) == 0, "dp%d pp%d tp%d G%d: %s", dp, pp, tp, g, err.msg);
    int G = mt_mesh_shard_size(&s);
    int *seen = calloc((size_t)W, sizeof *seen);
    int *buf = malloc((size_t)W * sizeof *buf);
    if (!seen || !buf) {
        fprintf(stderr, "test_mesh: out of memory\n");
        exit(1);
    }
    for (int r = 0; r < W; r++) {
        mt_mesh_coord c = mt_mesh_coord_of(&s, r);
        CHECK(c.tp >= 0 && c.tp < tp && c.pp >= 0 && c.pp < pp && c.dp >= 0 && c.dp < dp && c.cp >= 0 && c.cp < cpn,
              "rank %d coords out of range", r);
        CHECK(r == ((c.dp * cpn + c.cp) * pp + c.pp) * tp + c.tp, "rank %d formula", r);
        const int cd = c.dp * cpn + c.cp;
        CHECK(mt_mesh_rank_of(&s, c) == r, "rank %d round trip", r);
        seen[r]++;
        for (int a = 0; a < MT_AXIS_N; a++) {
            int n = mt_mesh_group_ranks(&s, (mt_mesh_axis)a, r, buf);
            CHECK(n == mt_mesh_group_size(&s, (mt_mesh_axis)a), "size");
            int idx = mt_mesh_group_index(&s, (mt_mesh_axis)a, r);
            CHECK(idx >= 0 && idx < n && buf[idx] == r, "rank %d axis %s: own index %d", r,
                  mt_mesh_axis_name((mt_mesh_axis)a), idx);
            int id = mt_mesh_group_id(&s, (mt_mesh_axis)a, r);
            CHECK(id >= 0 && id < W / n, "group id %d of %d", id, W / n);
            for (int i = 0; i < n; i++) {
                int q = buf[i];
                mt_mesh_coord d = mt_mesh_coord_of(&s, q);
                const int dd = d.dp * cpn + d.cp;
                /* same group <=> same id; index i <=> position in list */
                CHECK(mt_mesh_group_id(&s, (mt_mesh_axis)a, q) == id, "member id");
                CHECK(mt_mesh_group_index(&s, (mt_mesh_axis)a, q) == i, "member index");
                switch (a) {
                case MT_AXIS_TP: CHECK(dd == cd && d.pp == c.pp && d.tp == i, "tp"); break;
                case MT_AXIS_PP: CHECK(dd == cd && d.tp == c.tp && d.pp == i, "pp"); break;
                case MT_AXIS_DP: CHECK(d.pp == c.pp && d.tp == c.tp && dd == i, "dp"); break;
                case MT_AXIS_SHARD:
                    CHECK(d.pp == c.pp && d.tp == c.tp && dd / G == cd / G && dd % G == i,
                          "shard");
                    break;
                case MT_AXIS_CP: CHECK(d.dp == c.dp && d.pp == c.pp && d.tp == c.tp && d.cp == i, "cp"); break;
                default:
                    CHECK(d.pp == c.pp && d.tp == c.tp && dd % G == cd % G && dd / G == i,
                          "replica");
                }
            }
        }
    }
    /* Every id partitions the world: count members per id. */
    for (int a = 0; a < MT_AXIS_N; a++) {
        int n = mt_mesh_group_size(&s, (mt_mesh_axis)a);
        int *cnt = calloc((size_t)(W / n), sizeof *cnt);
        if (!cnt) {
            fprintf(stderr, "test_mesh: out of memory\n");
            exit(1);
        }
        for (int r = 0; r < W; r++) cnt[mt_mesh_group_id(&s, (mt_mesh_axis)a, r)]++;
        for (int i = 0; i < W / n; i++) CHECK(cnt[i] == n, "axis %d group %d has %d", a, i, cnt[i]);
        free(cnt);
    }
    for (int r = 0; r < W; r++) CHECK(seen[r] == 1, "rank %d", r);
    free(seen);
    free(buf);
}

static void check_shape(int dp, int pp, int tp, int g) { check_shape_cp(dp, pp, tp, g, 1); }

int main(void) {
    int sizes[] = {1, 2, 3, 4, 6};
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 5; j++)
            for (int k = 0; k < 5; k++) {
                int dp = sizes[i];
                check_shape(dp, sizes[j], sizes[k], 0);
                for (int g = 1; g <= dp; g++)
                    if (dp % g == 0) check_shape(dp, sizes[j], sizes[k], g);
            }

    /* context parallelism: G divides dp x cp */
    for (int cpn = 2; cpn <= 4; cpn += 2)
        for (int dp = 1; dp <= 2; dp++)
            for (int pp = 1; pp <= 2; pp++)
                for (int tp = 1; tp <= 2; tp++)
                    for (int g = 0; g <= dp * cpn; g++)
                        if (g == 0 || (dp * cpn) % g == 0) check_shape_cp(dp, pp, tp, g, cpn);

    /* Spot values: dp2 x pp2 x tp2, rank 5 = (dp1, pp0, tp1). */
    mt_mesh_shape s = {2, 2, 2, 0, 0, 0};
    mt_mesh_coord c = mt_mesh_coord_of(&s, 5);
    CHECK(c.dp == 1 && c.pp == 0 && c.tp == 1, "(%d,%d,%d)", c.dp, c.pp, c.tp);
    int buf[8];
    mt_mesh_group_ranks(&s, MT_AXIS_TP, 5, buf);
    CHECK(buf[0] == 4 && buf[1] == 5, "tp group");
    mt_mesh_group_ranks(&s, MT_AXIS_PP, 5, buf);
    CHECK(buf[0] == 5 && buf[1] == 7, "pp group");
    mt_mesh_group_ranks(&s, MT_AXIS_DP, 5, buf);
    CHECK(buf[0] == 1 && buf[1] == 5, "dp group");
    /* dp 4, G 2: shard groups {0,1},{2,3}; replica groups {0,2},{1,3} */
    mt_mesh_shape h = {4, 1, 1, 2, 0, 0};
    mt_mesh_group_ranks(&h, MT_AXIS_SHARD, 3, buf);
    CHECK(buf[0] == 2 && buf[1] == 3, "shard group");
    mt_mesh_group_ranks(&h, MT_AXIS_REPLICA, 3, buf);
    CHECK(buf[0] == 1 && buf[1] == 3, "replica group");
    CHECK(mt_mesh_group_size(&(mt_mesh_shape){4, 1, 1, 0, 0, 0}, MT_AXIS_REPLICA) == 1, "default G");
    /* dp 2 x cp 2 x tp 2: rank 6 = (dp1, cp1, tp0); cp group {4, 6}; the gradient group (dp) {0, 2, 4, 6} */
    mt_mesh_shape q = {2, 1, 2, 0, 2, 0};
    c = mt_mesh_coord_of(&q, 6);
    CHECK(c.dp == 1 && c.cp == 1 && c.tp == 0, "(%d,%d,%d)", c.dp, c.cp, c.tp);
    mt_mesh_group_ranks(&q, MT_AXIS_CP, 6, buf);
    CHECK(buf[0] == 4 && buf[1] == 6, "cp group");
    CHECK(mt_mesh_group_ranks(&q, MT_AXIS_DP, 6, buf) == 4 && buf[0] == 0 && buf[1] == 2 && buf[2] == 4 && buf[3] == 6,
          "dp x cp group");

    /* Errors. */
    mt_error err = {{0}};
    mt_mesh_shape bad = {2, 2, 2, 0, 0, 0};
    CHECK(mt_mesh_check(&bad, 4, &err) == -1, "product");
    CHECK(strstr(err.msg, "= 8 processes") && strstr(err.msg, "has 4"), "%s", err.msg);
    bad = (mt_mesh_shape){0, 1, 1, 0, 0, 0};
    CHECK(mt_mesh_check(&bad, 0, &err) == -1 && strstr(err.msg, ">= 1"), "%s", err.msg);
    bad = (mt_mesh_shape){6, 1, 1, 4, 0, 0};
    CHECK(mt_mesh_check(&bad, 6, &err) == -1, "G");
    char shown[MT_ERROR_LEN]; /* as the CLI says it: {option} names as --option */
    mt_render_options(err.msg, "--", shown, sizeof shown);
    CHECK(strstr(shown, "--shard-group 4 does not divide") != NULL, "%s", shown);
    bad = (mt_mesh_shape){4, 1, 1, -1, 0, 0};
    CHECK(mt_mesh_check(&bad, 4, &err) == -1 && strstr(err.msg, "shard-group"), "%s", err.msg);
    bad = (mt_mesh_shape){3, 1, 1, 6, 0, 0};
    CHECK(mt_mesh_check(&bad, 3, &err) == -1, "G > dp");
    bad = (mt_mesh_shape){1, 1, 1, 0, 0, 0};
    CHECK(mt_mesh_check(&bad, 1, &err) == 0, "1x1x1");
    bad = (mt_mesh_shape){2, 1, 1, 0, 2, 0};
    CHECK(mt_mesh_check(&bad, 2, &err) == -1 && strstr(err.msg, "cp 2") && strstr(err.msg, "= 4 processes"), "%s", err.msg);
    bad = (mt_mesh_shape){2, 1, 1, 3, 2, 0};
    CHECK(mt_mesh_check(&bad, 4, &err) == -1 && strstr(err.msg, "does not divide"), "%s", err.msg);
    /* expert parallelism: dp 4, ep 2 -> shard (expert-data-parallel) groups of 2, replica (ep) groups of 2 */
    mt_mesh_shape e = {4, 1, 1, 0, 0, 2};
    CHECK(mt_mesh_check(&e, 4, &err) == 0 && mt_mesh_shard_size(&e) == 2, "ep2 G %d: %s", mt_mesh_shard_size(&e), err.msg);
    mt_mesh_group_ranks(&e, MT_AXIS_REPLICA, 3, buf);
    CHECK(buf[0] == 1 && buf[1] == 3, "ep group");
    bad = (mt_mesh_shape){4, 1, 1, 0, 0, 3};
    CHECK(mt_mesh_check(&bad, 4, &err) == -1 && strstr(err.msg, "{ep} 3 does not divide"), "%s", err.msg);
    bad = (mt_mesh_shape){4, 1, 1, 0, 2, 2};
    CHECK(mt_mesh_check(&bad, 8, &err) == -1 && strstr(err.msg, "{ep} 2 with {cp} 2"), "%s", err.msg);

    /* Layout printing does not crash and names the sizes. */
    FILE *f = tmpfile();
    CHECK(f != NULL, "tmpfile");
    if (f) {
        mt_mesh_print_layout(&s, 8, f);
        char line[256] = "";
        rewind(f);
        CHECK(fgets(line, sizeof line, f) && strstr(line, "dp 2 x pp 2 x tp 2 = 8"), "%s", line);
        fclose(f);
    }
    TEST_MAIN_END("test_mesh");
}
