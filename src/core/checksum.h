/* Checksums. fnv1a64x4: four interleaved FNV-1a lanes over 32-byte words
 * (fast enough to checksum every checkpoint byte as it is written), the
 * length and the lanes mixed by splitmix64's finalizer; what checkpoint
 * manifests record ("fnv1a64x4:<16 hex digits>"). Incremental: init,
 * update any number of times, final. Assumes a little-endian host. Plus
 * plain FNV-1a of a string, for hash tables. */
#ifndef MT_CORE_CHECKSUM_H
#define MT_CORE_CHECKSUM_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t h[4];
    unsigned char buf[32];
    size_t nbuf;
    uint64_t total;
} mt_checksum;

void mt_checksum_init(mt_checksum *s);
void mt_checksum_update(mt_checksum *s, const void *data, size_t n);
uint64_t mt_checksum_final(mt_checksum *s);
/* FNV-1a (64-bit) of a NUL-terminated string. */
uint64_t mt_checksum_fnv1a(const char *s);

#endif
