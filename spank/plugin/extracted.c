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
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "extracted.h"
#include "nodecache.h"
#include "procstat.h"
#include "safeopen.h"

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
	char err[512];

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

int sq_extracted_key(const char *path, const char *identity, char key[33])
{
	unsigned char sb[96];
	int fd = sq_open_regular(AT_FDCWD, path, 0, NULL);
	ssize_t n = fd >= 0 ? pread(fd, sb, sizeof(sb), 0) : -1;

	if (fd >= 0)
		close(fd);
	if (n != (ssize_t)sizeof(sb))
		return -1;
	return sq_cache_key(identity, sb, sizeof(sb), key);
}

const char *sq_extracted_tool(void)
{
	static const char *const tools[] = { "/usr/bin/unsquashfs", "/usr/sbin/unsquashfs",
					     "/bin/unsquashfs", "/usr/local/bin/unsquashfs", NULL };

	for (int i = 0; tools[i]; i++)
		if (access(tools[i], X_OK) == 0)
			return tools[i];
	return NULL;
}

int sq_extracted_ready(const char *cache_dir, const char *key)
{
	char path[PATH_MAX];
	struct stat st;

	entry_path(path, sizeof(path), cache_dir, key, "/rootfs");
	return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
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
	ssize_t n;
	int fd;

	snprintf(name, sizeof(name), "%s.size", key);
	fd = sq_open_regular(dfd, name, SQ_OPEN_NOFOLLOW, NULL);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
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

static void evict_in(int dfd, const char *cache_dir, unsigned long long max_bytes,
		     const char *held_key)
{
	struct sq_cache_entry entries[257];
	char keys[257][40], path[PATH_MAX], name[64];
	int locks[257], mark[257], kinds[257];
	unsigned long long extracting = 0;
	size_t n = 0;
	struct dirent *e;
	int fd = dup(dfd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;

	if (d == NULL) {
		if (fd >= 0)
			close(fd);
		return;
	}
	rewinddir(d);   /* a dup shares the offset of dirfd's earlier reads */
	/* Extractions of an older squall (KEY.tmp-PID) first, while no lock of an entry is
	 * held here: dead ones (and removals cut short) go, live ones count toward the limit
	 * while they exist. */
	while ((e = readdir(d)) != NULL) {
		const char *dot = strchr(e->d_name, '.');
		char key[33];

		if (dot == NULL || !is_key(e->d_name, (size_t)(dot - e->d_name)) ||
		    (strncmp(dot, ".tmp-", 5) != 0 && strncmp(dot, ".del-", 5) != 0))
			continue;
		memcpy(key, e->d_name, 32);
		key[32] = '\0';
		entry_path(path, sizeof(path), cache_dir, e->d_name, "");
		if (dot[1] == 'd' ||
		    extraction_dead(dfd, key, strtol(dot + 5, NULL, 10), held_key)) {
			remove_tree(path);
		} else {
			tree_bytes = 0;
			nftw(path, add_size, 32, FTW_PHYS);
			extracting += tree_bytes;
		}
	}
	rewinddir(d);
	/* Complete trees, and partial ones (KEY.part: an extraction cut short, which the next
	 * one resumes): both count, both go least recently used first; one whose lock is held
	 * (used, or being extracted) stays. */
	while ((e = readdir(d)) != NULL) {
		struct stat st;
		int kind = entry_kind(e->d_name);

		if (kind == 0 || n == 256)
			continue;
		snprintf(keys[n], sizeof(keys[n]), "%s", e->d_name);
		kinds[n] = kind;
		keys[n][32] = '\0';
		locks[n] = open_lock(dfd, keys[n], 1);
		if (kind == 2)
			keys[n][32] = '.';
		entries[n].in_use = locks[n] < 0 || flock(locks[n], LOCK_EX | LOCK_NB) < 0;
		entries[n].last_use = locks[n] >= 0 && fstat(locks[n], &st) == 0 ?
				      (long long)st.st_mtime : 0;
		if (kind == 1) {
			entries[n].bytes = read_size(dfd, keys[n]);
		} else {
			entry_path(path, sizeof(path), cache_dir, keys[n], "");
			tree_bytes = 0;
			nftw(path, add_size, 32, FTW_PHYS);
			entries[n].bytes = tree_bytes;
		}
		n++;
	}
	closedir(d);
	if (extracting > 0) {
		/* The trees being extracted: never evicted, counted. */
		entries[n] = (struct sq_cache_entry){ extracting, (long long)time(NULL), 1 };
		keys[n][0] = '\0';
		kinds[n] = 0;
		locks[n++] = -1;
	}
	sq_cache_evict_plan(entries, n, max_bytes, SQ_CACHE_MAX_AGE_S, (long long)time(NULL),
			    mark);
	for (size_t i = 0; i < n; i++) {
		if (mark[i] && keys[i][0]) {
			/* Renamed first: a tree half removed is never taken for a complete one. */
			snprintf(name, sizeof(name), "%.32s.del-%d", keys[i], (int)getpid());
			entry_path(path, sizeof(path), cache_dir, name, "");
			if (renameat(dfd, keys[i], dfd, name) == 0)
				remove_tree(path);
			if (kinds[i] == 1) {
				snprintf(name, sizeof(name), "%.32s.size", keys[i]);
				unlinkat(dfd, name, 0);
			}
		}
		if (locks[i] >= 0)
			close(locks[i]);
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

/* --- The extraction, governed (nodecache.h "Yielding to the step") --- */

struct gov_sample {
	unsigned long long now_us, busy_us, own_us;
	long long io_us;
};

static unsigned long long mono_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (unsigned long long)t.tv_sec * 1000000ULL + (unsigned long long)t.tv_nsec / 1000;
}

/* The first line of a /proc file, NUL-terminated, or "" (never blocks: /proc). */
static void read_proc(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, len - 1) : -1;

	if (fd >= 0)
		close(fd);
	buf[n > 0 ? n : 0] = '\0';
}

static void sample(pid_t pid, struct gov_sample *g)
{
	char buf[1024], path[64];
	unsigned long long v[8] = { 0 }, ut = 0, st = 0;
	long tick = sysconf(_SC_CLK_TCK);
	const char *p;

	if (tick <= 0)
		tick = 100;
	g->now_us = mono_us();
	read_proc("/proc/stat", buf, sizeof(buf));
	/* cpu user nice system idle iowait irq softirq steal */
	if (sscanf(buf, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
		   &v[3], &v[4], &v[5], &v[6], &v[7]) == 8)
		g->busy_us = (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) * 1000000ULL /
			     (unsigned long long)tick;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	read_proc(path, buf, sizeof(buf));
	/* after "(comm)": state ppid pgrp session tty tpgid flags minflt cminflt majflt
	 * cmajflt utime stime */
	p = strrchr(buf, ')');
	if (p != NULL && sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
				&ut, &st) == 2)
		g->own_us = (ut + st) * 1000000ULL / (unsigned long long)tick;
	read_proc("/proc/pressure/io", buf, sizeof(buf));
	p = strstr(buf, "total=");
	g->io_us = p != NULL ? strtoll(p + 6, NULL, 10) : -1;
}

/* Sleep ms unless the child exits first: 1 exited (*status set), 0 not. */
static int nap_or_exit(pid_t pid, long ms, int *status)
{
	unsigned long long until = mono_us() + (unsigned long long)ms * 1000ULL;

	for (;;) {
		unsigned long long now = mono_us();
		long left = now >= until ? 0 : (long)((until - now) / 1000);
		struct timespec t = { 0, (left < 10 ? left : 10) * 1000000L };
		pid_t r = waitpid(pid, status, WNOHANG);

		if (r == pid || (r < 0 && errno != EINTR))
			return 1;
		if (left <= 0)
			return 0;
		nanosleep(&t, NULL);
	}
}

/* Run argv (the extractor) with stdout on out_fd (or /dev/null), in a process group of its
 * own, at SCHED_IDLE, nice 19 and ioprio idle, killed when this process dies (it may be
 * stopped then); SIGCONT / SIGSTOP in a duty cycle decided by sq_yield_next each period.
 * Returns its wait status, -1 when it could not be started. */
static int run_governed(char *const argv[], int out_fd)
{
	struct gov_sample a, b;
	int status = -1, duty = SQ_YIELD_FULL, stopped = 0;
	pid_t parent = getpid(), pid = fork();

	if (pid < 0)
		return -1;
	if (pid == 0) {
		struct sched_param none = { 0 };
		int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);

		setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		if (devnull >= 0) {
			dup2(devnull, 0);
			dup2(out_fd >= 0 ? out_fd : devnull, 1);
		}
		setpriority(PRIO_PROCESS, 0, 19);
		syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, IOPRIO_CLASS_IDLE << 13);
		sched_setscheduler(0, SCHED_IDLE, &none);
		execv(argv[0], argv);
		_exit(127);
	}
	setpgid(pid, pid);
	sample(pid, &a);
	for (;;) {
		long run_ms = SQ_YIELD_PERIOD_MS * duty / SQ_YIELD_FULL;
		struct sq_yield_obs o;

		if (stopped) {
			kill(-pid, SIGCONT);
			stopped = 0;
		}
		if (nap_or_exit(pid, run_ms, &status))
			break;
		if (duty < SQ_YIELD_FULL) {
			kill(-pid, SIGSTOP);
			stopped = 1;
			if (nap_or_exit(pid, SQ_YIELD_PERIOD_MS - run_ms, &status))
				break;
		}
		sample(pid, &b);
		o.window_us = b.now_us - a.now_us;
		o.busy_us = b.busy_us > a.busy_us ? b.busy_us - a.busy_us : 0;
		o.own_us = b.own_us > a.own_us ? b.own_us - a.own_us : 0;
		o.io_stall_us = a.io_us >= 0 && b.io_us >= a.io_us ? b.io_us - a.io_us : -1;
		duty = sq_yield_next(duty, &o);
		a = b;
	}
	return status;
}

