/* extracted.c: see extracted.h. */
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

#include "extracted.h"
#include "extracted_name.h"
#include "governor.h"
#include "nodecache.h"
#include "procstat.h"
#include "resume.h"
#include "safeopen.h"
#include "shared_copy.h"
#include "smallio.h"
#include "strbuf.h"

#define IOPRIO_CLASS_IDLE 3
#define IOPRIO_WHO_PROCESS 1

static void entry_path(char *buf, size_t len, const char *dir, const char *key,
		       const char *suffix)
{
	if ((size_t)snprintf(buf, len, "%s/%s%s", dir, key, suffix) >= len)
		buf[0] = '\0';   /* too long: names nothing */
}

/* The user's cache directory, opened O_NOFOLLOW|O_DIRECTORY and checked (a directory of the
 * caller's or root's, not writable by others): entries are reached relative to it. */
static int open_cache(const char *cache_dir)
{
	char err[SQ_ERR_LEN];

	return sq_dir_open_checked(AT_FDCWD, cache_dir, (long)getuid(), err, sizeof(err));
}

/* KEY.lock in the cache, a regular file (made when create is set), or -1. */
static int open_lock(int dfd, const char *key, int create)
{
	char name[64];
	struct stat st;
	int fd;

	snprintf(name, sizeof(name), "%s.lock", key);
	fd = openat(dfd, name, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | (create ? O_CREAT : 0),
		    0600);
	if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))) {
		close(fd);
		errno = EINVAL;
		return -1;
	}
	return fd;
}

int sq_extracted_hold(const char *cache_dir, const char *key)
{
	int dfd = open_cache(cache_dir);
	int fd = dfd >= 0 ? open_lock(dfd, key, 1) : -1;

	if (dfd >= 0)
		close(dfd);
	if (fd < 0)
		return -1;
	if (flock(fd, LOCK_SH | LOCK_NB) < 0 || !sq_extracted_ready(cache_dir, key)) {
		close(fd);
		return -1;
	}
	futimens(fd, NULL);
	return fd;
}

/* nftw callbacks: make every directory writable (a tree may hold 0555 ones), then
 * remove depth first; sum the sizes. */
static unsigned long long tree_bytes;

static int open_up(const char *path, const struct stat *st, int type, struct FTW *f)
{
	(void)f;
	if (type == FTW_D && (st->st_mode & 0700) != 0700)
		chmod(path, (st->st_mode & 07777) | 0700);
	return 0;
}

static int remove_one(const char *path, const struct stat *st, int type, struct FTW *f)
{
	(void)st;
	(void)f;
	if (type == FTW_DP)
		rmdir(path);
	else
		unlink(path);
	return 0;
}

static int add_size(const char *path, const struct stat *st, int type, struct FTW *f)
{
	(void)path;
	(void)type;
	(void)f;
	tree_bytes += (unsigned long long)st->st_blocks * 512ULL;
	return 0;
}

static void remove_tree(const char *path)
{
	nftw(path, open_up, 32, FTW_PHYS);
	nftw(path, remove_one, 32, FTW_PHYS | FTW_DEPTH);
}

static int is_key(const char *name, size_t len)
{
	if (len != 32)
		return 0;
	for (size_t i = 0; i < len; i++)
		if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
			return 0;
	return 1;
}

/* An extraction KEY.tmp-PID is dead when its process is gone or a zombie (kill(pid, 0)
 * succeeds on a zombie), or when nobody holds KEY's lock: its extraction holds it from
 * before it makes the directory until it is renamed or removed, so a free lock means the
 * PID was reused. held_key: the key whose lock the caller holds (nobody else extracts it). */
static int extraction_dead(int dfd, const char *key, long pid, const char *held_key)
{
	unsigned long long start;
	char state;
	int fd, free_lock;

	if (pid <= 0 || pid > INT_MAX || sq_procstat_read(pid, &state, &start) < 0 ||
	    state == 'Z' || state == 'X')
		return 1;
	if (held_key != NULL && strcmp(key, held_key) == 0)
		return 1;
	fd = open_lock(dfd, key, 0);
	if (fd < 0)
		return errno == ENOENT;
	free_lock = flock(fd, LOCK_EX | LOCK_NB) == 0;
	close(fd);
	return free_lock;
}

