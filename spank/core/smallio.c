/* smallio.c: see smallio.h. */
#include <fcntl.h>
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
