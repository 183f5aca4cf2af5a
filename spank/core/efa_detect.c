/*
 * efa_detect.c: what the node has -- EFA devices in sysfs and /dev, the instance
 * type, the memlock limit, and the host's libfabric and aws-ofi-nccl.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "efa.h"
#include "efa_internal.h"
#include "strbuf.h"

static const char *root_or(const char *root, const char *dflt)
{
	return root && *root ? root : dflt;
}

/* A root that does not exist is a node without EFA (plugstack roots may name a tree
 * that only some nodes have, or that appears later); one that exists but is not a
 * directory is a configuration error. */
static int check_root(const char *what, const char *root, char *err, size_t errlen)
{
	struct stat st;
	char shown[SQ_SHOW_MAX];

	if (stat(root, &st) != 0 ? errno == ENOENT : S_ISDIR(st.st_mode))
		return 0;
	return sq_errf(err, errlen, "%s '%s' is not a directory: point %s at the node's %s tree",
		       what, sq_show(root, shown, sizeof(shown)), what,
		       strcmp(what, "efa_sysfs_root") == 0 ? "sysfs" :
		       strcmp(what, "efa_dev_root") == 0 ? "/dev" : "/opt/amazon");
}

static void read_instance_type(const char *sysfs, struct sq_efa_node *node)
{
	char path[PATH_MAX];
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "%s/devices/virtual/dmi/id/product_name", sysfs);
	f = fopen(path, "re");
	if (!f)
		return;
	n = fread(node->instance_type, 1, sizeof(node->instance_type) - 1, f);
	fclose(f);
	node->instance_type[n] = '\0';
	/* keep the first line, without trailing blanks */
	n = strcspn(node->instance_type, "\r\n");
	while (n > 0 && (node->instance_type[n - 1] == ' ' || node->instance_type[n - 1] == '\t'))
		n--;
	node->instance_type[n] = '\0';
}

/* A device is EFA when its device/driver link ends in "/efa" (the kernel's efa driver). */
static int is_efa_device(const char *sysfs, const char *name)
{
	char path[PATH_MAX], target[PATH_MAX];
	ssize_t n;
	const char *base;

	snprintf(path, sizeof(path), "%s/class/infiniband/%s/device/driver", sysfs, name);
	n = readlink(path, target, sizeof(target) - 1);
	if (n <= 0)
		return 0;
	target[n] = '\0';
	base = strrchr(target, '/');
	return strcmp(base ? base + 1 : target, "efa") == 0;
}

static void count_devices(const char *sysfs, struct sq_efa_node *node)
{
	char path[PATH_MAX];
	DIR *d;
	struct dirent *e;
	size_t len;

	snprintf(path, sizeof(path), "%s/class/infiniband", sysfs);
	d = opendir(path);
	if (!d)
		return;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.' || !is_efa_device(sysfs, e->d_name))
			continue;
		node->n_devices++;
		len = strlen(e->d_name);
		if (len < sizeof(node->first_device) &&
		    (!node->first_device[0] || strcmp(e->d_name, node->first_device) < 0))
			memcpy(node->first_device, e->d_name, len + 1);
	}
	closedir(d);
}

/* uverbs entries are character devices on a node; prepared test trees cannot make
 * device nodes without root, so any non-directory entry counts. */
static void count_uverbs(const char *dev, struct sq_efa_node *node)
{
	char path[PATH_MAX];
	DIR *d;
	struct dirent *e;

	snprintf(path, sizeof(path), "%s/infiniband", dev);
	d = opendir(path);
	if (!d)
		return;
	while ((e = readdir(d)) != NULL)
		if (strncmp(e->d_name, "uverbs", 6) == 0 && e->d_type != DT_DIR)
			node->n_uverbs++;
	closedir(d);
}

static void read_memlock(struct sq_efa_node *node)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
		node->memlock = -1;
	else
		node->memlock = (long long)rl.rlim_cur;
}

static void find_host_libs(const char *opt, struct sq_efa_node *node)
{
	static const char *const fab_sub[] = { "efa/lib", "efa/lib64", NULL };
	static const char *const ofi_sub[] = { "ofi-nccl/lib", "ofi-nccl/lib64",
		"aws-ofi-nccl/lib", "aws-ofi-nccl/lib64", NULL };
	char fab[2][PATH_MAX], ofi[4][PATH_MAX];
	const char *fab_dirs[] = { fab[0], fab[1], NULL };
	const char *ofi_dirs[] = { ofi[0], ofi[1], ofi[2], ofi[3], NULL };
	int rootfd;

	for (int i = 0; fab_sub[i]; i++)
		if (snprintf(fab[i], PATH_MAX, "%s/%s", opt, fab_sub[i]) >= PATH_MAX)
			return;
	for (int i = 0; ofi_sub[i]; i++)
		if (snprintf(ofi[i], PATH_MAX, "%s/%s", opt, ofi_sub[i]) >= PATH_MAX)
			return;
	rootfd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0)
		return;
	sq_efa_find_lib(rootfd, fab_dirs, "libfabric.so", 0, &node->libfabric);
	if (sq_efa_find_lib(rootfd, ofi_dirs, "libnccl-net", 1, &node->ofi_nccl))
		sq_efa_ofi_describe(rootfd, &node->ofi_nccl);
	close(rootfd);
}

int sq_efa_detect(const struct sq_efa_roots *roots, struct sq_efa_node *node,
		  char *err, size_t errlen)
{
	const char *sysfs = root_or(roots ? roots->sysfs : NULL, "/sys");
	const char *dev = root_or(roots ? roots->dev : NULL, "/dev");
	const char *opt = root_or(roots ? roots->opt : NULL, "/opt/amazon");
	char opt_abs[PATH_MAX];

	memset(node, 0, sizeof(*node));
	if (check_root("efa_sysfs_root", sysfs, err, errlen) ||
	    check_root("efa_dev_root", dev, err, errlen) ||
	    check_root("efa_opt_root", opt, err, errlen))
		return -1;
	/* absolute and symlink-free: it names the bind-mount sources */
	if (!realpath(opt, opt_abs) && snprintf(opt_abs, sizeof(opt_abs), "%s", opt) >= PATH_MAX)
		opt_abs[0] = '\0';
	/* room left for "/aws-ofi-nccl/lib64/" + a file name in struct sq_efa_lib */
	if (strlen(opt_abs) > SQ_EFA_PATH_LEN - 64 ||
	    snprintf(node->opt_root, sizeof(node->opt_root), "%s", opt_abs) < 0)
		return sq_errf(err, errlen, "efa_opt_root is longer than %d bytes: use a "
			       "shorter path", SQ_EFA_PATH_LEN - 64);

	read_instance_type(sysfs, node);
	count_devices(sysfs, node);
	count_uverbs(dev, node);
	read_memlock(node);
	sq_efa_profile_apply(node);
	find_host_libs(opt_abs, node);
	return 0;
}