/* Bytes of KEY.size, 0 when it is missing or not a regular file (never followed). */
static unsigned long long read_size(int dfd, const char *key)
{
	unsigned long long bytes = 0;
	char name[64], buf[32];

	snprintf(name, sizeof(name), "%s.size", key);
	if (sq_read_text(sq_open_regular(dfd, name, SQ_OPEN_NOFOLLOW, NULL), buf, sizeof(buf)) <= 0)
		return 0;
	if (sscanf(buf, "%llu", &bytes) != 1)
		bytes = 0;
	return bytes;
}

/* "KEY" (a complete tree) -> 1, "KEY.part" (a partial one, resumable) -> 2, else 0. */
static int entry_kind(const char *name)
{
	size_t len = strlen(name);

	if (is_key(name, len))
		return 1;
	return len == 37 && is_key(name, 32) && strcmp(name + 32, ".part") == 0 ? 2 : 0;
}

/* The cache's entries as evict_in plans them: up to 256 trees, and one more for the
 * extractions in progress (never evicted, counted). */
struct evict_list {
	struct sq_cache_entry entries[257];
	char keys[257][40];     /* "KEY" or "KEY.part"; "" for the extractions in progress */
	int locks[257];         /* each tree's lock fd, held when it could be taken; -1 none */
	int kinds[257];         /* entry_kind's: 1 complete, 2 partial */
	int mark[257];
	size_t n;
};

/* Bytes the tree at cache_dir/name takes on disk. */
static unsigned long long tree_size(const char *cache_dir, const char *name)
{
	char path[PATH_MAX];

	entry_path(path, sizeof(path), cache_dir, name, "");
	tree_bytes = 0;
	nftw(path, add_size, 32, FTW_PHYS);
	return tree_bytes;
}

/* A copy of an image (shared_copy.h) that nothing will use: KEY.sqsh staged by an
 * extraction that died (KEY's lock free), or a broadcast's copy-JOB.STEP.* that no keeper
 * holds and slurmd no longer writes (sq_copy_unused: an ended job's, or one whose keeper
 * died before it took it). */
static void clear_old_copy(int dfd, const char *name, const char *held_key)
{
	struct stat st;
	char key[33];
	int fd;

	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || S_ISDIR(st.st_mode))
		return;
	if (strncmp(name, "copy-", 5) == 0) {
		if (sq_copy_unused(dfd, name, (long long)time(NULL)))
			unlinkat(dfd, name, 0);
		return;
	}
	memcpy(key, name, 32);
	key[32] = '\0';
	if (held_key != NULL && strcmp(key, held_key) == 0)
		return;     /* the caller's own extraction stages it */
	fd = open_lock(dfd, key, 0);
	if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) == 0)
		unlinkat(dfd, name, 0);
	if (fd >= 0)
		close(fd);
}

/* Extractions of an older squall (KEY.tmp-PID), while no lock of an entry is held here:
 * dead ones (and removals cut short, KEY.del-PID) go, live ones count toward the limit
 * while they exist. Returns the live ones' bytes. */
