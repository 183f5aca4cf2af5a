/* prestart_mark.c: see prestart_mark.h. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "prestart_mark.h"

static void mark_path(char *path, size_t len, const char *runtime_dir, uint32_t jobid)
{
	snprintf(path, len, "%s/job%u." SQ_PRESTART_MARK, runtime_dir, (unsigned)jobid);
}

int sq_prestart_mark(const char *runtime_dir, uint32_t jobid, const char *how)
{
	char path[PATH_MAX + 32];
	size_t n = strlen(how);
	struct stat st;
	int fd, ok;

	/* Not blocking on a FIFO planted there (the prolog's start would hang for good), not
	 * following a link, and only a regular file is written. */
	mark_path(path, sizeof(path), runtime_dir, jobid);
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
	if (fd < 0)
		return -1;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || ftruncate(fd, 0) < 0) {
		close(fd);
		return -1;
	}
	ok = write(fd, how, n) == (ssize_t)n;
	close(fd);
	return ok ? 0 : -1;
}

int sq_prestart_marked(const char *runtime_dir, uint32_t jobid, char *how, size_t howlen)
{
	char path[PATH_MAX + 32];
	struct stat st;
	ssize_t n;
	int fd;

	how[0] = '\0';
	mark_path(path, sizeof(path), runtime_dir, jobid);
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0)
		return 0;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return 0;
	}
	n = read(fd, how, howlen - 1);
	close(fd);
	how[n > 0 ? (size_t)n : 0] = '\0';
	how[strcspn(how, "\n")] = '\0';
	return 1;
}
