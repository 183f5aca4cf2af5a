/*
 * efa_libs.c: finding libfabric and aws-ofi-nccl in a directory tree (the host's
 * /opt/amazon or an image root), and what the plugin library calls its network.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "efa.h"
#include "efa_internal.h"
#include "strbuf.h"

int sq_efa_open_in(int rootfd, const char *path, int flags)
{
	struct open_how how;
	int fd;

	while (*path == '/')
		path++;
	if (*path == '\0')
		path = ".";
	memset(&how, 0, sizeof(how));
	how.flags = (unsigned long long)(flags | O_CLOEXEC);
	how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
	fd = (int)syscall(SYS_openat2, rootfd, path, &how, sizeof(how));
	/* Kernels before 5.6 lack openat2: fall back to a plain lookup, which may follow
	 * an absolute symlink out of the tree (a wrong answer, never a privilege). */
	if (fd < 0 && errno == ENOSYS)
		fd = openat(rootfd, path, flags | O_CLOEXEC);
	return fd;
}

static void copy(char *dst, size_t len, const char *src)
{
	snprintf(dst, len, "%s", src);
}

static int name_matches(const char *name, const char *stem, int dotso_only)
{
	size_t n = strlen(name);

	if (strncmp(name, stem, strlen(stem)) != 0)
		return 0;
	return !dotso_only || (n > 3 && strcmp(name + n - 3, ".so") == 0);
}

/* The smallest matching name in dir (deterministic whatever readdir's order). */
static int best_in_dir(int rootfd, const char *dir, const char *stem, int dotso_only,
		       char *out, size_t outlen)
{
	int fd = sq_efa_open_in(rootfd, dir, O_RDONLY | O_DIRECTORY);
	DIR *d;
	struct dirent *e;
	int found = 0;

	if (fd < 0)
		return 0;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return 0;
	}
	while ((e = readdir(d)) != NULL) {
		if (e->d_type == DT_DIR || !name_matches(e->d_name, stem, dotso_only))
			continue;
		if (strlen(e->d_name) >= outlen)
			continue;
		if (!found || strcmp(e->d_name, out) < 0)
			copy(out, outlen, e->d_name);
		found = 1;
	}
	closedir(d);
	return found;
}

int sq_efa_find_lib(int rootfd, const char *const *dirs, const char *stem,
		    int dotso_only, struct sq_efa_lib *lib)
{
	memset(lib, 0, sizeof(*lib));
	for (size_t i = 0; dirs[i]; i++) {
		const char *rel = dirs[i];
		char *slash;

		while (*rel == '/')
			rel++;
		if (!best_in_dir(rootfd, rel, stem, dotso_only, lib->file, sizeof(lib->file)))
			continue;
		snprintf(lib->dir, sizeof(lib->dir), "/%s", rel);
		copy(lib->prefix, sizeof(lib->prefix), lib->dir);
		slash = strrchr(lib->prefix, '/');
		if (slash && slash != lib->prefix)
			*slash = '\0';
		return 1;
	}
	return 0;
}

/* Which plugin suffix to name: NCCL loads libnccl-net-$NCCL_NET_PLUGIN.so. */
static void pick_suffix(int rootfd, struct sq_efa_lib *lib)
{
	static const char *const preferred[] = { "ofi", "aws-ofi", NULL };
	char path[SQ_EFA_PATH_LEN + 160];
	char first[64] = "";

	for (size_t i = 0; preferred[i]; i++) {
		int fd;

		snprintf(path, sizeof(path), "%s/libnccl-net-%s.so", lib->dir, preferred[i]);
		fd = sq_efa_open_in(rootfd, path, O_RDONLY);
		if (fd >= 0) {
			close(fd);
			copy(lib->plugin_suffix, sizeof(lib->plugin_suffix), preferred[i]);
			return;
		}
	}
	/* Any other libnccl-net-X.so: take the smallest X. */
	if (best_in_dir(rootfd, lib->dir, "libnccl-net-", 1, first, sizeof(first))) {
		size_t n = strlen(first) - strlen("libnccl-net-") - 3;

		if (n > 0 && n < sizeof(lib->plugin_suffix))
			snprintf(lib->plugin_suffix, sizeof(lib->plugin_suffix), "%.*s", (int)n,
				 first + strlen("libnccl-net-"));
	}
}