static unsigned long long clear_old_extractions(DIR *d, int dfd, const char *cache_dir,
						const char *held_key)
{
	unsigned long long extracting = 0;
	char path[PATH_MAX];
	struct dirent *e;

	rewinddir(d);   /* a dup shares the offset of dirfd's earlier reads */
	while ((e = readdir(d)) != NULL) {
		const char *dot = strchr(e->d_name, '.');
		char key[33];

		if (strncmp(e->d_name, "copy-", 5) == 0 ||
		    (dot != NULL && is_key(e->d_name, (size_t)(dot - e->d_name)) &&
		     strcmp(dot, ".sqsh") == 0)) {
			clear_old_copy(dfd, e->d_name, held_key);
			continue;
		}
		if (dot == NULL || !is_key(e->d_name, (size_t)(dot - e->d_name)) ||
		    (strncmp(dot, ".tmp-", 5) != 0 && strncmp(dot, ".del-", 5) != 0))
			continue;
		memcpy(key, e->d_name, 32);
		key[32] = '\0';
		entry_path(path, sizeof(path), cache_dir, e->d_name, "");
		if (dot[1] == 'd' ||
		    extraction_dead(dfd, key, strtol(dot + 5, NULL, 10), held_key))
			remove_tree(path);
		else
			extracting += tree_size(cache_dir, e->d_name);
	}
	return extracting;
}

/* One tree (kind 1 "KEY", 2 "KEY.part") into the list: its lock taken when free (one in
 * use, or being extracted, stays), its last use the lock's mtime, its bytes. */
static void add_tree(struct evict_list *l, int dfd, const char *cache_dir, const char *name,
		     int kind)
{
	size_t n = l->n++;
	struct stat st;

	snprintf(l->keys[n], sizeof(l->keys[n]), "%s", name);
	l->kinds[n] = kind;
	l->keys[n][32] = '\0';
	l->locks[n] = open_lock(dfd, l->keys[n], 1);
	if (kind == 2)
		l->keys[n][32] = '.';
	l->entries[n].in_use = l->locks[n] < 0 || flock(l->locks[n], LOCK_EX | LOCK_NB) < 0;
	l->entries[n].last_use = l->locks[n] >= 0 && fstat(l->locks[n], &st) == 0 ?
				 (long long)st.st_mtime : 0;
	l->entries[n].bytes = kind == 1 ? read_size(dfd, l->keys[n]) :
			      tree_size(cache_dir, l->keys[n]);
}

/* Renamed first: a tree half removed is never taken for a complete one. */
static void evict_one(int dfd, const char *cache_dir, const char *key, int kind)
{
	char path[PATH_MAX], name[64];

	snprintf(name, sizeof(name), "%.32s.del-%d", key, (int)getpid());
	entry_path(path, sizeof(path), cache_dir, name, "");
	if (renameat(dfd, key, dfd, name) == 0)
		remove_tree(path);
	if (kind == 1) {
		snprintf(name, sizeof(name), "%.32s.size", key);
		unlinkat(dfd, name, 0);
	}
}

