/* promfile.c: see promfile.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "promfile.h"
#include "safeopen.h"
#include "strbuf.h"

#define TEXT_NAME "squall.prom"

/* state_dir, made root's (the caller's) 0700 under its existing, checked parent. */
static int open_state_dir(const char *state_dir, char *err, size_t errlen)
{
	char parent[PATH_MAX];
	const char *base = strrchr(state_dir, '/');
	long me = (long)geteuid();
	int top, fd;

	if (base == NULL || base == state_dir || base[1] == '\0' ||
	    (size_t)(base - state_dir) >= sizeof(parent))
		return sq_errf(err, errlen, "metrics state directory %s: not an absolute path "
			       "below /", state_dir);
	snprintf(parent, sizeof(parent), "%.*s", (int)(base - state_dir), state_dir);
	if (mkdir(parent, 0755) < 0 && errno != EEXIST)
		return sq_errf(err, errlen, "cannot create %s: %s", parent, strerror(errno));
	top = sq_dir_open_checked(AT_FDCWD, parent, me, err, errlen);
	if (top < 0)
		return -1;
	fd = sq_dir_make_checked(top, parent, base + 1, me, -1, 0700, err, errlen);
	close(top);
	return fd;
}

/* The exclusive lock, waited for SQ_METRICS_LOCK_MS at most. */
static int lock_record(int fd)
{
	struct timespec nap = { 0, 5 * 1000 * 1000 };

	for (int waited = 0; waited <= SQ_METRICS_LOCK_MS; waited += 5) {
		if (flock(fd, LOCK_EX | LOCK_NB) == 0)
			return 0;
		if (errno != EWOULDBLOCK && errno != EINTR)
			return -1;
		nanosleep(&nap, NULL);
	}
	errno = ETIMEDOUT;
	return -1;
}

