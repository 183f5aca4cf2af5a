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
#include "smallio.h"

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

	if (sq_read_text(sq_open_regular(pfd, "started", SQ_OPEN_NOFOLLOW, NULL), buf,
			 sizeof(buf)) <= 0)
		return 0;
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

/* The directories of the listing (list, len bytes) whose listed mode keeps their owner
 * out (a 0555 one), searchable and writable by their owner again: unsquashfs makes every
 * directory 0700 and gives it its mode when it has made what is in it, so only those can
 * be closed to it; sq_resume_apply_modes gives each its mode after. No walk of the tree. */
static void open_listed_dirs(int rfd, const char *list, size_t len)
{
	for (size_t i = 0; i < len;) {
		const char *line = list + i, *nl = memchr(line, '\n', len - i);
		size_t n = nl != NULL ? (size_t)(nl - line) : len - i;
		struct sq_list_entry e;
		char name[PATH_MAX];
		struct stat st;

		i += n + 1;
		if (sq_cache_list_parse(line, n, &e) < 0 || e.type != 'd' ||
		    (e.mode & 0700) == 0700 || e.name_len >= sizeof(name))
			continue;
		memcpy(name, line + e.name_off, e.name_len);
		name[e.name_len] = '\0';
		if (e.name_len == 0)
			snprintf(name, sizeof(name), ".");
		if (fstatat(rfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode) &&
		    (st.st_mode & 0700) != 0700 &&
		    fchmodat(rfd, name, (st.st_mode & 07777) | 0700, 0) != 0)
			continue;   /* the run then fails on it, and is not resumed */
	}
}