static void evict_in(int dfd, const char *cache_dir, unsigned long long max_bytes,
		     const char *held_key)
{
	struct evict_list l;
	unsigned long long extracting;
	struct dirent *e;
	int fd = dup(dfd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;

	if (d == NULL) {
		if (fd >= 0)
			close(fd);
		return;
	}
	extracting = clear_old_extractions(d, dfd, cache_dir, held_key);
	/* Complete trees, and partial ones (KEY.part: an extraction cut short, which the next
	 * one resumes): both count, both go least recently used first. */
	l.n = 0;
	rewinddir(d);
	while ((e = readdir(d)) != NULL) {
		int kind = entry_kind(e->d_name);

		if (kind != 0 && l.n < 256)
			add_tree(&l, dfd, cache_dir, e->d_name, kind);
	}
	closedir(d);
	if (extracting > 0) {
		l.entries[l.n] = (struct sq_cache_entry){ extracting, (long long)time(NULL), 1 };
		l.keys[l.n][0] = '\0';
		l.kinds[l.n] = 0;
		l.locks[l.n++] = -1;
	}
	sq_cache_evict_plan(l.entries, l.n, max_bytes, SQ_CACHE_MAX_AGE_S,
			    (long long)time(NULL), l.mark);
	for (size_t i = 0; i < l.n; i++) {
		if (l.mark[i] && l.keys[i][0])
			evict_one(dfd, cache_dir, l.keys[i], l.kinds[i]);
		if (l.locks[i] >= 0)
			close(l.locks[i]);
	}
}

void sq_extracted_evict(const char *cache_dir, unsigned long long max_bytes)
{
	int dfd = open_cache(cache_dir);

	if (dfd < 0)
		return;
	evict_in(dfd, cache_dir, max_bytes, NULL);
	close(dfd);
}

/* nftw: what the extraction wrote leaves the page cache once it is on disk, so that it
 * does not push out what the job's steps read. */
static int drop_cached(const char *path, const struct stat *st, int type, struct FTW *f)
{
	(void)f;
	if (type == FTW_F && S_ISREG(st->st_mode)) {
		int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
		if (fd >= 0) {
			posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
			close(fd);
		}
	}
	return 0;
}

/* An unsquashfs argv: -f (over a partial tree) and -exclude-file when exclude is given. */
static void extract_argv(const char **argv, const char *unsquashfs, const char *dest,
			 const char *image, const char *exclude)
{
	int i = 0;

	argv[i++] = unsquashfs;
	argv[i++] = "-no-progress";
	argv[i++] = "-no-xattrs";
	/* One decompressor and small queues: less CPU and memory taken from the steps. */
	argv[i++] = "-p";
	argv[i++] = "1";
	argv[i++] = "-da";
	argv[i++] = "16";
	argv[i++] = "-fr";
	argv[i++] = "16";
	if (exclude != NULL) {
		argv[i++] = "-f";
		argv[i++] = "-no-wildcards";
		argv[i++] = "-exclude-file";
		argv[i++] = exclude;
	}
	argv[i++] = "-d";
	argv[i++] = dest;
	argv[i++] = image;
	argv[i] = NULL;
}

/* A record of KEY.part (a regular file, never followed) is there. */
static int has_record(int pfd, const char *name)
{
	int fd = sq_open_regular(pfd, name, SQ_OPEN_NOFOLLOW, NULL);

	if (fd < 0)
		return 0;
	close(fd);
	return 1;
}

/* An empty record of KEY.part. 0 ok, -1 failed. */
static int put_record(int pfd, const char *name)
{
	int fd = openat(pfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK |
			O_CLOEXEC, 0600);

	if (fd < 0)
		return -1;
	close(fd);
	return 0;
}

/* KEY.part/list: the image's listing (`unsquashfs -llnumeric -UTC`), which a resumed
 * run plans from and every run takes the modes from. Written aside and renamed, then
 * KEY.part/listed says that list (and the plans, exclude) are whole: a later run takes
 * them as they are instead of listing the image again (its key names the image). 0 ok,
 * -1 failed. */
static int write_listing(int pfd, const char *unsquashfs, const char *image, int *duty)
{
	const char *argv[] = { unsquashfs, "-llnumeric", "-UTC", image, NULL };
	int lfd, status;

	unlinkat(pfd, "listed", 0);
	lfd = openat(pfd, "list.tmp", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK |
		     O_CLOEXEC, 0600);
	if (lfd < 0)
		return -1;
	status = sq_run_governed_at((char *const *)argv, lfd, duty);
	close(lfd);
	if (status != 0 || renameat(pfd, "list.tmp", pfd, "list") != 0)
		return -1;
	return put_record(pfd, "listed");
}

/* The records of KEY.part, removed once the tree is published (or started over). */
static const char *const part_records[] = { "list", "list.tmp", "listed", "exclude",
					    "exclude.tmp", "extracted", "started", NULL };

static void drop_records(int pfd)
{
	for (int i = 0; part_records[i] != NULL; i++)
		unlinkat(pfd, part_records[i], 0);
}

/* An earlier run's KEY.part to resume from, or -1 (nothing, or records that cannot be
 * trusted); *first: when its first run began. */
static int open_resumable(int dfd, const char *part, unsigned long inodes, long long *first)
{
	struct stat st;
	int pfd = openat(dfd, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	if (pfd < 0)
		return -1;
	*first = sq_resume_read_started(pfd);
	if (*first <= 0 || *first > (long long)time(NULL) || inodes == 0 ||
	    fstatat(pfd, "rootfs", &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode)) {
		close(pfd);
		return -1;
	}
	return pfd;
}

/* Make KEY.part (with its record) ready to extract into: 2 extracted already (a run cut
 * after unsquashfs: give the modes and publish), 1 resume (exclude written), 0 from
 * scratch, -1 failed. *duty: the governor's duty to start at, left where the listing's
 * run ended; *links: the image has hard links. */
static int prepare_part(int dfd, const char *cache_dir, const char *key, const char *image,
			const char *unsquashfs, int *pfd_out, unsigned long *inodes, int *duty,
			int *links)
{
	char part[64], path[PATH_MAX], dest[PATH_MAX + 16];
	struct sq_resume_cost cost;
	long long first = 0;
	struct stat st;
	int pfd, status = 0, listed;

	snprintf(part, sizeof(part), "%s.part", key);
	entry_path(path, sizeof(path), cache_dir, part, "");
	*inodes = sq_resume_image_inodes(image);
	pfd = open_resumable(dfd, part, *inodes, &first);
	if (pfd < 0) {
		/* Nothing to resume (or a record that cannot be trusted): from scratch. */
		if (fstatat(dfd, part, &st, AT_SYMLINK_NOFOLLOW) == 0) {
			if (S_ISDIR(st.st_mode))
				remove_tree(path);
			else
				unlinkat(dfd, part, 0);
		}
		if (mkdirat(dfd, part, 0700) < 0)
			return -1;
		pfd = openat(dfd, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (pfd < 0 || sq_resume_write_started(pfd, (long long)time(NULL)) < 0 ||
		    write_listing(pfd, unsquashfs, image, duty) < 0) {
			if (pfd >= 0)
				close(pfd);
			return -1;
		}
		*pfd_out = pfd;
		return 0;
	}
	*pfd_out = pfd;
	/* Resumed: at full speed from the first period (it yields from the first one in which
	 * other work shows); a short job has no time for a slow start. */
	*duty = SQ_YIELD_FULL;
	/* The listing and plan an earlier run of this squall left are whole (listed): taken
	 * as they are; an older squall's are made again. */
	listed = has_record(pfd, "listed") && has_record(pfd, "list");
	if (listed && has_record(pfd, "extracted"))
		return 2;
	if (!listed)
		status = write_listing(pfd, unsquashfs, image, duty);
	snprintf(dest, sizeof(dest), "%s/rootfs", path);
	if (status != 0 || sq_resume_plan(pfd, first, *inodes, listed, &cost) < 0) {
		remove_tree(dest);
		unlinkat(pfd, "exclude", 0);
		if (status != 0 || sq_resume_write_started(pfd, (long long)time(NULL)) < 0)
			return -1;
		return 0;
	}
	*links = cost.links;
	/* Directories it may have to write into again (a 0555 one given its mode early),
	 * from the listing: the run walks every directory and gives each its mode and times. */
	sq_resume_open_dirs(pfd);
	return 1;
}

/* The image this extraction reads: a node-local copy when there is one (the step's
 * broadcast, shared_copy.h, or what an earlier run of this key left in KEY.part), staged as
 * KEY.sqsh while prepare_part may start KEY.part over, then kept in KEY.part/image.sqsh so
 * that a resumed run reads it again instead of the shared file system. 1: staged at
 * staged (CACHE/KEY.sqsh), 0: none, read the image. */
static int stage_copy(int dfd, const char *key, const char *copy, const char *staged)
{
	char name[64], kept[96];

	snprintf(name, sizeof(name), "%s.sqsh", key);
	snprintf(kept, sizeof(kept), "%s.part/image.sqsh", key);
	unlinkat(dfd, name, 0);
	return (copy != NULL && rename(copy, staged) == 0) ||
	       renameat(dfd, kept, dfd, name) == 0;
}

/* The staged copy into the prepared KEY.part (pfd, at path): its path there, or NULL. */
static const char *keep_copy(int dfd, const char *key, int pfd, const char *path,
			     char *source, size_t len)
{
	char name[64];

	snprintf(name, sizeof(name), "%s.sqsh", key);
	snprintf(source, len, "%s/image.sqsh", path);
	return renameat(dfd, name, pfd, "image.sqsh") == 0 ? source : NULL;
}

/* Run unsquashfs into dest (over a partial tree, leaving out the files of exclude, when
 * exclude is given), then check a resumed tree of an image with hard links has inodes
 * inodes (0: no check), then say so in KEY.part/extracted. 0 ok, -1 failed. */
static int extract(int pfd, const char *unsquashfs, const char *dest, const char *image,
		   const char *exclude, unsigned long inodes, int *duty)
{
	const char *argv[24];
	mode_t mask;
	int status;

	extract_argv(argv, unsquashfs, dest, image, exclude);
	/* umask 0: unsquashfs run by a user gives a file its mode less the umask (the modes it
	 * drops, set-id bits, are given from the listing after it). xattrs stay out
	 * (-no-xattrs), as before. */
	mask = umask(0);
	status = sq_run_governed_at((char *const *)argv, -1, duty);
	umask(mask);
	if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return -1;
	/* Resumed: as many inodes as the image (a hard link cut apart would be a copy; with
	 * no hard links in the image there is none to cut). */
	if (inodes != 0 && sq_resume_tree_inodes(dest) != inodes)
		return -1;
	/* Extracted: a job's end from here on leaves a tree the next run gives its modes and
	 * publishes, without listing or extracting again. */
	return put_record(pfd, "extracted");
}

static int build(const char *cache_dir, const char *key, const char *image,
		 const char *copy, const char *unsquashfs, unsigned long long max_bytes)
{
	char part[64], name[64], path[PATH_MAX], dest[PATH_MAX + 16], exclude[PATH_MAX + 16];
	char staged[PATH_MAX], source[PATH_MAX + 16];
	unsigned long inodes = 0;
	int dfd, fd, pfd = -1, sfd, rv = -1, sized = 0, resume, links = 0;
	int duty = SQ_YIELD_START;

	if (strlen(cache_dir) + 64 >= PATH_MAX || strlen(key) != 32)
		return -1;
	/* This process governs the extractor: its own CPU priority stays, its I/O is idle. */
	syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, IOPRIO_CLASS_IDLE << 13);
	if ((dfd = open_cache(cache_dir)) < 0)
		return -1;
	fd = open_lock(dfd, key, 1);
	if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0) {
		if (fd >= 0)
			close(fd);
		close(dfd);
		return 0;    /* another job extracts it (or uses it: then it is complete) */
	}
	if (sq_extracted_ready(cache_dir, key)) {
		close(fd);
		close(dfd);
		return 0;
	}
	futimens(fd, NULL);    /* a partial tree in use now is not the first to be evicted */
	evict_in(dfd, cache_dir, max_bytes, key);
	snprintf(part, sizeof(part), "%s.part", key);
	entry_path(path, sizeof(path), cache_dir, part, "");
	snprintf(dest, sizeof(dest), "%s/rootfs", path);
	snprintf(exclude, sizeof(exclude), "%s/exclude", path);
	snprintf(name, sizeof(name), "%s.size", key);
	entry_path(staged, sizeof(staged), cache_dir, key, ".sqsh");
	if (staged[0] && stage_copy(dfd, key, copy, staged))
		image = staged;
	resume = prepare_part(dfd, cache_dir, key, image, unsquashfs, &pfd, &inodes, &duty,
			      &links);
	if (resume < 0)
		goto fail;
	if (image == staged && (image = keep_copy(dfd, key, pfd, path, source,
						  sizeof(source))) == NULL)
		goto fail;
	if (resume < 2 && extract(pfd, unsquashfs, dest, image, resume ? exclude : NULL,
				  resume && links ? inodes : 0, &duty) < 0)
		goto fail;
	if (sq_resume_apply_modes(pfd, dest) < 0)
		goto fail;
	/* The records (started, list, listed, exclude, extracted) stay until the tree is published: a job's end
	 * before the rename leaves a tree the next run resumes (and publishes), not one it
	 * cannot trust and starts over. The tree alone is counted. */
	tree_bytes = 0;
	nftw(dest, add_size, 32, FTW_PHYS);
	/* On disk before it is published: a crash never leaves a complete-looking, empty
	 * tree. Then out of the page cache. */
	syncfs(pfd);
	nftw(dest, drop_cached, 32, FTW_PHYS);
	sfd = openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
		     0600);
	if (sfd >= 0) {
		sized = dprintf(sfd, "%llu\n", tree_bytes) > 0;
		close(sfd);
	}
#ifdef SQ_TEST_CUT_BEFORE_PUBLISH
	/* Tests only (tests/unit/test_plugin_extracted_modes.py): stop here, where a job's
	 * end may kill the extraction, for the test to kill it. Never defined otherwise. */
	raise(SIGSTOP);
#endif
	if (renameat(dfd, part, dfd, key) == 0) {
		/* Published: the records go (pfd is the tree's directory under its new name).
		 * Cut before they do, they are a few small files in KEY beside rootfs, which
		 * nothing reads there (sq_extracted_ready looks at KEY/rootfs) and eviction
		 * removes with the tree. */
		drop_records(pfd);
		unlinkat(pfd, "image.sqsh", 0);
		rv = 0;
	}
fail:
	if (rv < 0) {
		/* A run that failed (not one cut short: that never gets here) is not resumed. */
		remove_tree(path);
		if (sized)
			unlinkat(dfd, name, 0);
		unlinkat(dfd, staged + strlen(cache_dir) + 1, 0);   /* staged, not yet kept */
	} else {
		/* The new tree counts now (it is never evicted itself: its lock is held here). */
		evict_in(dfd, cache_dir, max_bytes, NULL);
	}
	if (pfd >= 0)
		close(pfd);
	futimens(fd, NULL);
	close(fd);
	close(dfd);
	return rv;
}

