/* smallio.c: see smallio.h. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "smallio.h"

ssize_t sq_read_text(int fd, char *buf, size_t len)
{
	ssize_t n = -1;

	if (len == 0)
		return -1;
	if (fd >= 0) {
		n = read(fd, buf, len - 1);
		close(fd);
	}
	buf[n > 0 ? n : 0] = '\0';
	return n;
}

int sq_write_text(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = write(fd, text, strlen(text));
	close(fd);
	return n == (ssize_t)strlen(text) ? 0 : -1;
}

char *sq_read_all(int fd, size_t *len)
{
	size_t cap = 1 << 16, n = 0;
	char *buf = malloc(cap), *grown;
	ssize_t r;

	while (buf != NULL && (r = read(fd, buf + n, cap - n - 1)) != 0) {
		if (r < 0) {
			if (errno == EINTR)
				continue;
			free(buf);
			return NULL;
		}
		n += (size_t)r;
		if (n + 1 == cap) {
			grown = cap < ((size_t)1 << 30) ? realloc(buf, cap * 2) : NULL;
			if (grown == NULL) {
				free(buf);
				return NULL;
			}
			buf = grown;
			cap *= 2;
		}
	}
	if (buf != NULL) {
		buf[n] = '\0';
		if (len != NULL)
			*len = n;
	}
	return buf;
}

char *sq_read_file(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	char *buf;

	if (fd < 0)
		return NULL;
	buf = sq_read_all(fd, len);
	close(fd);
	return buf;
}

int sq_write_record(const char *path, const char *text)
{
	char tmp[PATH_MAX + 32];
	size_t len = strlen(text);
	int fd, saved;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >= sizeof(tmp)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	if (write(fd, text, len) != (ssize_t)len) {
		saved = errno ? errno : EIO;
		close(fd);
		goto fail;
	}
	if (close(fd) < 0 || rename(tmp, path) < 0) {
		saved = errno;
		goto fail;
	}
	return 0;
fail:
	unlink(tmp);
	errno = saved;
	return -1;
}
