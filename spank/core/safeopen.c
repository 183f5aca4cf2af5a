/* safeopen.c: see safeopen.h. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safeopen.h"

const char *sq_file_kind(unsigned int mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG:
		return "a regular file";
	case S_IFDIR:
		return "a directory";
	case S_IFIFO:
		return "a FIFO (named pipe)";
	case S_IFCHR:
		return "a character device";
	case S_IFBLK:
		return "a block device";
	case S_IFSOCK:
		return "a UNIX socket";
	case S_IFLNK:
		return "a symbolic link";
	default:
		return "a file of an unknown type";
	}
}

static void close_keep_errno(int fd)
{
	int e = errno;

	close(fd);
	errno = e;
}

int sq_open_regular(int dirfd, const char *path, int flags, unsigned int *mode)
{
	int nofollow = (flags & SQ_OPEN_NOFOLLOW) != 0;
	struct stat before, after;
	unsigned int unused;
	int fd, fl;

	if (mode == NULL)
		mode = &unused;
	*mode = 0;
	if (fstatat(dirfd, path, &before, nofollow ? AT_SYMLINK_NOFOLLOW : 0) < 0)
		return -1;
	*mode = (unsigned int)before.st_mode;
	if (!S_ISREG(before.st_mode)) {
		errno = EINVAL;
		return -1;
	}
	/* Swapped for a FIFO after the stat, this open still returns at once (O_NONBLOCK)
	 * and the fstat below refuses it. */
	fd = openat(dirfd, path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC |
		    (nofollow ? O_NOFOLLOW : 0));
	if (fd < 0)
		return -1;
	if (fstat(fd, &after) < 0) {
		close_keep_errno(fd);
		return -1;
	}
	if (!S_ISREG(after.st_mode)) {
		*mode = (unsigned int)after.st_mode;
		close(fd);
		errno = EINVAL;
		return -1;
	}
	if (after.st_dev != before.st_dev || after.st_ino != before.st_ino) {
		close(fd);
		errno = EAGAIN;
		return -1;
	}
	fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	return fd;
}

/* A directory squall may act in: type, owner (root, or owner; exact: owner only), mode. */
static int check_dir(const struct stat *s, const char *shown, long owner, int exact,
		     char *err, size_t errlen)
{
	int owner_ok = owner >= 0 && s->st_uid == (uid_t)owner;

	if (!S_ISDIR(s->st_mode)) {
		snprintf(err, errlen, "%s is %s, not a directory: remove it (squall makes it)",
			 shown, sq_file_kind((unsigned int)s->st_mode));
		return -1;
	}
	if (!owner_ok && (exact || s->st_uid != 0)) {
		if (owner < 0)
			snprintf(err, errlen, "%s is owned by uid %u, not by root: remove it or "
				 "give it to root (chown root)", shown, (unsigned)s->st_uid);
		else
			snprintf(err, errlen, "%s is owned by uid %u, not by %s%ld: remove it "
				 "(squall makes it)", shown, (unsigned)s->st_uid,
				 exact ? "uid " : "root or uid ", owner);
		return -1;
	}
	if ((s->st_mode & (S_IWGRP | S_IWOTH)) && !(s->st_mode & S_ISVTX)) {
		snprintf(err, errlen, "%s is writable by other users (mode %04o) and not "
			 "sticky: chmod go-w %s (or +t)", shown, (unsigned)(s->st_mode & 07777),
			 shown);
		return -1;
	}
	return 0;
}

/* The message for a directory that could not be opened. */
static void open_failed(int dirfd, const char *path, const char *shown, char *err,
			size_t errlen)
{
	int e = errno;
	struct stat s;

	if ((e == ELOOP || e == ENOTDIR) && fstatat(dirfd, path, &s, AT_SYMLINK_NOFOLLOW) == 0 &&
	    !S_ISDIR(s.st_mode))
		snprintf(err, errlen, "%s is %s, not a directory: remove it (squall makes it)",
			 shown, sq_file_kind((unsigned int)s.st_mode));
	else
		snprintf(err, errlen, "cannot open the directory %s: %s", shown, strerror(e));
	errno = e;
}

static int open_dir(int dirfd, const char *path)
{
	return openat(dirfd, path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

int sq_dir_open_checked(int dirfd, const char *path, long owner, char *err, size_t errlen)
{
	struct stat s;
	int fd = open_dir(dirfd, path);

	if (fd < 0) {
		open_failed(dirfd, path, path, err, errlen);
		return -1;
	}
	if (fstat(fd, &s) < 0) {
		snprintf(err, errlen, "cannot stat the directory %s: %s", path, strerror(errno));
		close(fd);
		return -1;
	}
	if (check_dir(&s, path, owner, 0, err, errlen) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

int sq_dir_make_checked(int parentfd, const char *parent_shown, const char *name, long uid,
			long gid, unsigned int mode, char *err, size_t errlen)
{
	char shown[PATH_MAX];
	struct stat s;
	int made, fd;

	snprintf(shown, sizeof(shown), "%s/%s", parent_shown, name);
	made = mkdirat(parentfd, name, (mode_t)(mode & 07777)) == 0;
	if (!made && errno != EEXIST) {
		snprintf(err, errlen, "cannot create the directory %s: %s", shown, strerror(errno));
		return -1;
	}
	fd = open_dir(parentfd, name);
	if (fd < 0) {
		open_failed(parentfd, name, shown, err, errlen);
		return -1;
	}
	/* Given away through the descriptor: a name swapped in between is never chowned. */
	if (made && (fchown(fd, (uid_t)uid, (gid_t)gid) < 0 ||
		     fchmod(fd, (mode_t)(mode & 07777)) < 0)) {
		snprintf(err, errlen, "cannot give the directory %s to uid %ld: %s", shown, uid,
			 strerror(errno));
		close(fd);
		return -1;
	}
	if (fstat(fd, &s) < 0) {
		snprintf(err, errlen, "cannot stat the directory %s: %s", shown, strerror(errno));
		close(fd);
		return -1;
	}
	if (check_dir(&s, shown, uid, 1, err, errlen) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

DIR *sq_dir_stream(int dirfd)
{
	int fd = dup(dirfd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;

	if (d == NULL) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		errno = e;
		return NULL;
	}
	rewinddir(d);
	return d;
}
