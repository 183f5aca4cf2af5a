/* extracted_name.c: see extracted_name.h. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
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

int sq_extracted_drop_copies(const char *local_cache, long uid, unsigned int jobid)
{
	char err[SQ_ERR_LEN], name[24], prefix[32];
	struct dirent *e;
	int top, fd, n = 0;
	DIR *d;

	top = sq_dir_open_checked(AT_FDCWD, local_cache, -1, err, sizeof(err));
	if (top < 0)
		return -1;
	snprintf(name, sizeof(name), "%ld", uid);
	fd = sq_dir_open_checked(top, name, uid, err, sizeof(err));
	close(top);
	if (fd < 0 || (d = fdopendir(fd)) == NULL) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	snprintf(prefix, sizeof(prefix), "copy-%u.", jobid);
	while ((e = readdir(d)) != NULL)
		if (strncmp(e->d_name, prefix, strlen(prefix)) == 0 &&
		    unlinkat(dirfd(d), e->d_name, 0) == 0)
			n++;
	closedir(d);
	return n;
}

int sq_extracted_ready(const char *cache_dir, const char *key)
{
	char path[PATH_MAX];
	struct stat st;

	if ((size_t)snprintf(path, sizeof(path), "%s/%s/rootfs", cache_dir, key) >= sizeof(path))
		return 0;
	return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}