int sq_extracted_build(const char *cache_dir, const char *key, const char *image,
		       const char *copy, const char *unsquashfs, unsigned long long max_bytes)
{
	int rv = build(cache_dir, key, image, copy, unsquashfs, max_bytes);

	if (copy != NULL)
		unlink(copy);   /* not taken (another job extracts, the tree is there): consumed */
	return rv;
}

int sq_extracted_mount(const char *cache_dir, const char *key, const char *data_dir,
		       const char *name)
{
	char map[64], lower[PATH_MAX], upper[PATH_MAX + 8], work[PATH_MAX + 8];
	char target[PATH_MAX + 8], data[3 * PATH_MAX + 64];
	uid_t uid = getuid();
	gid_t gid = getgid();

	entry_path(lower, sizeof(lower), cache_dir, key, "/rootfs");
	if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0)
		goto fail;
	snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)uid, (unsigned)uid);
	if (sq_write_text("/proc/self/uid_map", map) < 0 ||
	    sq_write_text("/proc/self/setgroups", "deny") < 0)
		goto fail;
	snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)gid, (unsigned)gid);
	if (sq_write_text("/proc/self/gid_map", map) < 0 ||
	    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("squall-cache", data_dir, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700") < 0)
		goto fail;
	snprintf(upper, sizeof(upper), "%s/.upper", data_dir);
	snprintf(work, sizeof(work), "%s/.work", data_dir);
	snprintf(target, sizeof(target), "%s/%s", data_dir, name);
	if (mkdir(upper, 0755) < 0 || mkdir(work, 0700) < 0 || mkdir(target, 0755) < 0)
		goto fail;
	snprintf(data, sizeof(data), "lowerdir=%s,upperdir=%s,workdir=%s,userxattr", lower,
		 upper, work);
	if (mount("overlay", target, "overlay", MS_NOSUID | MS_NODEV, data) < 0)
		goto fail;
	return 0;
fail:
	fprintf(stderr, "squall: cannot mount the extracted image %s for the runtime: %s\n",
		lower, strerror(errno));
	return -1;
}