/* --- Resuming (nodecache.h "Resuming an extraction cut short") --- */

/* The image's superblock inode count, 0 when unknown. */
static unsigned long image_inodes(const char *image)
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
static long long read_started(int pfd)
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

static int write_started(int pfd, long long t)
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
static int plan_resume(int pfd, long long first_start, unsigned long inodes, size_t *kept)
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
static unsigned long tree_inodes(const char *path)
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

/* Make KEY.part (with its record) ready to extract into: 1 resume (exclude written),
 * 0 from scratch, -1 failed. */
static int prepare_part(int dfd, const char *cache_dir, const char *key, const char *image,
			const char *unsquashfs, int *pfd_out, unsigned long *inodes)
{
	char part[64], path[PATH_MAX], dest[PATH_MAX + 16], list[PATH_MAX + 16];
	const char *argv[24];
	long long first = 0;
	size_t kept = 0;
	struct stat st;
	int pfd, lfd, status;

	snprintf(part, sizeof(part), "%s.part", key);
	entry_path(path, sizeof(path), cache_dir, part, "");
	*inodes = image_inodes(image);
	pfd = openat(dfd, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (pfd >= 0) {
		first = read_started(pfd);
		if (first <= 0 || first > (long long)time(NULL) || *inodes == 0 ||
		    fstatat(pfd, "rootfs", &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode)) {
			close(pfd);
			pfd = -1;
		}
	}
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
		if (pfd < 0 || write_started(pfd, (long long)time(NULL)) < 0) {
			if (pfd >= 0)
				close(pfd);
			return -1;
		}
		*pfd_out = pfd;
		return 0;
	}
	*pfd_out = pfd;
	/* The image's listing, then what of it is on disk already. */
	snprintf(list, sizeof(list), "%s/list", path);
	lfd = openat(pfd, "list", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK |
		     O_CLOEXEC, 0600);
	if (lfd < 0)
		return -1;
	argv[0] = unsquashfs;
	argv[1] = "-llnumeric";
	argv[2] = "-UTC";
	argv[3] = image;
	argv[4] = NULL;
	status = run_governed((char *const *)argv, lfd);
	close(lfd);
	snprintf(dest, sizeof(dest), "%s/rootfs", path);
	if (status != 0 || plan_resume(pfd, first, *inodes, &kept) < 0) {
		remove_tree(dest);
		unlinkat(pfd, "list", 0);
		unlinkat(pfd, "exclude", 0);
		return write_started(pfd, (long long)time(NULL)) < 0 ? -1 : 0;
	}
	/* Directories it may have to write into again (a 0555 one given its mode early):
	 * every directory is walked by the run, which gives each its mode and times. */
	nftw(dest, open_up, 32, FTW_PHYS);
	return 1;
}