/* Search the library bytes for a NUL-delimited string constant. */
static int scan_for(const unsigned char *buf, size_t len, const char *needle)
{
	size_t n = strlen(needle) + 2; /* with both NULs */

	for (size_t i = 0; i + n <= len; i++) {
		if (buf[i] == '\0' && buf[i + n - 1] == '\0' &&
		    memcmp(buf + i + 1, needle, n - 2) == 0)
			return 1;
	}
	return 0;
}

/* The network name is the ncclNet struct's name string; plugins 1.12 and newer call
 * it "Libfabric", older ones "AWS Libfabric" (NCCL_NET must match it exactly). */
static void read_net_name(int rootfd, struct sq_efa_lib *lib)
{
	char path[SQ_EFA_PATH_LEN + 160];
	enum { CHUNK = 1 << 16, OVERLAP = 32, LIMIT = 64 << 20 };
	unsigned char *buf;
	size_t have = 0, total = 0;
	int fd, found_new = 0, found_old = 0;

	if (lib->plugin_suffix[0])
		snprintf(path, sizeof(path), "%s/libnccl-net-%s.so", lib->dir, lib->plugin_suffix);
	else
		snprintf(path, sizeof(path), "%s/%s", lib->dir, lib->file);
	fd = sq_efa_open_in(rootfd, path, O_RDONLY);
	if (fd < 0)
		return;
	buf = malloc(CHUNK + OVERLAP);
	if (!buf) {
		close(fd);
		return;
	}
	for (;;) {
		ssize_t r = read(fd, buf + have, CHUNK);

		if (r <= 0)
			break;
		have += (size_t)r;
		total += (size_t)r;
		found_new |= scan_for(buf, have, "Libfabric");
		found_old |= scan_for(buf, have, "AWS Libfabric");
		if (total > LIMIT)
			break;
		/* keep a tail so a string cut by the chunk boundary is still seen */
		if (have > OVERLAP) {
			memmove(buf, buf + have - OVERLAP, OVERLAP);
			have = OVERLAP;
		}
	}
	close(fd);
	free(buf);
	if (found_new)
		copy(lib->net_name, sizeof(lib->net_name), "Libfabric");
	else if (found_old)
		copy(lib->net_name, sizeof(lib->net_name), "AWS Libfabric");
}

void sq_efa_ofi_describe(int rootfd, struct sq_efa_lib *lib)
{
	if (!lib->dir[0])
		return;
	pick_suffix(rootfd, lib);
	read_net_name(rootfd, lib);
}

static void unquote(char *v)
{
	size_t n = strlen(v);

	while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t' || v[n - 1] == '\r'))
		v[--n] = '\0';
	if (n >= 2 && (v[0] == '"' || v[0] == '\'') && v[n - 1] == v[0]) {
		memmove(v, v + 1, n - 2);
		v[n - 2] = '\0';
	}
}

int sq_efa_env_file_get(int rootfd, const char *path, const char *name,
			char *out, size_t outlen)
{
	enum { LIMIT = 1 << 20 };
	size_t nlen = strlen(name);
	struct sq_buf buf;
	char chunk[4096], *data;
	int fd, found = 0;
	ssize_t r;

	fd = rootfd == AT_FDCWD ? open(path, O_RDONLY | O_CLOEXEC)
				: sq_efa_open_in(rootfd, path, O_RDONLY);
	if (fd < 0)
		return 0;
	/* grown with the file (a few hundred bytes, usually), not 1 MiB up front; the last
	 * read may take it up to a chunk past the limit */
	sq_buf_init(&buf);
	while (buf.len < LIMIT && (r = read(fd, chunk, sizeof(chunk))) > 0)
		sq_buf_addn(&buf, chunk, (size_t)r);
	close(fd);
	data = sq_buf_take(&buf); /* "" for an empty file, NULL only when out of memory */
	if (!data)
		return 0;
	for (char *line = data, *next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		while (*line == ' ' || *line == '\t')
			line++;
		if (strncmp(line, "export ", 7) == 0)
			line += 7;
		if (strncmp(line, name, nlen) != 0 || line[nlen] != '=')
			continue;
		copy(out, outlen, line + nlen + 1);
		unquote(out);
		found = 1;
	}
	free(data);
	return found;
}
