/* extracted_name.c: see extracted_name.h. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "extracted_name.h"
#include "nodecache.h"
#include "safeopen.h"
#include "strbuf.h"

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

const char *sq_extracted_sbcast(void)
{
	static const char *const tools[] = { "/usr/bin/sbcast", "/usr/local/bin/sbcast",
					     "/opt/slurm/bin/sbcast", NULL };

	for (int i = 0; tools[i]; i++)
		if (access(tools[i], X_OK) == 0)
			return tools[i];
	return NULL;
}

/* In the user directory uid of the cache (top): remove the copies of job jobid (0: none)
 * and those nothing will use. The number removed, -1 when the directory is refused. */
static int drop_in(int top, long uid, unsigned int jobid)
{
	char err[SQ_ERR_LEN], name[24], prefix[32];
	struct dirent *e;
	int fd, n = 0;
	DIR *d;

	snprintf(name, sizeof(name), "%ld", uid);
	fd = sq_dir_open_checked(top, name, uid, err, sizeof(err));
	if (fd < 0 || (d = fdopendir(fd)) == NULL) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	snprintf(prefix, sizeof(prefix), "copy-%u.", jobid);
	while ((e = readdir(d)) != NULL)
		if (((jobid != 0 && strncmp(e->d_name, prefix, strlen(prefix)) == 0) ||
		     sq_copy_unused(dirfd(d), e->d_name, (long long)time(NULL))) &&
		    unlinkat(dirfd(d), e->d_name, 0) == 0)
			n++;
	closedir(d);
	return n;
}

int sq_extracted_drop_copies(const char *local_cache, long uid, unsigned int jobid)
{
	char err[SQ_ERR_LEN];
	int top, n;

	top = sq_dir_open_checked(AT_FDCWD, local_cache, -1, err, sizeof(err));
	if (top < 0)
		return -1;
	n = drop_in(top, uid, jobid);
	close(top);
	return n;
}

int sq_extracted_sweep_copies(const char *local_cache)
{
	char err[SQ_ERR_LEN];
	struct dirent *e;
	int top, fd, n = 0;
	DIR *d;

	top = sq_dir_open_checked(AT_FDCWD, local_cache, -1, err, sizeof(err));
	if (top < 0)
		return -1;
	fd = dup(top);
	if (fd < 0 || (d = fdopendir(fd)) == NULL) {
		if (fd >= 0)
			close(fd);
		close(top);
		return -1;
	}
	while ((e = readdir(d)) != NULL) {
		char *end;
		long uid = strtol(e->d_name, &end, 10);
		int got;

		/* The users' directories alone (each checked: the user's, not writable by
		 * others), named by their uid as the plugin makes them. */
		if (e->d_name[0] < '0' || e->d_name[0] > '9' || *end != '\0' || uid < 0)
			continue;
		got = drop_in(top, uid, 0);
		n += got > 0 ? got : 0;
	}
	closedir(d);
	close(top);
	return n;
}

/* The lock of a copy-JOB.STEP.WHAT: copy-JOB.STEP.lock. 0 ok, -1 not such a name. */
static int copy_lock_name(const char *name, char *lock, size_t len)
{
	const char *dot = strrchr(name, '.');
	size_t stem;

	if (strncmp(name, "copy-", 5) != 0 || dot == NULL || dot == name + 4)
		return -1;
	stem = (size_t)(dot - name);
	if ((size_t)snprintf(lock, len, "%.*s.lock", (int)stem, name) >= len)
		return -1;
	return 0;
}

int sq_copy_unused(int dfd, const char *name, long long now)
{
	char lock[NAME_MAX + 8];
	struct stat st;
	int fd, held;

	if (copy_lock_name(name, lock, sizeof(lock)) < 0 ||
	    fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || S_ISDIR(st.st_mode) ||
	    now - (long long)st.st_mtime < SQ_COPY_QUIET_S)
		return 0;
	fd = openat(dfd, lock, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT || errno == ELOOP;
	held = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && flock(fd, LOCK_EX | LOCK_NB) < 0;
	close(fd);
	return !held;
}

int sq_extracted_ready(const char *cache_dir, const char *key)
{
	char path[PATH_MAX];
	struct stat st;

	if ((size_t)snprintf(path, sizeof(path), "%s/%s/rootfs", cache_dir, key) >= sizeof(path))
		return 0;
	return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}
