/* llm.c token shards: see shard.h. */
#include "data/shard.h"
#include "core/fileio.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "token shards are little-endian; add byte swapping");

#define LLMC_MODEL_MAGIC 20240326 /* llm.c's model-weights file, a common mix-up */

int mt_shard_open(mt_shard *s, const char *path, mt_error *err) {
    memset(s, 0, sizeof *s);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return mt_errorf(err, "cannot open token shard %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st)) {
        int e = errno;
        close(fd);
        return mt_errorf(err, "cannot stat token shard %s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return mt_errorf(err, "token shard %s is not a regular file", path);
    }
    long long size = (long long)st.st_size;
    if (size < MT_SHARD_HEADER_BYTES) {
        close(fd);
        return mt_errorf(err,
                         "token shard %s has %lld bytes, shorter than the %d-byte header; not an llm.c token shard, "
                         "or truncated",
                         path, size, MT_SHARD_HEADER_BYTES);
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED) return mt_errorf(err, "cannot map token shard %s (%lld bytes): %s", path, size, strerror(e));
    const int32_t *h = map;
    const char *bad = NULL;
    char msg[MT_ERROR_LEN];
    int wide = h[0] == MT_SHARD_MAGIC_U32;
    int ext = h[1] == (wide ? MT_SHARD_VERSION_U32_EXT : MT_SHARD_VERSION_EXT);
    long long count = h[2], want = MT_SHARD_HEADER_BYTES + ((wide ? 4 : 2) + (ext ? 1 : 0)) * (long long)h[2];
    if (h[0] != MT_SHARD_MAGIC && !wide) {
        snprintf(msg, sizeof msg, "token shard %s has magic %d, expected %d (uint16 ids) or %d (uint32 ids); %s", path,
                 (int)h[0], MT_SHARD_MAGIC, MT_SHARD_MAGIC_U32,
                 h[0] == LLMC_MODEL_MAGIC ? "this is an llm.c model file, not a token shard"
                                          : "not an llm.c token shard");
        bad = msg;
    } else if (h[1] != (wide ? MT_SHARD_VERSION_U32 : MT_SHARD_VERSION) && !ext) {
        snprintf(msg, sizeof msg, "token shard %s (magic %d) has version %d; only versions %d (llm.c) and %d (with loss "
                 "masks) are supported", path, (int)h[0], (int)h[1], wide ? MT_SHARD_VERSION_U32 : MT_SHARD_VERSION,
                 wide ? MT_SHARD_VERSION_U32_EXT : MT_SHARD_VERSION_EXT);
        bad = msg;
    } else if (ext && h[3] != MT_SHARD_EXT_REVISION) {
        snprintf(msg, sizeof msg, "token shard %s has loss-mask extension revision %d; only %d is supported (written by "
                 "a newer meshtrain?)", path, (int)h[3], MT_SHARD_EXT_REVISION);
        bad = msg;
    } else if (ext && (h[4] < 0 || h[5] < 0)) {
        snprintf(msg, sizeof msg, "token shard %s has a negative window length %d or document count %d in its header",
                 path, (int)h[4], (int)h[5]);
        bad = msg;
    } else if (count < 0) {
        snprintf(msg, sizeof msg, "token shard %s has a negative token count %lld in its header", path, count);
        bad = msg;
    } else if (count == 0) {
        snprintf(msg, sizeof msg, "token shard %s holds zero tokens", path);
        bad = msg;
    } else if (size < want) {
        snprintf(msg, sizeof msg,
                 "token shard %s is truncated: its header says %lld tokens (%lld bytes) but the file has %lld bytes",
                 path, count, want, size);
        bad = msg;
    } else if (size > want) {
        snprintf(msg, sizeof msg,
                 "token shard %s has %lld bytes, more than the %lld its header's %lld tokens need (%lld extra)", path,
                 size, want, count, size - want);
        bad = msg;
    } else if (ext && h[4] > 0 && (count - 1) % h[4] != 0) {
        snprintf(msg, sizeof msg,
                 "token shard %s: its %lld tokens are not whole windows of %d plus one, as its header's window "
                 "length says", path, count, (int)h[4]);
        bad = msg;
    }
    if (bad) {
        munmap(map, (size_t)size);
        return mt_errorf(err, "%s", bad);
    }
    s->map = map;
    s->map_len = (size_t)size;
    s->n = (size_t)count;
    const void *data = (const char *)map + MT_SHARD_HEADER_BYTES;
    uint32_t mx = 0;
    if (wide) {
        s->tokens32 = data;
        for (size_t i = 0; i < s->n; i++) mx = s->tokens32[i] > mx ? s->tokens32[i] : mx;
    } else {
        s->tokens = data;
        for (size_t i = 0; i < s->n; i++) mx = s->tokens[i] > mx ? s->tokens[i] : mx;
    }
    s->max_token = mx;
    if (ext) {
        s->flags = (const uint8_t *)data + (size_t)count * (wide ? 4 : 2);
        s->window = h[4];
        s->n_docs = h[5];
    }
    return 0;
}

void mt_shard_close(mt_shard *s) {
    if (s->map) munmap(s->map, s->map_len);
    memset(s, 0, sizeof *s);
}

int mt_shard_read(const char *path, uint32_t **tokens, size_t *n, uint32_t *max_token, mt_error *err) {
    return mt_shard_read_ext(path, tokens, n, max_token, NULL, NULL, err);
}

int mt_shard_read_ext(const char *path, uint32_t **tokens, size_t *n, uint32_t *max_token, uint8_t **flags,
                      int *window, mt_error *err) {
    mt_shard s;
    if (mt_shard_open(&s, path, err)) return -1;
    uint32_t *t = mt_xmalloc(s.n * sizeof *t, "token shard contents");
    if (s.tokens32) memcpy(t, s.tokens32, s.n * sizeof *t);
    else
        for (size_t i = 0; i < s.n; i++) t[i] = s.tokens[i];
    *tokens = t;
    *n = s.n;
    if (max_token) *max_token = s.max_token;
    if (flags) {
        *flags = NULL;
        if (s.flags) {
            *flags = mt_xmalloc(s.n, "token shard flags");
            memcpy(*flags, s.flags, s.n);
        }
    }
    if (window) *window = s.window;
    mt_shard_close(&s);
    return 0;
}

int mt_shard_check_vocab(const char *path, const uint32_t *tokens, size_t n, int vocab_size, mt_error *err) {
    if (vocab_size < 1) return mt_errorf(err, "cannot check token shard %s against a vocabulary of %d ids", path, vocab_size);
    for (size_t i = 0; i < n; i++)
        if (tokens[i] >= (uint32_t)vocab_size)
            return mt_errorf(err,
                             "token shard %s: token %zu has id %u, outside the model vocabulary of %d ids (0..%d); the "
                             "shard was made with another tokenizer, or the model's vocabulary size is wrong",
                             path, i, tokens[i], vocab_size, vocab_size - 1);
    return 0;
}

/* ---- writing ---- */

static int write_all(int fd, const void *buf, size_t len) {
    const char *p = buf;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* fsync the directory holding path, so the rename itself is durable. */
static void sync_parent_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash) strcpy(dir, ".");
    else if (slash == path) strcpy(dir, "/");
    else if ((size_t)(slash - path) < sizeof dir) {
        memcpy(dir, path, (size_t)(slash - path));
        dir[slash - path] = 0;
    } else
        return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd); /* best effort: some filesystems refuse fsync on directories */
        close(fd);
    }
}

