/* Whole-buffer file I/O with errors that name the file, the sizes and the
 * reason: writes and positioned reads that retry on EINTR and short
 * transfers, and fsync of a directory (needed to make a rename durable). */
#ifndef MT_CORE_FILEIO_H
#define MT_CORE_FILEIO_H
#include <stddef.h>
#include <stdint.h>
#include "core/error.h"

int mt_write_all(int fd, const void *buf, size_t n, const char *path, mt_error *err);
int mt_pread_all(int fd, void *buf, size_t n, uint64_t off, const char *path, mt_error *err);
int mt_fsync_dir(const char *dir, mt_error *err);

#endif
