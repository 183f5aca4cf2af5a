/*
 * safeopen.h: open what a user may have planted without blocking on it or following it.
 *
 * Any user can put a FIFO, a device node, a socket, a directory or a symbolic link where
 * squall expects a file: an image path on /fsx, a record in a runtime directory. Opening a
 * FIFO for reading blocks until a writer comes (slurmstepd stuck in open(), the job left
 * COMPLETING); a link makes root act on another file. So a file is stat'ed before it is
 * opened, opened only when it is a regular file, without blocking, and checked again after
 * the open (the same device and inode: it was not swapped in between). A directory that
 * root makes or writes into is opened with O_NOFOLLOW|O_DIRECTORY and checked (type, owner,
 * mode) before anything is done in it, through its descriptor.
 */
#ifndef SQUALL_CORE_SAFEOPEN_H
#define SQUALL_CORE_SAFEOPEN_H

#include <dirent.h>
#include <stddef.h>

/* sq_open_regular flags: do not follow a symbolic link at the last component. */
#define SQ_OPEN_NOFOLLOW 1

/* What st_mode names, for messages: "a regular file", "a directory", "a FIFO (named
 * pipe)", "a character device", "a block device", "a UNIX socket", "a symbolic link",
 * "a file of an unknown type". */
const char *sq_file_kind(unsigned int mode);

/* Open path (relative to dirfd; -100, AT_FDCWD, for the working directory) read-only, only
 * when it is a regular file: stat first (lstat with SQ_OPEN_NOFOLLOW), so that a FIFO, a
 * device, a socket or a directory is never opened; then open with
 * O_RDONLY|O_NONBLOCK|O_NOCTTY|O_CLOEXEC (and O_NOFOLLOW), fstat, and keep it only when it
 * is the same regular file (device and inode). Returns the descriptor (O_NONBLOCK cleared),
 * or -1 with errno: EINVAL when it is not a regular file (*mode: its type), EAGAIN when it
 * was replaced between the stat and the open, else the stat's or open's error (*mode: 0
 * when nothing could be stat'ed). mode may be NULL. */
int sq_open_regular(int dirfd, const char *path, int flags, unsigned int *mode);

/* Open the directory path (relative to dirfd) with O_RDONLY|O_DIRECTORY|O_NOFOLLOW|O_CLOEXEC
 * and check it before use: a directory (not a link to one), owned by root or by owner
 * (owner -1: root only), not writable by group or others unless sticky. Returns the
 * descriptor, or -1 with err: one line naming the path, what is wrong and the fix. */
int sq_dir_open_checked(int dirfd, const char *path, long owner, char *err, size_t errlen);

/* The directory name inside parentfd (a checked directory; parent_shown is its path, for
 * messages): made with mode when missing, then through its own descriptor (never by path)
 * given to uid:gid and mode; opened O_NOFOLLOW|O_DIRECTORY either way. It must be a
 * directory owned by uid, not writable by group or others unless sticky. Returns the
 * descriptor, or -1 with err (one line: the path, what is wrong, the fix). */
int sq_dir_make_checked(int parentfd, const char *parent_shown, const char *name, long uid,
			long gid, unsigned int mode, char *err, size_t errlen);

/* A directory stream over a duplicate of dirfd (which stays open), at its first entry (a
 * dup shares the offset of dirfd's earlier reads); NULL with errno on failure. For sweeps
 * of a checked directory through its descriptor. */
DIR *sq_dir_stream(int dirfd);

#endif
