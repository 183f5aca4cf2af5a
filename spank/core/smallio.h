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

/* Read all of fd (left open: the caller's) into a heap buffer, NUL-terminated after its
 * *len bytes (which may hold NULs: /proc/PID/environ); at most 1 GiB. NULL on a read error
 * or out of memory. Free with free(). len may be NULL (text that holds no NUL). */
char *sq_read_all(int fd, size_t *len);
/* sq_read_all of the file at path, opened read-only and closed again. NULL also when it
 * cannot be opened. */
char *sq_read_file(const char *path, size_t *len);

/* Replace the record at path with text, whole: written to PATH.tmp.PID (a leftover or a
 * planted link of that name removed first; created O_EXCL, O_NOFOLLOW, mode 0600), then
 * renamed over path (a link there is replaced, never followed). 0 ok; -1 with errno, and
 * no temporary left. */
int sq_write_record(const char *path, const char *text);

/* Write text to the file at path, which must exist (no create, no truncate: /proc and
 * /sys files). 0 when all of it was written, -1 otherwise. */
int sq_write_text(const char *path, const char *text);

#endif