/* The record file in dfd, opened read-write and locked: a plain file of ours, one link. */
static int open_record(int dfd, const char *state_dir, char *err, size_t errlen)
{
	struct stat st;
	int fd = openat(dfd, "record", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);

	if (fd < 0)
		return sq_errf(err, errlen, "cannot open %s/record: %s", state_dir,
			       strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
	    st.st_nlink != 1) {
		close(fd);
		return sq_errf(err, errlen, "%s/record is not a plain file of root's with one "
			       "link: remove it", state_dir);
	}
	if (lock_record(fd) < 0) {
		sq_errf(err, errlen, "cannot lock %s/record: %s", state_dir, strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

/* Read, add, write back in place. 0 ok, -1 with err. */
static int add_to_record(int fd, const char *state_dir, const struct sq_metrics_step *st,
			 struct sq_metrics_record *r, char *err, size_t errlen)
{
	unsigned char buf[sizeof(*r) + 1];
	ssize_t n = pread(fd, buf, sizeof(buf), 0);

	if (n < 0)
		return sq_errf(err, errlen, "cannot read %s/record: %s", state_dir,
			       strerror(errno));
	sq_metrics_load(r, buf, (size_t)n);
	sq_metrics_add(r, st);
	if (pwrite(fd, r, sizeof(*r), 0) != (ssize_t)sizeof(*r) ||
	    ((size_t)n > sizeof(*r) && ftruncate(fd, sizeof(*r)) < 0))
		return sq_errf(err, errlen, "cannot write %s/record: %s", state_dir,
			       errno ? strerror(errno) : "short write");
	return 0;
}

static int write_all(int fd, const char *p, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* The text into dir/.squall.prom.PID, renamed over dir/squall.prom. 0 ok, -1 with err. */
static int write_text(const char *dir, const char *text, size_t len, char *err,
		      size_t errlen)
{
	char tmp[64];
	struct stat st;
	int dfd, fd = -1, rv = -1;

	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return sq_errf(err, errlen, "metrics_dir %s: %s (install node_exporter's "
			       "textfile directory, or metrics_dir=none in plugstack.conf)", dir,
			       strerror(errno));
	if (fstat(dfd, &st) < 0 || (st.st_mode & S_IWOTH)) {
		sq_errf(err, errlen, "metrics_dir %s is writable by every user: make it 0755 "
			"(chmod o-w)", dir);
		goto out;
	}
	snprintf(tmp, sizeof(tmp), "." TEXT_NAME ".%ld", (long)getpid());
	unlinkat(dfd, tmp, 0);   /* a leftover of a pid reused, or a planted link */
	fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0 || fchmod(fd, 0644) < 0 || write_all(fd, text, len) < 0) {
		sq_errf(err, errlen, "cannot write %s/%s: %s", dir, tmp, strerror(errno));
		goto out;
	}
	if (close(fd) < 0) {
		fd = -1;
		sq_errf(err, errlen, "cannot write %s/%s: %s", dir, tmp, strerror(errno));
		goto out;
	}
	fd = -1;
	if (renameat(dfd, tmp, dfd, TEXT_NAME) < 0) {
		sq_errf(err, errlen, "cannot rename %s/%s to %s: %s", dir, tmp, TEXT_NAME,
			strerror(errno));
		goto out;
	}
	rv = 0;
out:
	if (fd >= 0)
		close(fd);
	if (rv < 0)
		unlinkat(dfd, tmp, 0);
	close(dfd);
	return rv;
}

int sq_metrics_update(const char *state_dir, const char *textfile_dir,
		      const struct sq_metrics_step *st, char *err, size_t errlen)
{
	struct sq_metrics_record r;
	char *text = NULL;
	int dfd, fd = -1, n, rv = -1;

	dfd = open_state_dir(state_dir, err, errlen);
	if (dfd < 0)
		return -1;
	fd = open_record(dfd, state_dir, err, errlen);
	if (fd < 0 || add_to_record(fd, state_dir, st, &r, err, errlen) < 0)
		goto out;
	rv = 0;
	if (textfile_dir == NULL)
		goto out;
	rv = 1;
	text = malloc(SQ_METRICS_TEXT_MAX);
	if (text == NULL) {
		sq_errf(err, errlen, "out of memory");
		goto out;
	}
	/* Rendered and renamed under the record's lock: the last text is the newest. */
	n = sq_metrics_render(&r, (long long)time(NULL), text, SQ_METRICS_TEXT_MAX);
	if (n < 0)
		sq_errf(err, errlen, "the metrics text is over %d bytes", SQ_METRICS_TEXT_MAX);
	else if (write_text(textfile_dir, text, (size_t)n, err, errlen) == 0)
		rv = 0;
out:
	free(text);
	if (fd >= 0)
		close(fd);   /* the lock goes with it */
	close(dfd);
	return rv;
}

struct join_msg {
	int32_t ok;
	int32_t pad;
	double seconds;
};

int sq_metrics_join_open(int fds[2])
{
	if (pipe2(fds, O_CLOEXEC) < 0) {
		fds[0] = fds[1] = -1;
		return -1;
	}
	if (fcntl(fds[0], F_SETFL, O_NONBLOCK) < 0 || fcntl(fds[1], F_SETFL, O_NONBLOCK) < 0) {
		close(fds[0]);
		close(fds[1]);
		fds[0] = fds[1] = -1;
		return -1;
	}
	return 0;
}

void sq_metrics_join_say(int fd, int ok, double seconds)
{
	struct join_msg m = { ok ? 1 : 0, 0, seconds };

	if (fd >= 0 && write(fd, &m, sizeof(m)) != (ssize_t)sizeof(m)) {
		/* the metrics miss one join time: never the task's business */
	}
}

int sq_metrics_join_read(int fd, int *ok, double *seconds)
{
	struct join_msg m;

	if (fd < 0 || read(fd, &m, sizeof(m)) != (ssize_t)sizeof(m))
		return 0;
	*ok = m.ok == 1;
	*seconds = m.seconds;
	return 1;
}
