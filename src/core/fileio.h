/* Whole-buffer file I/O with errors that name the file, the sizes and the
 * reason: writes and positioned reads that retry on EINTR and short
 * transfers, and fsync of a directory (needed to make a rename durable). */
#ifndef MT_CORE_FILEIO_H
#define MT_CORE_FILEIO_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "core/error.h"

int mt_write_all(int fd, const void *buf, size_t n, const char *path, mt_error *err);
int mt_pwrite_all(int fd, const void *buf, size_t n, uint64_t off, const char *path, mt_error *err);
int mt_pread_all(int fd, void *buf, size_t n, uint64_t off, const char *path, mt_error *err);
/* The whole file at path (any kind: regular, pipe, device) in *out, NUL
 * added after its *len bytes (free it); refused when longer than limit
 * bytes, before reading more. A missing file says "does not exist" and
 * leaves errno ENOENT, so a caller can add what the file should have been. */
int mt_read_file(const char *path, size_t limit, char **out, size_t *len, mt_error *err);
/* dir "/" name, allocated (free it). */
char *mt_path_join(const char *dir, const char *name);
int mt_fsync_dir(const char *dir, mt_error *err);
/* mkdir -p dir; the message names it as `what` ("checkpoint directory"). */
int mt_make_dirs(const char *dir, const char *what, mt_error *err);

/* Creates the temporary file `path` for writing (mode 0644) and returns its
 * descriptor, or -1. Whatever is at that name (a stale temporary of a
 * crashed run, or a planted symlink) is unlinked first -- unlinking a
 * symlink removes the link, not its target -- and the file is created with
 * O_EXCL | O_NOFOLLOW, so nothing placed there can redirect the write.
 * On failure errno is that of the failed call. */
int mt_create_temp(const char *path, mt_error *err);

/* A text file written whole or not at all: mt_fopen_temp opens
 * "<path>.tmp.<pid>" (mt_create_temp) and returns its name in *tmp;
 * mt_fcommit_temp checks every write (ferror), flushes, fsyncs, closes and
 * renames it to path, or removes it on any failure (or when failed is set),
 * so no empty or partial file is left at path. It frees *tmp. */
FILE *mt_fopen_temp(const char *path, char **tmp, mt_error *err);
int mt_fcommit_temp(FILE *f, char *tmp, const char *path, int failed, mt_error *err);

#endif
