#include "core/fileio.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int mt_write_all(int fd, const void *buf, size_t n, const char *path, mt_error *err) {
    const char *p = buf;
    size_t done = 0;
    while (done < n) {
        size_t chunk = n - done < ((size_t)1 << 30) ? n - done : ((size_t)1 << 30);
        ssize_t w = write(fd, p + done, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            return mt_errorf(err, "writing %s failed after %zu of %zu bytes: %s (is the disk full or read-only?)", path,
                             done, n, strerror(errno));
        }
        if (w == 0) return mt_errorf(err, "writing %s made no progress after %zu of %zu bytes", path, done, n);
        done += (size_t)w;
    }
    return 0;
}

int mt_pread_all(int fd, void *buf, size_t n, uint64_t off, const char *path, mt_error *err) {
    char *p = buf;
    size_t done = 0;
    while (done < n) {
        size_t chunk = n - done < ((size_t)1 << 30) ? n - done : ((size_t)1 << 30);
        ssize_t r = pread(fd, p + done, chunk, (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR) continue;
            return mt_errorf(err, "reading %zu bytes at offset %" PRIu64 " of %s failed: %s", n, off, path, strerror(errno));
        }
        if (r == 0)
            return mt_errorf(err, "reading %zu bytes at offset %" PRIu64 " of %s: file ends after %zu bytes (truncated?)", n,
                             off, path, done);
        done += (size_t)r;
    }
    return 0;
}

int mt_pwrite_all(int fd, const void *buf, size_t n, uint64_t off, const char *path, mt_error *err) {
    const char *p = buf;
    size_t done = 0;
    while (done < n) {
        size_t chunk = n - done < ((size_t)1 << 30) ? n - done : ((size_t)1 << 30);
        ssize_t w = pwrite(fd, p + done, chunk, (off_t)(off + done));
        if (w < 0) {
            if (errno == EINTR) continue;
            return mt_errorf(err, "writing %zu bytes at offset %" PRIu64 " of %s failed: %s", n, off, path,
                             strerror(errno));
        }
        if (w == 0) return mt_errorf(err, "writing %s at offset %" PRIu64 " made no progress", path, off + done);
        done += (size_t)w;
    }
    return 0;
}

int mt_read_file(const char *path, size_t limit, char **out, size_t *len, mt_error *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT) mt_errorf(err, "%s does not exist", path);
        else mt_errorf(err, "cannot open %s: %s", path, strerror(e));
        errno = e;
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) {
        close(fd);
        return mt_errorf(err, "out of memory reading %s", path);
    }
    for (;;) {
        if (n == cap) {
            if (cap > limit) break; /* more than limit bytes: refused below */
            size_t ncap = cap * 2;
            char *nb = realloc(buf, ncap + 1);
            if (!nb) {
                free(buf);
                close(fd);
                return mt_errorf(err, "out of memory reading %s (%zu bytes so far)", path, n);
            }
            buf = nb;
            cap = ncap;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            free(buf);
            close(fd);
            return mt_errorf(err, "error reading %s: %s", path, strerror(e));
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    close(fd);
    if (n > limit) {
        free(buf);
        return mt_errorf(err, "%s is larger than the %zu-byte limit for it (not the expected file?)", path, limit);
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return 0;
}

char *mt_path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = mt_xmalloc(a + b + 2, "path");
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

int mt_fsync_dir(const char *dir, mt_error *err) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return mt_errorf(err, "cannot open directory %s to fsync it: %s", dir, strerror(errno));
    if (fsync(fd) != 0 && errno != EINVAL) {
        int e = errno;
        close(fd);
        return mt_errorf(err, "fsync of directory %s failed: %s", dir, strerror(e));
    }
    close(fd);
    return 0;
}


int mt_create_temp(const char *path, mt_error *err) {
    if (unlink(path) != 0 && errno != ENOENT)
        return mt_errorf(err, "cannot remove the old temporary file %s: %s", path, strerror(errno));
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno; /* kept for callers that word the error themselves */
        mt_errorf(err, "cannot create the temporary file %s: %s%s", path, strerror(e),
                  e == EEXIST ? " (another process created it meanwhile: is a second run writing here?)" : "");
        errno = e;
    }
    return fd;
}

FILE *mt_fopen_temp(const char *path, char **tmp, mt_error *err) {
    size_t n = strlen(path) + 32;
    *tmp = malloc(n);
    if (!*tmp) {
        mt_errorf(err, "cannot allocate %zu bytes for a file name", n);
        return NULL;
    }
    snprintf(*tmp, n, "%s.tmp.%ld", path, (long)getpid());
    int fd = mt_create_temp(*tmp, err);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
    if (fd >= 0 && !f) {
        int e = errno;
        mt_errorf(err, "cannot open a stream on %s: %s", *tmp, strerror(e));
        close(fd);
        unlink(*tmp);
        errno = e;
    }
    if (!f) {
        int e = errno;
        free(*tmp);
        *tmp = NULL;
        errno = e;
    }
    return f;
}

int mt_fcommit_temp(FILE *f, char *tmp, const char *path, int failed, mt_error *err) {
    int rc = failed ? -1 : 0;
    if (!rc && (ferror(f) || fflush(f) != 0))
        rc = mt_errorf(err, "writing %s failed: %s (is the disk full?)", tmp, strerror(errno));
    if (!rc && fsync(fileno(f)) != 0) rc = mt_errorf(err, "fsync of %s failed: %s", tmp, strerror(errno));
    if (fclose(f) != 0 && !rc) rc = mt_errorf(err, "closing %s failed: %s (is the disk full?)", tmp, strerror(errno));
    if (!rc && rename(tmp, path) != 0)
        rc = mt_errorf(err, "renaming %s to %s failed: %s", tmp, path, strerror(errno));
    if (rc) unlink(tmp);
    free(tmp);
    return rc;
}

int mt_make_dirs(const char *dir, const char *what, mt_error *err) {
    size_t n = strlen(dir);
    char *p = mt_xmalloc(n + 1, "directory path");
    memcpy(p, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != '\0') continue;
        char c = p[i];
        p[i] = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            int e = errno;
            mt_errorf(err, "cannot create %s %s: %s", what, p, strerror(e));
            free(p);
            return -1;
        }
        p[i] = c;
    }
    free(p);
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return mt_errorf(err, "%s path %s exists but is not a directory", what, dir);
    return 0;
}
