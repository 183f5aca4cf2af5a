/*
 * smallio.h: the small reads and writes of records, /proc and /sys files, written once.
 */
#ifndef SQUALL_SMALLIO_H
#define SQUALL_SMALLIO_H

#include <stddef.h>
#include <sys/types.h>

/* Read what fd holds, up to len - 1 bytes in one read, into buf, NUL-terminated, then close
 * fd (a descriptor below 0 reads nothing). The bytes read, or -1 with buf "". */
ssize_t sq_read_text(int fd, char *buf, size_t len);

/* Write text to the file at path, which must exist (no create, no truncate: /proc and
 * /sys files). 0 when all of it was written, -1 otherwise. */
int sq_write_text(const char *path, const char *text);

#endif
