/* The checksum of checkpoints (core/checksum.h). */
#include "core/checksum.h"
#include <string.h>

#define FNV_PRIME 0x100000001b3ULL
#define FNV_BASIS 0xcbf29ce484222325ULL

void mt_checksum_init(mt_checksum *s) {
    for (int i = 0; i < 4; i++) s->h[i] = FNV_BASIS ^ (uint64_t)i;
    s->nbuf = 0;
    s->total = 0;
}

static inline void hash_block(uint64_t h[4], const unsigned char *p) {
    uint64_t w[4];
    memcpy(w, p, 32); /* little-endian host */
    for (int i = 0; i < 4; i++) h[i] = (h[i] ^ w[i]) * FNV_PRIME;
}

void mt_checksum_update(mt_checksum *s, const void *data, size_t n) {
    const unsigned char *p = data;
    s->total += n;
    if (s->nbuf) {
        size_t take = 32 - s->nbuf < n ? 32 - s->nbuf : n;
        memcpy(s->buf + s->nbuf, p, take);
        s->nbuf += take;
        p += take;
        n -= take;
        if (s->nbuf < 32) return;
        hash_block(s->h, s->buf);
        s->nbuf = 0;
    }
    uint64_t h0 = s->h[0], h1 = s->h[1], h2 = s->h[2], h3 = s->h[3];
    while (n >= 32) {
        uint64_t w[4];
        memcpy(w, p, 32);
        h0 = (h0 ^ w[0]) * FNV_PRIME;
        h1 = (h1 ^ w[1]) * FNV_PRIME;
        h2 = (h2 ^ w[2]) * FNV_PRIME;
        h3 = (h3 ^ w[3]) * FNV_PRIME;
        p += 32;
        n -= 32;
    }
    s->h[0] = h0; s->h[1] = h1; s->h[2] = h2; s->h[3] = h3;
    memcpy(s->buf, p, n);
    s->nbuf = n;
}

static uint64_t mix64(uint64_t x) { /* splitmix64 finalizer: a bijection */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

uint64_t mt_checksum_final(mt_checksum *s) {
    for (size_t j = 0; j < s->nbuf; j++) s->h[0] = (s->h[0] ^ s->buf[j]) * FNV_PRIME;
    uint64_t r = mix64(s->total);
    for (int i = 0; i < 4; i++) r = mix64(r ^ s->h[i]);
    return r;
}

uint64_t mt_checksum_fnv1a(const char *s) {
    uint64_t h = FNV_BASIS;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * FNV_PRIME;
    return h;
}
