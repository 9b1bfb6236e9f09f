/* Context parallelism's loader (mt_loader_fill_cp): rank r of n holds
 * chunks r and 2n-1-r of every sample, each row with the token, target,
 * position and (packed windows) document start that the one-process fill
 * gives its place in the window -- checked row by row against mt_loader_fill
 * and mt_loader_fill_docs for n = 1, 2, 4, shuffled and sequential, plain
 * and with loss masks and packed documents. */
#include "data/loader.h"
#include "data/shard.h"
#include "testlib.h"

enum { T = 32, B = 3, NTOK = 40 * T + 1 };

static void compare(mt_loader *ld, uint64_t g0, const char *what) {
    static int32_t in[B * T], tg[B * T], ds[B * T], ps[B * T];
    static int32_t lin[B * T], ltg[B * T], lds[B * T], lps[B * T];
    uint64_t ids[B], lids[B];
    mt_loader_fill(ld, g0, B, in, tg, ids);
    int packed = mt_loader_fill_docs(ld, g0, B, ds, ps);
    for (int n = 1; n <= 4; n *= 2)
        for (int r = 0; r < n; r++) {
            const int c = T / (2 * n);
            int p = mt_loader_fill_cp(ld, g0, B, n, r, lin, ltg, lids, lds, lps);
            CHECK(p == packed, "%s: packed %d, want %d", what, p, packed);
            for (int s = 0; s < B; s++) {
                CHECK(lids[s] == ids[s], "%s: sample id", what);
                for (int a = 0; a < 2; a++)
                    for (int j = 0; j < c; j++) {
                        int t = (a == 0 ? r : 2 * n - 1 - r) * c + j, i = s * 2 * c + a * c + j, g = s * T + t;
                        CHECK(lin[i] == in[g] && ltg[i] == tg[g], "%s n %d r %d: row %d (t %d) token/target", what, n, r,
                              i, t);
                        CHECK(lps[i] == (packed ? ps[g] : t), "%s n %d r %d: row %d position %d, want %d", what, n, r, i,
                              lps[i], packed ? ps[g] : t);
                        if (packed) CHECK(lds[i] == ds[g], "%s n %d r %d: row %d document start", what, n, r, i);
                    }
            }
        }
}

int main(void) {
    static uint32_t tok[NTOK];
    static uint8_t flags[NTOK];
    for (int i = 0; i < NTOK; i++) {
        tok[i] = (uint32_t)((i * 7919u) % 251u);
        /* documents of 5..13 tokens, some starting inside a window; every third target not counted */
        flags[i] = (uint8_t)((i % 3 ? MT_TOK_LOSS : 0) | ((i % 13 == 0 || i % 37 == 5) ? MT_TOK_DOC : 0));
    }
    for (int order = 0; order < 2; order++)
        for (int with_flags = 0; with_flags < 2; with_flags++) {
            mt_loader ld;
            mt_error err = {{0}};
            CHECK(mt_loader_init(&ld, tok, NTOK, T, B, order ? MT_ORDER_SEQUENTIAL : MT_ORDER_SHUFFLED, 7, 256, &err) == 0,
                  "%s", err.msg);
            if (with_flags) CHECK(mt_loader_set_flags(&ld, flags, T, "test", &err) == 0 && ld.packed, "%s", err.msg);
            char what[64];
            snprintf(what, sizeof what, "%s%s", order ? "sequential" : "shuffled", with_flags ? " packed" : "");
            for (uint64_t g0 = 0; g0 < 90; g0 += 17) compare(&ld, g0, what);
            mt_loader_free(&ld);
        }
    TEST_MAIN_END("test_loader_cp");
}