/* Writes the shard from either an int32 or a uint16 array. */
static int write_shard(const char *path, const int32_t *t32, const uint16_t *t16, const uint8_t *flags, size_t n,
                       int window, int64_t n_docs, mt_error *err) {
    if (n == 0) return mt_errorf(err, "refusing to write token shard %s with zero tokens", path);
    if ((long long)n > MT_SHARD_MAX_TOKENS || n > (SIZE_MAX - MT_SHARD_HEADER_BYTES) / 4)
        return mt_errorf(err, "cannot write token shard %s: %zu tokens exceed the format's limit of %lld per file", path,
                         n, MT_SHARD_MAX_TOKENS);
    if (flags && (window < 0 || (window > 0 && (n - 1) % (size_t)window) || n_docs < 0 || n_docs > INT32_MAX))
        return mt_errorf(err, "cannot write token shard %s: %zu tokens are not whole windows of %d plus one, or %lld "
                         "documents are out of range", path, n, window, (long long)n_docs);
    int wide = 0; /* an id over 65535: llm.c's uint32 layout */
    if (t32)
        for (size_t i = 0; i < n; i++) {
            if (t32[i] < 0)
                return mt_errorf(err, "cannot write token shard %s: token %zu has the negative id %d", path, i,
                                 (int)t32[i]);
            wide |= t32[i] > 65535;
        }
    size_t plen = strlen(path);
    char *tmp = mt_xmalloc(plen + 64, "temporary shard path");
    snprintf(tmp, plen + 64, "%s.tmp.%ld", path, (long)getpid());
    int fd = mt_create_temp(tmp, err); /* O_EXCL | O_NOFOLLOW: a planted link cannot redirect it */
    if (fd < 0) {
        free(tmp);
        return -1;
    }
    int32_t header[MT_SHARD_HEADER_INTS] = {wide ? MT_SHARD_MAGIC_U32 : MT_SHARD_MAGIC,
                                            wide ? MT_SHARD_VERSION_U32 : MT_SHARD_VERSION, (int32_t)n};
    if (flags) {
        header[1] = wide ? MT_SHARD_VERSION_U32_EXT : MT_SHARD_VERSION_EXT;
        header[3] = MT_SHARD_EXT_REVISION;
        header[4] = window;
        header[5] = (int32_t)n_docs;
    }
    int rc = write_all(fd, header, sizeof header);
    if (t16) {
        if (!rc) rc = write_all(fd, t16, n * sizeof *t16);
    } else if (wide) {
        if (!rc) rc = write_all(fd, t32, n * sizeof *t32); /* non-negative int32 = uint32 bits */
    } else {
        uint16_t buf[32768];
        for (size_t i = 0; i < n && !rc;) {
            size_t k = n - i < 32768 ? n - i : 32768;
            for (size_t j = 0; j < k; j++) buf[j] = (uint16_t)t32[i + j];
            rc = write_all(fd, buf, k * sizeof *buf);
            i += k;
        }
    }
    if (flags && !rc) rc = write_all(fd, flags, n);
    const char *what = "write";
    if (!rc && fsync(fd)) {
        rc = -1;
        what = "fsync";
    }
    int e = errno;
    if (close(fd) && !rc) {
        rc = -1;
        what = "close";
        e = errno;
    }
    if (!rc && rename(tmp, path)) {
        rc = -1;
        what = "rename into place";
        e = errno;
    }
    if (rc) {
        unlink(tmp);
        mt_errorf(err, "cannot write token shard %s (%s of %s failed: %s)", path, what, tmp, strerror(e));
        free(tmp);
        return -1;
    }
    free(tmp);
    sync_parent_dir(path);
    return 0;
}

int mt_shard_write(const char *path, const int32_t *tokens, size_t n, mt_error *err) {
    return write_shard(path, tokens, NULL, NULL, n, 0, 0, err);
}

int mt_shard_write_ext(const char *path, const int32_t *tokens, const uint8_t *flags, size_t n, int window,
                       int64_t n_docs, mt_error *err) {
    return write_shard(path, tokens, NULL, flags, n, window, n_docs, err);
}

int mt_shard_write_u16(const char *path, const uint16_t *tokens, size_t n, mt_error *err) {
    return write_shard(path, NULL, tokens, NULL, n, 0, 0, err);
}
