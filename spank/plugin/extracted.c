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
#include "nodecache.h"

#define IOPRIO_CLASS_IDLE 3
#define IOPRIO_WHO_PROCESS 1

static void entry_path(char *buf, size_t len, const char *dir, const char *key,
		       const char *suffix)
{
	if ((size_t)snprintf(buf, len, "%s/%s%s", dir, key, suffix) >= len)
		buf[0] = '\0';   /* too long: names nothing */
}

int sq_extracted_key(const char *path, const char *identity, char key[33])
{
	unsigned char sb[96];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
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
	char path[PATH_MAX];
	int fd;

	entry_path(path, sizeof(path), cache_dir, key, ".lock");
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
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

void sq_extracted_evict(const char *cache_dir, unsigned long long max_bytes)
{
	struct sq_cache_entry entries[256];
	char keys[256][33], path[PATH_MAX];
	int locks[256], mark[256];
	size_t n = 0;
	struct dirent *e;
	DIR *d = opendir(cache_dir);

	if (d == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		const char *dot = strchr(e->d_name, '.');
		size_t len = dot ? (size_t)(dot - e->d_name) : strlen(e->d_name);
		struct stat st;

		if (!is_key(e->d_name, len))
			continue;
		if (dot != NULL && (strncmp(dot, ".tmp-", 5) == 0 || strncmp(dot, ".del-", 5) == 0)) {
			/* An extraction whose process is gone, or a removal cut short. */
			long pid = strtol(dot + 5, NULL, 10);
			if (dot[1] == 'd' || pid <= 0 || (kill((pid_t)pid, 0) < 0 && errno == ESRCH)) {
				entry_path(path, sizeof(path), cache_dir, e->d_name, "");
				remove_tree(path);
			}
			continue;
		}
		if (dot != NULL || n == 256)
			continue;
		memcpy(keys[n], e->d_name, 32);
		keys[n][32] = '\0';
		entry_path(path, sizeof(path), cache_dir, keys[n], ".lock");
		locks[n] = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
		entries[n].in_use = locks[n] < 0 || flock(locks[n], LOCK_EX | LOCK_NB) < 0;
		entries[n].last_use = locks[n] >= 0 && fstat(locks[n], &st) == 0 ?
				      (long long)st.st_mtime : 0;
		entries[n].bytes = 0;
		entry_path(path, sizeof(path), cache_dir, keys[n], ".size");
		{
			FILE *f = fopen(path, "re");
			if (f != NULL) {
				if (fscanf(f, "%llu", &entries[n].bytes) != 1)
					entries[n].bytes = 0;
				fclose(f);
			}
		}
		n++;
	}
	closedir(d);
	sq_cache_evict_plan(entries, n, max_bytes, SQ_CACHE_MAX_AGE_S, (long long)time(NULL),
			    mark);
	for (size_t i = 0; i < n; i++) {
		if (mark[i]) {
			char from[PATH_MAX], to[PATH_MAX + 32];
			/* Renamed first: a tree half removed is never taken for a complete one. */
			entry_path(from, sizeof(from), cache_dir, keys[i], "");
			snprintf(to, sizeof(to), "%s.del-%d", from, (int)getpid());
			if (rename(from, to) == 0)
				remove_tree(to);
			entry_path(from, sizeof(from), cache_dir, keys[i], ".size");
			unlink(from);
		}
		if (locks[i] >= 0)
			close(locks[i]);
	}
}

int sq_extracted_build(const char *cache_dir, const char *key, const char *image,
		       const char *unsquashfs, unsigned long long max_bytes)
{
	char lock[PATH_MAX], tmp[PATH_MAX], dest[PATH_MAX + 8], final[PATH_MAX], size[PATH_MAX];

	if (strlen(cache_dir) + 64 >= PATH_MAX)
		return -1;
	int fd, status = -1, rc = -1;
	pid_t pid;

	setpriority(PRIO_PROCESS, 0, 19);
	syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, IOPRIO_CLASS_IDLE << 13);
	entry_path(lock, sizeof(lock), cache_dir, key, ".lock");
	fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0) {
		if (fd >= 0)
			close(fd);
		return 0;    /* another job extracts it (or uses it: then it is complete) */
	}
	if (sq_extracted_ready(cache_dir, key)) {
		close(fd);
		return 0;
	}
	sq_extracted_evict(cache_dir, max_bytes);
	snprintf(tmp, sizeof(tmp), "%s/%s.tmp-%d", cache_dir, key, (int)getpid());
	snprintf(dest, sizeof(dest), "%s/rootfs", tmp);
	if (mkdir(tmp, 0700) < 0)
		goto out;
	pid = fork();
	if (pid == 0) {
		int devnull = open("/dev/null", O_RDWR);
		if (devnull >= 0) {
			dup2(devnull, 0);
			dup2(devnull, 1);
		}
		execl(unsquashfs, unsquashfs, "-no-progress", "-no-xattrs", "-d", dest, image,
		      (char *)NULL);
		_exit(127);
	}
	while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (pid < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		goto out;
	tree_bytes = 0;
	nftw(tmp, add_size, 32, FTW_PHYS);
	{
		/* On disk before it is published: a crash never leaves a complete-looking,
		 * empty tree. */
		int dfd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd >= 0) {
			syncfs(dfd);
			close(dfd);
		}
	}
	entry_path(size, sizeof(size), cache_dir, key, ".size");
	{
		FILE *f = fopen(size, "we");
		if (f != NULL) {
			fprintf(f, "%llu\n", tree_bytes);
			fclose(f);
		}
	}
	entry_path(final, sizeof(final), cache_dir, key, "");
	if (rename(tmp, final) == 0)
		rc = 0;
out:
	if (rc < 0)
		remove_tree(tmp);
	futimens(fd, NULL);
	close(fd);
	return rc;
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
