/* dataset.c: see dataset.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset.h"
#include "strbuf.h"

#define FIX "make it readable by the job's user (chmod, chgrp) or copy it to a path she owns"

int sq_dataset_magic(const unsigned char *head, size_t len)
{
	return len >= 4 && memcmp(head, SQ_SQUASHFS_MAGIC, 4) == 0;
}

/* "SRC" or "SRC (a link to TARGET)" into buf. */
static const char *named(const char *source, char *buf, size_t buflen)
{
	char show[SQ_SHOW_MAX], target[PATH_MAX], tshow[SQ_SHOW_MAX];
	struct stat st;

	sq_show(source, show, sizeof(show));
	if (lstat(source, &st) == 0 && S_ISLNK(st.st_mode) && realpath(source, target) != NULL)
		snprintf(buf, buflen, "%s (a link to %s)", show,
			 sq_show(target, tshow, sizeof(tshow)));
	else
		snprintf(buf, buflen, "%s", show);
	return buf;
}

int sq_dataset_probe(const char *source, char *err, size_t errlen)
{
	unsigned char head[4];
	char name[2 * SQ_SHOW_MAX + PATH_MAX];
	struct stat st = { 0 };
	ssize_t n;
	int fd;

	if (stat(source, &st) < 0 && errno != ENOENT && errno != ENOTDIR)
		return sq_errf(err, errlen, "--container-mounts: cannot read %s: %s: %s",
			       named(source, name, sizeof(name)), strerror(errno), FIX);
	if (!S_ISREG(st.st_mode))
		return 0;   /* a missing source is sq_mounts_check_sources's to say */
	fd = open(source, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return sq_errf(err, errlen, "--container-mounts: cannot read %s: %s: %s",
			       named(source, name, sizeof(name)), strerror(errno), FIX);
	do
		n = pread(fd, head, sizeof(head), 0);
	while (n < 0 && errno == EINTR);
	close(fd);
	if (n < 0)
		return sq_errf(err, errlen, "--container-mounts: cannot read %s: %s: %s",
			       named(source, name, sizeof(name)), strerror(errno), FIX);
	return sq_dataset_magic(head, (size_t)n);
}

/* 1 when the comma-separated options hold opt. */
static int has_option(const char *options, const char *opt)
{
	size_t len = strlen(opt);

	for (const char *p = options; p != NULL && *p != '\0';) {
		const char *end = strchr(p, ',');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		if (n == len && strncmp(p, opt, len) == 0)
			return 1;
		p = end ? end + 1 : NULL;
	}
	return 0;
}

int sq_dataset_check(const struct sq_mount *m, char *err, size_t errlen)
{
	char show[SQ_SHOW_MAX];
	int r;

	if (m->type != SQ_MOUNT_BIND)
		return 0;
	r = sq_dataset_probe(m->source, err, errlen);
	if (r == 1 && has_option(m->options, "rw"))
		return sq_errf(err, errlen, "--container-mounts: %s is a squashfs dataset, "
			       "mounted read-only: drop the rw flag (or give a directory to bind "
			       "it writable)", sq_show(m->source, show, sizeof(show)));
	return r;
}
