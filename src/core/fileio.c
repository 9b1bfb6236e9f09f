#include "core/fileio.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
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

