/* resume.c: see resume.h. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nodecache.h"
#include "resume.h"
#include "safeopen.h"

/* The image's superblock inode count, 0 when unknown. */
unsigned long sq_resume_image_inodes(const char *image)
{
	unsigned char sb[8];
	int fd = sq_open_regular(AT_FDCWD, image, 0, NULL);
	ssize_t n = fd >= 0 ? pread(fd, sb, sizeof(sb), 0) : -1;

	if (fd >= 0)
		close(fd);
	if (n != (ssize_t)sizeof(sb) || memcmp(sb, "hsqs", 4) != 0)
		return 0;
	return (unsigned long)sb[4] | (unsigned long)sb[5] << 8 | (unsigned long)sb[6] << 16 |
	       (unsigned long)sb[7] << 24;
}

/* KEY.part/started: when the first run of this extraction began; 0 when unreadable. */
long long sq_resume_read_started(int pfd)
{
	char buf[32];
	long long t = 0;
	int fd = sq_open_regular(pfd, "started", SQ_OPEN_NOFOLLOW, NULL);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;

	if (fd >= 0)
		close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	if (sscanf(buf, "%lld", &t) != 1 || t <= 0)
		t = 0;
	return t;
}

int sq_resume_write_started(int pfd, long long t)
{
	int fd = openat(pfd, "started", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK |
			O_CLOEXEC, 0600);
	int ok = fd >= 0 && dprintf(fd, "%lld\n", t) > 0;

	if (fd >= 0)
		close(fd);
	return ok ? 0 : -1;
}

struct sig {
	unsigned long long size;
	long long mtime;
	unsigned mode;
	long uid, gid;
};

static int sig_cmp(const void *x, const void *y)
{
	const struct sig *a = x, *b = y;

	if (a->size != b->size)
		return a->size < b->size ? -1 : 1;
	if (a->mtime != b->mtime)
		return a->mtime < b->mtime ? -1 : 1;
	if (a->mode != b->mode)
		return a->mode < b->mode ? -1 : 1;
	if (a->uid != b->uid)
		return a->uid < b->uid ? -1 : 1;
	return a->gid < b->gid ? -1 : a->gid > b->gid;
}

/* Read all of fd into a NUL-terminated heap buffer (*len bytes), NULL on failure. */
static char *slurp(int fd, size_t *len)
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
		if (cap - n - 1 == 0) {
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
		*len = n;
	}
	return buf;
}

/* Write KEY.part/exclude: the regular files of listing (KEY.part/list) already complete
 * in KEY.part/rootfs, so that the next run extracts only the rest. When the image has hard
 * links (more names than inodes), a complete file that may be a link of one still missing
 * (same size, time, mode, owner) is extracted again, so that unsquashfs links the two.
 * 0 ok (*kept: how many), -1 when the listing cannot be trusted (extract from scratch). */
int sq_resume_plan(int pfd, long long first_start, unsigned long inodes, size_t *kept)
{
	struct sig *missing = NULL;
	size_t len = 0, nmissing = 0, cap = 0, names = 0;
	int lfd = -1, rfd = -1, xfd = -1, rv = -1, pass;
	char *list = NULL;
	FILE *out = NULL;

	*kept = 0;
	lfd = sq_open_regular(pfd, "list", SQ_OPEN_NOFOLLOW, NULL);
	rfd = openat(pfd, "rootfs", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (lfd < 0 || rfd < 0 || (list = slurp(lfd, &len)) == NULL)
		goto fail;
	for (size_t i = 0; i < len; i++)
		names += list[i] == '\n';   /* one name a line, the root's included */
	xfd = openat(pfd, "exclude", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK |
		     O_CLOEXEC, 0600);
	if (xfd < 0 || (out = fdopen(xfd, "w")) == NULL)
		goto fail;
	xfd = -1;
	/* Pass 0: which files are missing (their signatures); pass 1: the exclude list. */
	for (pass = 0; pass < 2; pass++) {
		const char *l = list;

		while (*l) {
			const char *nl = strchr(l, '\n'), *line = l;
			size_t n = nl ? (size_t)(nl - l) : strlen(l);
			struct sq_list_entry e;
			char name[PATH_MAX];
			struct stat st;
			int done;

			l += n + (nl != NULL);
			if (sq_cache_list_parse(line, n, &e) < 0)
				goto fail;
			if (e.type != '-')
				continue;
			if (e.name_len == 0 || e.name_len >= sizeof(name))
				goto fail;
			memcpy(name, line + e.name_off, e.name_len);
			name[e.name_len] = '\0';
			done = fstatat(rfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			       sq_cache_file_complete(&e, st.st_mode,
						      (unsigned long long)st.st_size,
						      (long long)st.st_mtime, first_start);
			if (pass == 0 && !done && names > inodes) {
				if (nmissing == cap) {
					struct sig *g = realloc(missing,
							       (cap = cap ? 2 * cap : 256) *
							       sizeof(*g));
					if (g == NULL)
						goto fail;
					missing = g;
				}
				missing[nmissing++] = (struct sig){ e.size, e.mtime, e.mode, e.uid,
								    e.gid };
			}
			if (pass == 1 && done && sq_cache_name_listable(name, e.name_len)) {
				struct sig k = { e.size, e.mtime, e.mode, e.uid, e.gid };
				if (nmissing > 0 &&
				    bsearch(&k, missing, nmissing, sizeof(k), sig_cmp) != NULL)
					continue;
				if (fprintf(out, "%s\n", name) < 0)
					goto fail;
				(*kept)++;
			}
		}
		if (pass == 0 && nmissing > 0)
			qsort(missing, nmissing, sizeof(*missing), sig_cmp);
	}
	if (fflush(out) != 0)
		goto fail;
	rv = 0;
fail:
	if (out != NULL)
		fclose(out);
	if (xfd >= 0)
		close(xfd);
	if (lfd >= 0)
		close(lfd);
	if (rfd >= 0)
		close(rfd);
	free(list);
	free(missing);
	return rv;
}

/* nftw: count names and the inodes shared by several (hard links), for the check that a
 * resumed tree has as many inodes as the image. */
static unsigned long tree_names;
static ino_t *linked;
static size_t nlinked, linkcap;

static int count_inodes(const char *path, const struct stat *st, int type, struct FTW *f)
{
	(void)path;
	(void)type;
	(void)f;
	tree_names++;
	if (!S_ISDIR(st->st_mode) && st->st_nlink > 1) {
		if (nlinked == linkcap) {
			ino_t *g = realloc(linked, (linkcap = linkcap ? 2 * linkcap : 256) *
					   sizeof(*g));
			if (g == NULL)
				return 1;
			linked = g;
		}
		linked[nlinked++] = st->st_ino;
	}
	return 0;
}

static int ino_cmp(const void *x, const void *y)
{
	ino_t a = *(const ino_t *)x, b = *(const ino_t *)y;

	return a < b ? -1 : a > b;
}

/* The distinct inodes of the tree at path (it is on one file system), 0 on failure. */
unsigned long sq_resume_tree_inodes(const char *path)
{
	unsigned long distinct = 0;
	size_t unique = 0;

	tree_names = 0;
	nlinked = 0;
	if (nftw(path, count_inodes, 32, FTW_PHYS) == 0) {
		qsort(linked, nlinked, sizeof(*linked), ino_cmp);
		for (size_t i = 0; i < nlinked; i++)
			unique += i == 0 || linked[i] != linked[i - 1];
		distinct = tree_names - (unsigned long)(nlinked - unique);
	}
	free(linked);
	linked = NULL;
	linkcap = 0;
	return distinct;
}