int sq_resume_open_dirs(int pfd)
{
	size_t len = 0;
	int lfd = sq_open_regular(pfd, "list", SQ_OPEN_NOFOLLOW, NULL);
	int rfd = openat(pfd, "rootfs", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	char *list = lfd >= 0 && rfd >= 0 ? sq_read_all(lfd, &len) : NULL;

	if (list != NULL)
		open_listed_dirs(rfd, list, len);
	if (lfd >= 0)
		close(lfd);
	if (rfd >= 0)
		close(rfd);
	free(list);
	return list != NULL ? 0 : -1;
}

/* sq_resume_plan's state over its two passes of the listing. */
struct resume_scan {
	int rfd;                /* KEY.part/rootfs */
	long long first_start;
	int maybe_links;        /* more names than inodes: some files are hard links */
	struct sig *missing;    /* pass 0: the files not yet complete, sorted after it */
	size_t nmissing, cap;
	FILE *out;              /* pass 1: KEY.part/exclude.tmp */
	size_t kept;
	unsigned char *done;    /* pass 0 decides, per line, whether its file is complete */
	const char *old, *old_end;   /* the last plan's names (complete then, untouched since),
				      * in the listing's order; the next one to meet */
	size_t stats;           /* files looked at on disk */
};

/* A regular file of the listing, and whether rootfs already has it whole. */
struct listed {
	struct sq_list_entry e;
	char name[PATH_MAX];
	int done;
};

static struct sig sig_of(const struct sq_list_entry *e)
{
	return (struct sig){ e->size, e->mtime, e->mode, e->uid, e->gid };
}

/* 1 when name is the next name of the last plan (kept then: unsquashfs -f never touched it
 * since), moving past it. The plan lists names in the listing's order, so a name it does
 * not hold is met before the next one it does. */
static int in_last_plan(struct resume_scan *s, const char *name, size_t len)
{
	const char *nl;
	size_t n;

	if (s->old == NULL || s->old >= s->old_end)
		return 0;
	nl = memchr(s->old, '\n', (size_t)(s->old_end - s->old));
	n = nl != NULL ? (size_t)(nl - s->old) : (size_t)(s->old_end - s->old);
	if (n != len || memcmp(s->old, name, len) != 0)
		return 0;
	s->old += n + (nl != NULL);
	return 1;
}

/* One line (number idx) of the listing into f: 1 a regular file, 0 another kind of entry,
 * -1 a line that cannot be trusted. Pass 0 decides whether the file is complete (from the
 * last plan, else on disk), pass 1 reads that decision. */
static int read_listed(struct resume_scan *s, const char *line, size_t n, size_t idx,
		       int pass, struct listed *f)
{
	struct stat st;

	if (sq_cache_list_parse(line, n, &f->e) < 0)
		return -1;
	if (f->e.type != '-')
		return 0;
	if (f->e.name_len == 0 || f->e.name_len >= sizeof(f->name))
		return -1;
	memcpy(f->name, line + f->e.name_off, f->e.name_len);
	f->name[f->e.name_len] = '\0';
	if (pass == 1) {
		f->done = s->done[idx];
		return 1;
	}
	if (in_last_plan(s, f->name, f->e.name_len)) {
		f->done = s->done[idx] = 1;
		return 1;
	}
	s->stats++;
	if (fstatat(s->rfd, f->name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		f->done = s->done[idx] = 0;
		return 1;
	}
	/* The set-id and sticky bits are given after unsquashfs (sq_resume_apply_modes): a
	 * file that has none of them yet is complete when the rest is. */
	if ((st.st_mode & 07000) == 0)
		st.st_mode |= f->e.mode & 07000;
	f->done = sq_cache_file_complete(&f->e, st.st_mode, (unsigned long long)st.st_size,
					 (long long)st.st_mtime, s->first_start);
	s->done[idx] = (unsigned char)f->done;
	return 1;
}

/* Pass 0: a file still missing, when the image has hard links, is remembered by its
 * signature. */
static int note_missing(struct resume_scan *s, const struct listed *f)
{
	if (f->done || !s->maybe_links)
		return 0;
	if (s->nmissing == s->cap) {
		struct sig *g = realloc(s->missing, (s->cap = s->cap ? 2 * s->cap : 256) *
						    sizeof(*g));
		if (g == NULL)
			return -1;
		s->missing = g;
	}
	s->missing[s->nmissing++] = sig_of(&f->e);
	return 0;
}

/* Pass 1: a complete file goes to the exclude list, unless an exclude file cannot name it
 * or it may be a hard link of one still missing (extracted again, so that unsquashfs
 * links the two). */
static int write_kept(struct resume_scan *s, const struct listed *f)
{
	struct sig k;

	if (!f->done || !sq_cache_name_listable(f->name, f->e.name_len))
		return 0;
	k = sig_of(&f->e);
	if (s->nmissing > 0 && bsearch(&k, s->missing, s->nmissing, sizeof(k), sig_cmp) != NULL)
		return 0;
	if (fprintf(s->out, "%s\n", f->name) < 0)
		return -1;
	s->kept++;
	return 0;
}

/* One pass over the listing (one name a line): pass 0 notes the missing files, pass 1
 * writes the exclude list. */
static int scan_listing(struct resume_scan *s, const char *list, int pass)
{
	const char *l = list;
	struct listed f;
	size_t idx = 0;

	while (*l) {
		const char *nl = strchr(l, '\n'), *line = l;
		size_t n = nl ? (size_t)(nl - l) : strlen(l);
		int rc;

		l += n + (nl != NULL);
		rc = read_listed(s, line, n, idx++, pass, &f);
		if (rc < 0)
			return -1;
		if (rc > 0 && (pass == 0 ? note_missing(s, &f) : write_kept(s, &f)) != 0)
			return -1;
	}
	return 0;
}

/* The last plan (KEY.part/exclude) when reuse is set, else NULL; *len its bytes. */
static char *last_plan(int pfd, int reuse, size_t *len)
{
	int fd = reuse ? sq_open_regular(pfd, "exclude", SQ_OPEN_NOFOLLOW, NULL) : -1;
	char *text = fd >= 0 ? sq_read_all(fd, len) : NULL;

	if (fd >= 0)
		close(fd);
	return text;
}

/* Write KEY.part/exclude: the regular files of listing (KEY.part/list) already complete
 * in KEY.part/rootfs, so that the next run extracts only the rest. When the image has hard
 * links (more names than inodes), a complete file that may be a link of one still missing
 * (same size, time, mode, owner) is extracted again, so that unsquashfs links the two.
 * 0 ok (*kept: how many), -1 when the listing cannot be trusted (extract from scratch). */
int sq_resume_plan(int pfd, long long first_start, unsigned long inodes, int reuse,
		   struct sq_resume_cost *cost)
{
	struct resume_scan s = { .rfd = -1, .first_start = first_start };
	size_t len = 0, names = 0, oldlen = 0;
	int lfd, xfd, rv = -1;
	char *list = NULL, *old = NULL;

	memset(cost, 0, sizeof(*cost));
	lfd = sq_open_regular(pfd, "list", SQ_OPEN_NOFOLLOW, NULL);
	s.rfd = openat(pfd, "rootfs", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (lfd < 0 || s.rfd < 0 || (list = sq_read_all(lfd, &len)) == NULL)
		goto fail;
	for (size_t i = 0; i < len; i++)
		names += list[i] == '\n';   /* one name a line, the root's included */
	s.maybe_links = names > inodes;
	if ((s.done = calloc(names + 1, 1)) == NULL)
		goto fail;
	if ((old = last_plan(pfd, reuse, &oldlen)) != NULL) {
		s.old = old;
		s.old_end = old + oldlen;
	}
	/* Written aside and renamed over the last plan: a plan cut short is never read as
	 * one (its names are trusted without a look at the disk). */
	xfd = openat(pfd, "exclude.tmp", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW |
		     O_NONBLOCK | O_CLOEXEC, 0600);
	if (xfd >= 0 && (s.out = fdopen(xfd, "w")) == NULL)
		close(xfd);
	if (s.out == NULL || scan_listing(&s, list, 0) != 0)
		goto fail;
	if (s.nmissing > 0)
		qsort(s.missing, s.nmissing, sizeof(*s.missing), sig_cmp);
	if (scan_listing(&s, list, 1) != 0 || fflush(s.out) != 0 ||
	    renameat(pfd, "exclude.tmp", pfd, "exclude") != 0)
		goto fail;
	rv = 0;
fail:
	cost->kept = s.kept;
	cost->stats = s.stats;
	cost->links = s.maybe_links;
	if (s.out != NULL)
		fclose(s.out);
	if (lfd >= 0)
		close(lfd);
	if (s.rfd >= 0)
		close(s.rfd);
	free(list);
	free(old);
	free(s.done);
	free(s.missing);
	return rv;
}

/* One line of the listing: a directory or regular file whose mode on disk is not the
 * listed one gets it. 0 done (or nothing to do), -1 failed. */
static int apply_mode(int rfd, const char *line, size_t n)
{
	char name[PATH_MAX];
	struct sq_list_entry e;
	struct stat st;

	if (sq_cache_list_parse(line, n, &e) < 0)
		return -1;
	if ((e.type != '-' && e.type != 'd') || e.name_len >= sizeof(name))
		return 0;
	memcpy(name, line + e.name_off, e.name_len);
	name[e.name_len] = '\0';
	if (e.name_len == 0)
		snprintf(name, sizeof(name), ".");
	if (fstatat(rfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
	    (e.type == 'd' ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)))
		return -1;
	if ((st.st_mode & 07777) == e.mode)
		return 0;
	/* Not a link (just checked); the tree is the caller's own, as is the cache. */
	return fchmodat(rfd, name, (mode_t)e.mode, 0) == 0 ? 0 : -1;
}

/* 1 when every line of the listing parses. */
static int listing_trusted(const char *list, const size_t *starts, size_t nlines)
{
	struct sq_list_entry e;

	for (size_t i = 0; i < nlines; i++) {
		const char *line = list + starts[i];

		if (sq_cache_list_parse(line, (size_t)(strchrnul(line, '\n') - line), &e) < 0)
			return 0;
	}
	return 1;
}

/* Give every directory and regular file of KEY.part/rootfs the mode of KEY.part/list,
 * set-uid, set-gid and sticky bits included: unsquashfs run by a user other than root
 * gives regular files their mode less the umask (it runs with umask 0) and drops the
 * set-id bits of files and directories. That user owns the cache and every file in it, so
 * a set-uid bit there grants nothing (and the overlay over the tree is mounted nosuid);
 * it is there for the copy to be the image. chmod by the owner keeps set-gid: the files
 * have the caller's group. Every directory is opened up first, and the modes applied from
 * the end of the listing, children before their directory: a directory without search
 * permission for its owner takes its mode last. 0 ok, -1 failed. */
int sq_resume_apply_modes(int pfd, const char *rootfs)
{
	size_t len = 0, nlines = 0, *starts = NULL;
	int lfd, rfd, rv = -1;
	char *list = NULL;

	lfd = sq_open_regular(pfd, "list", SQ_OPEN_NOFOLLOW, NULL);
	rfd = openat(pfd, "rootfs", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (lfd < 0 || rfd < 0 || (list = sq_read_all(lfd, &len)) == NULL)
		goto fail;
	for (size_t i = 0; i < len; i++)
		nlines += list[i] == '\n';
	starts = malloc((nlines + 1) * sizeof(*starts));
	if (starts == NULL)
		goto fail;
	nlines = 0;
	for (size_t i = 0; i < len; i = strchrnul(list + i, '\n') - list + 1)
		starts[nlines++] = i;
	if (!listing_trusted(list, starts, nlines)) {
		/* A name with a newline: its lines cannot be told apart. Run by root, unsquashfs
		 * gave every mode; run by a user, no copy rather than one with other modes. */
		rv = geteuid() == 0 ? 0 : -1;
		goto fail;
	}
	(void)rootfs;
	open_listed_dirs(rfd, list, len);
	rv = 0;
	while (nlines > 0 && rv == 0) {
		const char *line = list + starts[--nlines];

		rv = apply_mode(rfd, line, (size_t)(strchrnul(line, '\n') - line));
	}
fail:
	if (lfd >= 0)
		close(lfd);
	if (rfd >= 0)
		close(rfd);
	free(starts);
	free(list);
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
		if (nlinked > 0)    /* qsort's array may not be NULL, even for no element */
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