int sq_extracted_build(const char *cache_dir, const char *key, const char *image,
		       const char *unsquashfs, unsigned long long max_bytes)
{
	char part[64], name[64], path[PATH_MAX], dest[PATH_MAX + 16], exclude[PATH_MAX + 16];
	const char *argv[24];
	unsigned long inodes = 0;
	int dfd, fd, pfd = -1, sfd, status, rv = -1, sized = 0, resume;

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
	resume = prepare_part(dfd, cache_dir, key, image, unsquashfs, &pfd, &inodes);
	if (resume < 0)
		goto fail;
	extract_argv(argv, unsquashfs, dest, image, resume ? exclude : NULL);
	status = run_governed((char *const *)argv, -1);
	if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		goto fail;
	/* Resumed: as many inodes as the image (a hard link cut apart would be a copy). */
	if (resume && tree_inodes(dest) != inodes)
		goto fail;
	unlinkat(pfd, "list", 0);
	unlinkat(pfd, "exclude", 0);
	unlinkat(pfd, "started", 0);
	tree_bytes = 0;
	nftw(path, add_size, 32, FTW_PHYS);
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
	if (renameat(dfd, part, dfd, key) == 0)
		rv = 0;
fail:
	if (rv < 0) {
		/* A run that failed (not one cut short: that never gets here) is not resumed. */
		remove_tree(path);
		if (sized)
			unlinkat(dfd, name, 0);
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

static int write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = write(fd, text, strlen(text));
	close(fd);
	return n == (ssize_t)strlen(text) ? 0 : -1;
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
	if (write_file("/proc/self/uid_map", map) < 0 ||
	    write_file("/proc/self/setgroups", "deny") < 0)
		goto fail;
	snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)gid, (unsigned)gid);
	if (write_file("/proc/self/gid_map", map) < 0 ||
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
